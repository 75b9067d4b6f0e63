"""The fixed cast, a small cluster and real processes, shared by every test.

Tenant Acme: admin Alice, member Bob, viewer Victor. Tenant Globex: admin Charlie, who must never
see Acme's things. One region with two data centers of H800 nodes and one pod of H20 nodes.
"""

import threading

import pytest
from django.contrib.auth.models import User
from django.core.signals import request_started
from django.db import connection

from portal.tenancy.choices import Role
from portal.tenancy.models import Membership, Tenant
from tests.builders import make_cluster, make_queue


def pytest_collection_modifyitems(config, items):
    # The tests with the session's Celery worker last: once started it takes every task any
    # test enqueues, and would run a cycle (and hold its locks) on the database of a test that
    # never asked for one, which a deadlocked flush at that test's end once showed.
    items.sort(key=lambda item: "celery_worker" in getattr(item, "fixturenames", ()))
    for item in items:
        # Transactions that other processes or threads see: locks, isolation and commit order
        # are the database server's own, so these run again on PostgreSQL (`servers`). Not the
        # browser tests: what a page draws is the same over either database.
        database = item.get_closest_marker("django_db")
        if database and database.kwargs.get("transaction") and "browser" not in item.keywords:
            item.add_marker(pytest.mark.servers)
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL (as .ci/run does)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_caches(request):
    """Every test starts with no request counted against the API's rates (they live in Redis,
    where one test's failed tokens would otherwise count against the next), no dashboard charts
    kept and nothing in the process's cache."""
    if "scheduler" not in request.path.parts:
        from django.core.cache import cache

        from portal.core import redis

        cache.clear()
        client = redis.client()
        if keys := client.keys("wanka:throttle:*") + client.keys("wanka:day-charts:*"):
            client.delete(*keys)


@pytest.fixture(autouse=True)
def english_after():
    """Every test ends in the default language: a test client's request in Chinese leaves
    Chinese active in the test's thread (Django's middleware activates a request's language
    and leaves it), where the next test's code outside a request would speak it."""
    yield
    from django.utils import translation

    translation.deactivate()


def _member(username, tenant, role):
    user = User.objects.create_user(username, password="pw-" + username)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


@pytest.fixture
def cluster(db):
    return make_cluster()


@pytest.fixture
def acme(db):
    return Tenant.objects.create(name="Acme", slug="acme")


@pytest.fixture
def globex(db):
    return Tenant.objects.create(name="Globex", slug="globex")


@pytest.fixture
def alice(acme):
    return _member("alice", acme, Role.ADMIN)


@pytest.fixture
def bob(acme):
    return _member("bob", acme, Role.MEMBER)


@pytest.fixture
def victor(acme):
    return _member("victor", acme, Role.VIEWER)


@pytest.fixture
def charlie(globex):
    return _member("charlie", globex, Role.ADMIN)


@pytest.fixture
def operator(db):
    return User.objects.create_superuser("operator", password="pw-operator")


@pytest.fixture
def acme_llm(cluster, acme):
    return make_queue(acme, "llm", h800=64)


@pytest.fixture(scope="session")
def portal_server(django_db_setup, django_db_blocker):
    """A real ASGI server (daphne) on the test database; yields its port."""
    from tests.portal.processes import start_server

    with django_db_blocker.unblock():
        server, port = start_server()
    yield port
    server.stop()
    _end_stray_sessions(django_db_blocker)


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker):
    from tests.portal.processes import start_worker

    with django_db_blocker.unblock():
        worker = start_worker()
    yield worker
    worker.stop()
    _end_stray_sessions(django_db_blocker)


def _end_stray_sessions(django_db_blocker) -> None:
    """End the sessions a stopped process left on the test database, so that it can be dropped
    (a worker killed in the middle of a task leaves its session for a moment)."""
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
def clean_redis():
    """Each cross-process test starts without old telemetry, history or cycle lock. (Not a
    FLUSHDB: that would drop the broker's queue bindings under the running worker.)"""
    from portal.agents.consumers import SAVES_SEEN
    from portal.agents.limits import FAULTS
    from portal.agents.progress import SEEN
    from portal.cluster.gpu_history import HOURS, MINUTES
    from portal.cluster.summary import (
        BUSY,
        HISTORY,
        LAST_SEEN,
        REPORTED,
        ROLLED,
        ROLLUPS,
        SEEN_SINCE,
        TELEMETRY,
        WEB_BEAT,
        WEB_UP_SINCE,
    )
    from portal.core.redis import client
    from portal.workloads.cycle import AGAIN, LOCK
    from portal.workloads.desired import BEHIND
    from portal.workloads.eta import LOCK as ETA_LOCK
    from portal.workloads.eta import UNTIL

    redis = client()
    redis.delete(
        TELEMETRY,
        BUSY,
        LAST_SEEN,
        SEEN_SINCE,
        WEB_BEAT,
        WEB_UP_SINCE,
        HISTORY,
        ROLLED,
        *(key for key, *_ in ROLLUPS.values()),
        REPORTED,
        LOCK,
        AGAIN,
        BEHIND,
        ETA_LOCK,
        UNTIL,
        *redis.scan_iter(f"{SAVES_SEEN}*"),
        *redis.scan_iter(f"{FAULTS}*"),
        *redis.scan_iter(f"{SEEN}*"),
        *redis.scan_iter(f"{MINUTES}*"),
        *redis.scan_iter(f"{HOURS}*"),
    )
    return redis


@pytest.fixture
def fleet(portal_server, celery_worker, clean_redis):
    """One pod of 8 simulated H800 nodes (64 GPUs), their agents on sockets to the test
    server, a Celery worker behind it."""
    from portal.cluster.models import Node
    from tests.builders import make_cluster
    from tests.portal.processes import start_fleet, wait_until

    make_cluster({"dc1": {"p1": ("H800", 2)}}, connected=False)
    fleet = start_fleet(portal_server)
    wait_until(
        lambda: Node.objects.filter(connected=True).count() == 8, 30, "8 agents", check=fleet
    )
    yield
    fleet.stop()


@pytest.fixture
def live(portal_server, clean_redis):
    """Open live sockets to the test server as users: `live(user)` -> a LiveClient."""
    from django.test import Client

    from tests.portal.live_client import LiveClient

    clients = []

    def open_as(user):
        browser = Client()
        browser.force_login(user)
        clients.append(LiveClient(portal_server, browser))
        clients[-1].browser = browser  # its session: signing out there ends the socket
        return clients[-1]

    yield open_as
    for client in clients:
        client.close()


@pytest.fixture
def threads_seen():
    """The names of the threads Django requests start on while the test runs."""
    seen = set()

    def note(**kwargs):
        seen.add(threading.current_thread().name)

    request_started.connect(note, dispatch_uid="threads_seen")
    yield seen
    request_started.disconnect(dispatch_uid="threads_seen")
