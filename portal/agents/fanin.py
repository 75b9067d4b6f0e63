"""How long this ASGI process takes to handle agent messages: a log line every `period_s`
with the rate and the median and 99th-percentile handling time, for operators sizing the
number of ASGI processes (and for `bench.agents`); and the same, with the process's connected
agents, added to its counters in Redis every FLUSH_S or FLUSH_EVERY messages (`core.measure`,
for /metrics)."""

import logging
import math
import os
import time

from redis import RedisError

from portal.core import measure
from portal.core.redis import aclient

log = logging.getLogger(__name__)

FLUSH_S = 1.0
FLUSH_EVERY = 1000  # messages: sooner than FLUSH_S in a burst


class FanInStats:
    def __init__(self, period_s: float):
        self.period_s = period_s
        self.window_start = time.monotonic()
        self.durations: list[float] = []
        self.unflushed: list[float] = []
        self.flushed_at = self.window_start

    def record(self, seconds: float) -> None:
        self.durations.append(seconds)
        self.unflushed.append(seconds)
        now = time.monotonic()
        if now - self.window_start >= self.period_s:
            self.report(now - self.window_start)
            self.window_start, self.durations = now, []

    def report(self, elapsed: float) -> None:
        ordered = sorted(self.durations)
        # Nearest-rank percentiles.
        p50, p99 = (ordered[math.ceil(q * len(ordered)) - 1] * 1e3 for q in (0.5, 0.99))
        log.info(
            "agent fan-in: %d messages in %.1f s (%.0f/s), handle p50 %.2f ms p99 %.2f ms",
            len(ordered),
            elapsed,
            len(ordered) / elapsed,
            p50,
            p99,
        )

    def due(self) -> bool:
        """Whether recorded messages should go to Redis now."""
        if len(self.unflushed) >= FLUSH_EVERY:
            return True
        return bool(self.unflushed) and time.monotonic() - self.flushed_at >= FLUSH_S

    async def flush(self, connected: int) -> None:
        """Add the messages recorded since the last flush to this process's counters in Redis,
        with its number of connected agents. A Redis error loses them, and is logged."""
        durations, self.unflushed, self.flushed_at = self.unflushed, [], time.monotonic()
        try:
            async with aclient().pipeline() as pipe:
                measure.record_fanin(pipe, durations, connected)
                await pipe.execute()
        except RedisError:
            log.warning("cannot record the agent fan-in in Redis", exc_info=True)


stats = FanInStats(float(os.environ.get("WANKA_FANIN_REPORT_S", "60")))
