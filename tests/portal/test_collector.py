"""An ASGI process keeps its agents' long-lived sockets out of the collector's sight, and lets
them go again after churn (`core.collector.Freezer`)."""

import asyncio
import gc
import re
import weakref

import pytest
from websockets.asyncio.client import connect

from portal.core.collector import Freezer
from tests.portal.processes import wait_until


class Socket:
    """Stands for a connection's objects: in a reference cycle, as a protocol and its consumer
    are, so only the collector frees it."""

    def __init__(self):
        self.me = self


@pytest.fixture
def freezer():
    gc.unfreeze()
    freezer = Freezer()
    freezer.LEAST = 4
    yield freezer
    gc.unfreeze()


def tracked(obj) -> bool:
    """Whether a full collection walks `obj` (frozen objects are not in its generations)."""
    return any(o is obj for o in gc.get_objects())


def test_connections_are_frozen_each_time_they_grow_by_a_quarter(freezer):
    sockets, freezes = [], []
    for count in range(1, 13):
        sockets.append(Socket())
        freezer.opened(count)
        freezes.append(freezer.frozen)
    assert sorted(set(freezes) - {0}) == [4, 5, 7, 9, 12]  # 4 at least, then 25 % more each
    assert not tracked(sockets[0]) and not tracked(sockets[-1])
    assert gc.get_freeze_count() > 0
    late = Socket()
    freezer.opened(13)  # under 12 * 1.25: not frozen yet
    assert tracked(late)


def test_sockets_closed_after_a_freeze_are_freed_once_half_as_many_have_closed(freezer):
    sockets = [Socket() for _ in range(9)]
    for count in range(1, 10):
        freezer.opened(count)
    assert freezer.frozen == 9
    gone = [weakref.ref(s) for s in sockets[:4]]
    del sockets[:4]
    for closed in range(1, 4):
        freezer.closed_one(9 - closed)
        gc.collect()
        assert all(ref() is not None for ref in gone)  # frozen: kept, though garbage
    freezer.closed_one(5)  # half of the 9 frozen have closed: thawed, collected, frozen again
    assert all(ref() is None for ref in gone)
    assert freezer.frozen == 5 and freezer.closed == 0
    assert not tracked(sockets[0])


def test_closes_before_any_freeze_thaw_nothing(freezer):
    for count in range(3, -1, -1):
        freezer.closed_one(count)
    assert freezer.closed == 0 and gc.get_freeze_count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_server_freezes_its_agents_sockets_at_200_and_thaws_once_they_have_gone(
    portal_server, clean_redis
):
    from django.conf import settings

    from portal.demo import installation

    nodes = installation.build_cluster({"dc-freeze": {"p1": ("H800", 4)}}, nodes_per_leaf=50)
    tokens = [node.issue_token() for node in nodes]
    url = f"ws://127.0.0.1:{portal_server}/ws/agent/"
    log = settings.DATA_DIR / "daphne.log"
    start = len(log.read_text())

    def said(pattern):
        return re.search(pattern, log.read_text()[start:])

    async def agents():
        sockets = []
        for token in tokens:
            headers = {"Authorization": f"Bearer {token}"}
            sockets.append(await connect(url, additional_headers=headers))
        await asyncio.to_thread(wait_until, lambda: said(r"frozen at (\d+) open"), 30)
        for ws in sockets:
            await ws.close()

    asyncio.run(agents())
    assert int(said(r"objects frozen at (\d+) open")[1]) >= 200
    wait_until(lambda: said(r"thawed after 200 closed, then frozen at \d+ open"), 30)
