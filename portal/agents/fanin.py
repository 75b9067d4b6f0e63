"""How long this ASGI process takes to handle agent messages: a log line every `period_s`
with the rate and the median and 99th-percentile handling time, for operators sizing the
number of ASGI processes (and for `bench.agents`)."""

import logging
import math
import os
import time

log = logging.getLogger(__name__)


class FanInStats:
    def __init__(self, period_s: float):
        self.period_s = period_s
        self.window_start = time.monotonic()
        self.durations: list[float] = []

    def record(self, seconds: float) -> None:
        self.durations.append(seconds)
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


stats = FanInStats(float(os.environ.get("WANKA_FANIN_REPORT_S", "60")))
