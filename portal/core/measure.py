"""Timings kept in Redis, so that every process adds to them and whichever process is scraped
exports them all (`portal.metrics`). A histogram is a Redis hash of cumulative bucket counts
(one field per upper bound), a "sum" and a "count", as Prometheus keeps one."""

import json
import logging
import math
import os
import socket

from redis import RedisError

from portal.core.redis import client

log = logging.getLogger(__name__)

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, math.inf)
CYCLE = "wanka:metrics:cycle"  # Redis hash: the histogram of scheduling cycles' durations
LAST_CYCLE = "wanka:metrics:cycle:last"  # the last cycle's snapshot load and step times, JSON
# Redis hashes "<prefix><host>:<pid>": an ASGI process's agent-message histogram and its
# connected agents, gone a while after the process stops writing.
FANIN = "wanka:metrics:fanin:"
FANIN_TTL_S = 300


def bound(upper: float) -> str:
    """A bucket's field name and `le` label: "0.25", "1.0", "+Inf"."""
    return "+Inf" if upper == math.inf else repr(upper)


def observe(pipe, key: str, values: list[float]) -> None:
    """Queue on `pipe` (sync or asyncio) the addition of `values` to the histogram at `key`."""
    for upper in BUCKETS:
        below = sum(1 for value in values if value <= upper)
        if below:
            pipe.hincrby(key, bound(upper), below)
    pipe.hincrbyfloat(key, "sum", sum(values))
    pipe.hincrby(key, "count", len(values))


def histogram(fields: dict[str, str]) -> tuple[list[tuple[str, float]], float]:
    """A histogram hash as (cumulative buckets, sum), as HistogramMetricFamily takes them."""
    buckets = [(bound(upper), float(fields.get(bound(upper), 0))) for upper in BUCKETS]
    return buckets, float(fields.get("sum", 0))


def record_cycle(seconds: float, snapshot_s: float, steps: dict[str, float]) -> None:
    """Add a scheduling cycle's duration to the histogram and keep its snapshot load and step
    times. A Redis error is logged, not raised: it must never fail the cycle."""
    try:
        with client().pipeline() as pipe:
            observe(pipe, CYCLE, [seconds])
            pipe.set(LAST_CYCLE, json.dumps({"snapshot_s": snapshot_s, "steps": steps}))
            pipe.execute()
    except RedisError:
        log.warning("cannot record the scheduling cycle's timings in Redis", exc_info=True)


def last_cycle() -> dict:
    """The last cycle's {"snapshot_s": seconds, "steps": {step: seconds}}; empty before one."""
    raw = client().get(LAST_CYCLE)
    return json.loads(raw) if raw else {}


def record_fanin(pipe, durations: list[float], connected: int) -> None:
    """Queue on `pipe` this process's agent messages handled since the last call (their
    handling times) and its number of connected agents."""
    key = f"{FANIN}{socket.gethostname()}:{os.getpid()}"
    observe(pipe, key, durations)
    pipe.hset(key, "connected", connected)
    pipe.expire(key, FANIN_TTL_S)


def fanin_processes() -> dict[str, dict[str, str]]:
    """Each live ASGI process ("host:pid") and its fan-in hash."""
    redis = client()
    keys = sorted(redis.scan_iter(match=f"{FANIN}*", count=1000))
    with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hgetall(key)
        found = pipe.execute()
    return {
        key.removeprefix(FANIN): fields for key, fields in zip(keys, found, strict=True) if fields
    }
