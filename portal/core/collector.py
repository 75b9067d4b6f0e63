"""Python's cyclic garbage collector in a long-running server process."""

import gc
import logging
import time

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
    garbage is frozen (a collection of what is not frozen yet, then `gc.freeze`). Frozen
    objects are still freed when nothing refers to them, but those in reference cycles are not:
    once as many connections have closed as half of those open at the last freeze, everything
    is thawed, collected and frozen again, one long pause after much churn."""

    GROWTH = 1.25
    LEAST = 200  # connections: below this, a full collection is short anyway

    def __init__(self):
        self.frozen = 0  # connections open at the last freeze
        self.closed = 0  # connections closed since

    def opened(self, count: int) -> None:
        """A connection opened; `count` are open now."""
        if count >= max(self.LEAST, self.frozen * self.GROWTH):
            self._freeze(count, "frozen")

    def closed_one(self, count: int) -> None:
        """A connection closed; `count` are open now."""
        if not self.frozen:
            return  # nothing of theirs frozen
        self.closed += 1
        if self.closed >= max(self.LEAST, self.frozen // 2):
            gc.unfreeze()
            self._freeze(count, f"thawed after {self.closed} closed, then frozen")

    def _freeze(self, count: int, what: str) -> None:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        self.frozen, self.closed = count, 0
        log.info(
            "connections' objects %s at %d open: %d objects frozen in all, %.0f ms",
            what,
            count,
            gc.get_freeze_count(),
            (time.perf_counter() - started) * 1e3,
        )
