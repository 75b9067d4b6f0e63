"""Live fan-out: one dashboard event to many browsers at once.

    DATABASE_URL=postgres://... python -m bench.fanout [--browsers 1000] [--events 20] [--servers 1]

A fresh throwaway database with the demo installation; `--servers` daphne processes and
`--browsers` live sockets (`/ws/live/`) signed in as Alice, spread over them, all in this
process on one event loop (the machine's cores are shared with the servers). Once every socket
is open, `--events` cluster events are published from here, as the workers publish utilization,
`--every` seconds apart; each socket notes when each arrives. Reported per event: the share of
sockets it reached, and the time until the last one had it. Last line JSON: browsers, servers,
events, delivered (share of all event-socket pairs), all_within_1s (share of events that every
socket had within a second), last_p50_s, last_p99_s (time to the last socket), reference_s
(the reference loop, `bench.reference`, timed first). Its processes are stopped at the end,
on failure, on SIGTERM and past `--timeout`.
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import websockets

from bench import database, processes
from bench.agents import servers
from bench.reference import reference_s

EVENT = "bench.fanout"
RAMP = 50  # sockets opening at once


def session_cookie() -> str:
    """The demo installation, and a signed-in session of Alice's."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from portal.demo import installation

    installation.seed()
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="alice"))
    return browser.cookies["sessionid"].value


async def browse(port: int, cookie: str, seen: dict, opened: asyncio.Event, count: list):
    """One browser's live socket: notes the arrival time of each bench event."""
    headers = {"Cookie": f"sessionid={cookie}", "Origin": f"http://127.0.0.1:{port}"}
    async with websockets.connect(
        f"ws://127.0.0.1:{port}/ws/live/", additional_headers=headers, max_size=2**20
    ) as socket:
        count[0] += 1
        if count[0] == count[1]:
            opened.set()
        async for raw in socket:
            message = json.loads(raw)
            if message.get("event") == EVENT:
                seen.setdefault(message["payload"]["seq"], []).append(time.time())


def publish(seq: int) -> float:
    from portal.core.live import CLUSTER_GROUP, send_now

    sent = time.time()
    send_now(CLUSTER_GROUP, {"type": "live.event", "event": EVENT, "payload": {"seq": seq}})
    return sent


async def measure(ports: list[int], cookie: str, browsers: int, events: int, every: float):
    seen: dict[int, list[float]] = {}
    opened, count = asyncio.Event(), [0, browsers]
    tasks = []
    with processes.waiting_for(f"{browsers} live sockets to open"):
        for i in range(browsers):  # in steps of RAMP, as browsers come, not all in one instant
            port = ports[i % len(ports)]
            tasks.append(asyncio.create_task(browse(port, cookie, seen, opened, count)))
            while len(tasks) - count[0] >= RAMP or (i == browsers - 1 and not opened.is_set()):
                failed = [t for t in tasks if t.done() and t.exception()]
                if failed:
                    raise failed[0].exception()
                await asyncio.sleep(0.05)
    print(f"{browsers} sockets open", file=sys.stderr, flush=True)
    await asyncio.sleep(1)  # the last to open have joined their groups
    sent = {}
    for seq in range(events):
        sent[seq] = await asyncio.to_thread(publish, seq)
        await asyncio.sleep(every)
    await asyncio.sleep(2)  # stragglers
    for task in tasks:
        task.cancel()
    return sent, seen


def run(args) -> tuple[dict, dict]:
    """Seed, start the servers, open the sockets, publish: when each event was sent, and
    when each socket had it."""
    from django.conf import settings
    from django.db import connection

    cookie = session_cookie()
    connection.close()
    logs = Path(settings.DATA_DIR) / "bench-fanout"
    logs.mkdir(parents=True, exist_ok=True)
    with servers(args.servers, logs) as started:
        ports = [port for _, port in started]
        return asyncio.run(measure(ports, cookie, args.browsers, args.events, args.every))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browsers", type=int, default=1000)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between events")
    parser.add_argument("--servers", type=int, default=1, help="daphne processes")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    processes.supervise(args.timeout)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    with database.throwaway():
        sent, seen = run(args)
    lasts = []
    for seq, at in sent.items():
        arrivals = seen.get(seq, [])
        last = max(arrivals) - at if arrivals else float("inf")
        complete = len(arrivals) == args.browsers
        lasts.append(last if complete else float("inf"))
        print(
            f"event {seq:3}: reached {len(arrivals)}/{args.browsers}, last after "
            f"{last:.3f} s", file=sys.stderr,
        )  # fmt: skip
    ordered = sorted(lasts)
    summary = {
        "browsers": args.browsers,
        "servers": args.servers,
        "events": args.events,
        "delivered": round(
            sum(len(seen.get(s, [])) for s in sent) / (args.browsers * len(sent)), 4
        ),
        "all_within_1s": round(sum(t <= 1.0 for t in lasts) / len(lasts), 3),
        "last_p50_s": round(ordered[len(ordered) // 2], 3),
        "last_p99_s": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "reference_s": reference,
    }
    print(summary, file=sys.stderr)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
