"""An ASGI process keeps its agents' long-lived sockets out of the collector's sight, and lets
them go again after churn (`core.collector.Freezer`)."""

import asyncio
import gc
import logging
import re
import time
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
    freezer = Freezer([])  # the sockets open
    freezer.LEAST, freezer.LULL_S, freezer.MOST_S = 4, 0.2, 1.0
    yield freezer
    gc.unfreeze()


def tracked(obj) -> bool:
    """Whether a full collection walks `obj` (frozen objects are not in its generations)."""
    return any(o is obj for o in gc.get_objects())


def open_sockets(freezer, count: int) -> None:
    """Open `count` sockets on an event loop of their own, which ends with them (so a freeze
    asked for once the opens pause never comes)."""

    async def opening():
        opened(freezer, count)

    asyncio.run(opening())


def opened(freezer, count: int) -> None:
    for _ in range(count):
        freezer.connections.append(Socket())
        freezer.opened()


async def close(freezer, count: int, every_s: float = 0.0) -> list[weakref.ref]:
    """Close `count` of the open sockets, one each `every_s`; refs to them."""
    gone = []
    for _ in range(count):
        gone.append(weakref.ref(freezer.connections.pop()))
        freezer.closed_one()
        await asyncio.sleep(every_s)
    return gone


def test_connections_are_frozen_each_time_they_grow_by_a_quarter(freezer):
    freezes = []
    for _ in range(12):
        open_sockets(freezer, 1)
        freezes.append(freezer.frozen)
    assert sorted(set(freezes) - {0}) == [4, 5, 7, 9, 12]  # 4 at least, then 25 % more each
    assert not tracked(freezer.connections[0]) and not tracked(freezer.connections[-1])
    assert gc.get_freeze_count() > 0
    open_sockets(freezer, 1)  # 13, under 12 * 1.25: not frozen yet
    assert tracked(freezer.connections[-1])


def test_connections_opened_since_the_last_freeze_are_frozen_once_the_opens_pause(freezer):
    # A fleet that has all connected: the last ones, under a quarter more, are frozen too.
    async def ramp():
        opened(freezer, 16)  # frozen at 4 (the least), then at 5, 7, 9, 12 and 15
        waiting = freezer.frozen, tracked(freezer.connections[-1])  # 16, under 15 * 1.25
        await asyncio.sleep(freezer.LULL_S / 2)
        opened(freezer, 1)  # 17: the pause starts again
        await asyncio.sleep(freezer.LULL_S * 0.75)
        still = freezer.frozen
        await asyncio.sleep(freezer.LULL_S)
        return waiting, still

    waiting, still = asyncio.run(ramp())
    assert waiting == (15, True) and still == 15
    assert freezer.frozen == 17 and freezer.settling is None
    assert not tracked(freezer.connections[-1])


def test_sockets_closed_after_a_freeze_are_freed_after_half_have_closed_and_a_lull(freezer):
    open_sockets(freezer, 9)
    assert freezer.frozen == 9

    async def churn():
        gone = await close(freezer, 3)
        await asyncio.sleep(freezer.LULL_S * 2)
        gc.collect()
        kept = all(ref() is not None for ref in gone)  # frozen: kept, though garbage
        gone += await close(freezer, 1)  # half of the 9 frozen have closed
        thawed_at_once = freezer.closed == 0
        await asyncio.sleep(freezer.LULL_S * 2)
        return gone, kept, thawed_at_once

    gone, kept, thawed_at_once = asyncio.run(churn())
    assert kept and not thawed_at_once
    assert all(ref() is None for ref in gone)  # thawed, collected, frozen again
    assert freezer.frozen == 5 and freezer.closed == 0
    assert not tracked(freezer.connections[0])


def test_a_wave_of_closes_is_thawed_once_after_it(freezer, caplog):
    freezer.LULL_S = 0.5
    open_sockets(freezer, 64)
    caplog.set_level(logging.INFO, "portal.core.collector")

    async def wave():  # a thaw due after 32 closed; at each half, it would thaw 32, 16, 8, ...
        gone = await close(freezer, 60, every_s=0.005)
        await asyncio.sleep(freezer.LULL_S * 2)
        return gone

    gone = asyncio.run(wave())
    thaws = [r.getMessage() for r in caplog.records if "thawed" in r.getMessage()]
    assert len(thaws) == 1 and "thawed after 60 closed, then frozen at 4 open" in thaws[0]
    assert all(ref() is None for ref in gone)


def test_closes_that_never_pause_still_thaw_within_most_s(freezer):
    open_sockets(freezer, 64)

    async def trickle():
        while freezer.due is None:
            await close(freezer, 1, every_s=freezer.LULL_S / 4)
        due = freezer.due
        while freezer.due is not None:  # no lull: only the cap ends the wait
            await close(freezer, 1, every_s=freezer.LULL_S / 4)
        return time.monotonic() - due

    waited = asyncio.run(trickle())
    assert freezer.MOST_S <= waited < freezer.MOST_S + 1


def test_a_thaw_whose_loop_went_first_is_due_again(freezer):
    open_sockets(freezer, 8)
    asyncio.run(close(freezer, 4))  # a thaw due; the loop ends before the lull
    assert freezer.due is not None and freezer.closed == 4
    time.sleep(freezer.MOST_S + freezer.LULL_S)

    async def later():
        await close(freezer, 1)
        await asyncio.sleep(freezer.LULL_S * 2)

    asyncio.run(later())
    assert freezer.due is None and freezer.closed == 0 and freezer.frozen == 3


def test_closes_before_any_freeze_thaw_nothing(freezer):
    open_sockets(freezer, 3)  # under LEAST: nothing frozen
    asyncio.run(close(freezer, 3))
    assert freezer.closed == 0 and freezer.due is None and gc.get_freeze_count() == 0


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
