"""Python's cyclic garbage collector in a long-running server process."""

import asyncio
import gc
import logging
import time
from collections.abc import Sized

log = logging.getLogger(__name__)


def freeze_loaded() -> None:
    """Move what the process has loaded so far (Django, the URL conf, every module, compiled
    templates) out of the collector's sight: a full collection then walks only what requests
    and tasks made since, not the 200,000 objects of a loaded portal. At full size, one request
    in three for the operators' queues page paid 125 ms of full collection; 12 ms once frozen.
    Called once a process has loaded: the ASGI application, each Celery worker process."""
    gc.collect()
    gc.freeze()


class Freezer:
    """Long-lived connections kept out of the collector's sight, as `freeze_loaded` keeps the
    loaded portal. A full collection walks every object not frozen, and an ASGI process with
    4,000 agents' sockets (their protocols, consumers and tasks) holds about half a million
    more: each full collection stopped its event loop for 0.5-1.2 s, and every message waited
    behind it.

    When the open connections have grown by a quarter since the last freeze, what is not
    garbage is frozen (a collection of what is not frozen yet, then `gc.freeze`), and again
    once the opens pause for `LULL_S` with some not frozen: else up to the last quarter of a
    fleet that has all connected stays in sight (with 4,000 agents a process, each full
    collection of the steady fleet walked 166,000-181,000 objects; 122,000-156,000 once they
    too are frozen, most of them what each connection's waiting read makes anew with every
    message, which no freeze keeps). Frozen
    objects are still freed when nothing refers to them, but those in reference cycles are not:
    once as many connections have closed as half of those open at the last freeze, everything
    is thawed, collected and frozen again, one long pause after much churn. The thaw waits for
    a lull of `LULL_S` in the closes (at most `MOST_S`): when thousands go at once, one thaw
    frees them all, where a thaw at each half had paused the loop again and again (five pauses
    of 0.3-1.1 s as 4,000 agents left) while those just closed were still being let go of."""

    GROWTH = 1.25
    LEAST = 200  # connections: below this, a full collection is short anyway
    LULL_S = 2.0
    MOST_S = 30.0

    def __init__(self, connections: Sized):
        self.connections = connections  # those open
        self.frozen = 0  # connections open at the last freeze
        self.closed = 0  # connections closed since the last thaw
        self.last_closed = 0.0
        self.due = None  # when enough had closed for a thaw (monotonic), till it is done
        self.last_opened = 0.0
        self.settling = None  # when a freeze after the opens pause was asked for (monotonic)

    def opened(self) -> None:
        """A connection opened (it is in `connections`); called on the event loop."""
        count = len(self.connections)
        if count >= max(self.LEAST, self.frozen * self.GROWTH):
            self._freeze("frozen")
        elif count > self.frozen and count >= self.LEAST:
            self.last_opened = now = time.monotonic()
            if self.settling is not None and now > self.settling + self.MOST_S + self.LULL_S:
                self.settling = None  # the loop that was to freeze went first
            if self.settling is None:
                asyncio.get_running_loop().call_later(self.LULL_S, self._freeze_after_lull)
                self.settling = now

    def closed_one(self) -> None:
        """A connection closed (it has left `connections`); called on the event loop."""
        if not self.frozen:
            return  # nothing of theirs frozen
        self.closed += 1
        self.last_closed = now = time.monotonic()
        if self.due is not None and now > self.due + self.MOST_S + self.LULL_S:
            self.due = None  # the loop that was to thaw went first (a test's, say)
        if self.due is None and self.closed >= max(self.LEAST, self.frozen // 2):
            asyncio.get_running_loop().call_later(self.LULL_S, self._thaw_after_lull)
            self.due = now

    def _freeze_after_lull(self) -> None:
        wait = min(self.last_opened + self.LULL_S, self.settling + self.MOST_S) - time.monotonic()
        if wait > 0:
            asyncio.get_running_loop().call_later(wait, self._freeze_after_lull)
            return
        self.settling = None
        if len(self.connections) > self.frozen:
            self._freeze("frozen once the opens paused")

    def _thaw_after_lull(self) -> None:
        wait = min(self.last_closed + self.LULL_S, self.due + self.MOST_S) - time.monotonic()
        if wait > 0:
            asyncio.get_running_loop().call_later(wait, self._thaw_after_lull)
            return
        gc.unfreeze()
        self._freeze(f"thawed after {self.closed} closed, then frozen")
        self.closed, self.due = 0, None

    def _freeze(self, what: str) -> None:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        self.frozen = len(self.connections)
        log.info(
            "connections' objects %s at %d open: %d objects frozen in all, %.0f ms",
            what,
            self.frozen,
            gc.get_freeze_count(),
            (time.perf_counter() - started) * 1e3,
        )
