"""The Celery application. Its tasks are routed by kind of work (settings.CELERY_TASK_ROUTES):
scheduling, recovery, telemetry and what-if runs."""

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _drop_legacy_keys(**kwargs) -> None:
    """Earlier releases kept the latest telemetry in a Redis hash named "telemetry", now the
    name of a Celery queue: a worker reading that hash as its queue would die (WRONGTYPE)."""
    from portal.core.redis import client

    redis = client()
    if redis.type("telemetry") == "hash":
        redis.delete("telemetry")


@worker_process_init.connect
def _freeze_loaded(**kwargs) -> None:
    from portal.core.collector import freeze_loaded

    freeze_loaded()
