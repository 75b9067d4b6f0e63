"""A load generator for inference services: sends requests at their arrival times to the
service's replicas, least busy first, and measures what came back.

The endpoints are asked for again every `refresh_s` (a callable: the portal's endpoint list,
or anything else), as a load balancer would. A request that finds no endpoint waits for one up
to `wait_s` (Knative's activator holds requests for a service at zero the same way); one that
never gets one, or whose replica fails it, is counted as failed.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scheduler.inference import Request

Endpoint = tuple[str, int]


@dataclass
class Report:
    """What a run sent and got back; latencies in seconds."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)  # waited at the replica
    errors: Counter[str] = field(default_factory=Counter)

    def figures(self) -> dict[str, float | int]:
        return {
            "sent": self.sent,
            "ok": self.ok,
            "failed": self.failed,
            "latency_p50_s": _quantile(self.latencies, 0.5),
            "latency_p99_s": _quantile(self.latencies, 0.99),
            "queued_p99_s": _quantile(self.queued, 0.99),
        }


async def drive(
    arrivals: Iterable[Request],
    endpoints: Callable[[], list[Endpoint]],
    *,
    refresh_s: float = 1.0,
    wait_s: float = 10.0,
    timeout_s: float = 120.0,
    on_second: Callable[[float, Report], None] | None = None,
) -> Report:
    """Send every arrival at its time (seconds from now) and wait for all answers."""
    report, busy = Report(), Counter[Endpoint]()
    known: list[Endpoint] = []
    began = time.monotonic()
    refreshed = last_second = -math.inf
    tasks: set[asyncio.Task] = set()

    async def refresh() -> None:
        nonlocal known, refreshed
        refreshed = time.monotonic()
        known = await asyncio.to_thread(endpoints)

    async def one(request: Request) -> None:
        give_up = time.monotonic() + wait_s
        while not known and time.monotonic() < give_up:
            await asyncio.sleep(0.2)
            if time.monotonic() - refreshed >= refresh_s:
                await refresh()
        if not known:
            report.failed += 1
            report.errors["no replica"] += 1
            return
        target = min(known, key=lambda e: busy[e])
        busy[target] += 1
        start = time.monotonic()
        try:
            answer = await asyncio.wait_for(_post(target, request), timeout_s)
            report.ok += 1
            report.latencies.append(time.monotonic() - start)
            report.queued.append(answer.get("queued_s", 0.0))
        except (TimeoutError, OSError, ValueError) as error:
            report.failed += 1
            report.errors[type(error).__name__] += 1
        finally:
            busy[target] -= 1

    await refresh()
    for request in arrivals:
        delay = began + request.at_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        now = time.monotonic()
        if now - refreshed >= refresh_s:
            await refresh()
        if on_second and now - last_second >= 1.0:
            last_second = now
            on_second(now - began, report)
        report.sent += 1
        task = asyncio.create_task(one(request))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks)
    return report


async def _post(endpoint: Endpoint, request: Request) -> dict:
    reader, writer = await asyncio.open_connection(*endpoint)
    try:
        body = json.dumps(
            {"prompt_tokens": request.prompt_tokens, "output_tokens": request.output_tokens}
        ).encode()
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
            % (endpoint[0].encode(), len(body), body)
        )
        await writer.drain()
        status = (await reader.readline()).split(b" ", 2)
        if len(status) < 2 or status[1] != b"200":
            raise ValueError(f"HTTP {status[1:2]}")
        await reader.readuntil(b"\r\n\r\n")
        return json.loads(await reader.read())
    finally:
        writer.close()


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 4)
