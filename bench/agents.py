"""Agent fan-in: N simulated agents, each on its own WebSocket, against one or more ASGI
processes.

    python -m bench.agents [--agents 500 1000 2000] [--processes 1] [--seconds 40] [--heartbeat 5]

For each N: a fresh throwaway database with N nodes, `--processes` daphne processes, the fleet
in this process heartbeating every 5 s, its agents spread evenly over the processes (as a load
balancer would). First the time until every agent has connected and said hello (connect_s),
then, over a steady window: messages handled per second (all processes together), the
servers' median and 99th-percentile handling time (from their fan-in log lines, the worst 10-s
window of any process) and the server processes' CPU (together, and a message's share of it:
a cost per message that stays flat as processes are added is one that scales out). The last
line is JSON for the largest N: agents, processes, connect_s, msgs_per_s, p50_handle_ms,
p99_handle_ms, server_cpu_pct, cpu_ms_per_msg, and reference_s (the reference loop,
`bench.reference`, timed first). Past `--timeout` seconds it says what it was waiting for and
exits 1; its processes are stopped then, on failure and on SIGTERM.
"""

import argparse
import asyncio
import gc
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import psutil

from bench import database, processes
from bench.reference import reference_s

STATS = re.compile(
    r"^(\S+ \S+) INFO portal.agents.fanin: agent fan-in: (\d+) messages in "
    r"([\d.]+) s \(\d+/s\), handle p50 ([\d.]+) ms p99 ([\d.]+) ms",
    re.M,
)
WINDOW_S = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(log_path, database_url: str) -> tuple[subprocess.Popen, int]:
    from django.conf import settings

    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": settings.REDIS_URL,
        "WANKA_FANIN_REPORT_S": str(WINDOW_S),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    server = processes.start(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "portal.asgi:application",
        ],
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while "Listening on TCP" not in log_path.read_text():
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"daphne did not start:\n{log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    return server, port


def connected_nodes() -> int:
    from django.db import connection

    from portal.cluster.models import Node

    try:
        return Node.objects.filter(connected=True).count()
    finally:
        connection.close()  # this thread's, so the test database can be dropped at the end


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@contextmanager
def servers(count: int, logs: Path) -> Iterator[list[tuple[subprocess.Popen, int]]]:
    """`count` daphne processes on the benchmark's database, logging into `logs/daphne-i.log`;
    each process and its port. Stopped at the end."""
    started = []
    try:
        for i in range(count):
            started.append(start_server(logs / f"daphne-{i}.log", database_url()))
        yield started
    finally:
        for server, _ in started:
            server.terminate()
            server.wait(timeout=10)


def database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


def measure(agents: int, seconds: float, heartbeat: float, count: int = 1) -> dict:
    from django.conf import settings

    from portal.cluster.models import Node
    from portal.demo import installation
    from scheduler.agent.fleet import NodeSpec, run_fleet

    Node.objects.all().delete()
    pods = {f"p{i}": ("H800", 1) for i in range(1, agents // 50 + 2)}
    nodes = installation.build_cluster({f"dc{agents}": pods}, nodes_per_leaf=50)[:agents]
    specs = [NodeSpec(hostname=n.name, token=n.issue_token(), gpu_model="H800") for n in nodes]
    logs = settings.DATA_DIR / f"bench-agents-{agents}"
    logs.mkdir(parents=True, exist_ok=True)
    with servers(count, logs) as started:
        watched = [psutil.Process(server.pid) for server, _ in started]
        stop = asyncio.Event()

        async def run():
            begun = time.monotonic()
            fleets = [
                asyncio.create_task(
                    run_fleet(
                        f"ws://127.0.0.1:{port}/ws/agent/",
                        specs[i::count],
                        heartbeat_s=heartbeat,
                        stop_event=stop,
                    )
                )
                for i, (_, port) in enumerate(started)
            ]
            while await asyncio.to_thread(connected_nodes) < agents:
                if time.monotonic() - begun > 600:
                    raise SystemExit(f"not all {agents} agents connected in 600 s")
                await asyncio.sleep(0.5)
            connect_s = time.monotonic() - begun
            # The fleet's own full collections (its agents' objects all walked) would hold its
            # heartbeats for a second at a time, then send them in a burst.
            gc.collect()
            gc.freeze()
            await asyncio.sleep(2 * heartbeat)  # settle
            steady_from = time.time()
            for process in watched:
                process.cpu_percent()
            await asyncio.sleep(seconds)
            cpu = sum(process.cpu_percent() for process in watched)
            stop.set()
            await asyncio.gather(*fleets)
            return connect_s, steady_from, cpu

        with processes.waiting_for(f"{agents} agents to connect, run and stop"):
            connect_s, steady_from, cpu = asyncio.run(run())
    rates, windows = [], []
    for i in range(count):
        log_path = logs / f"daphne-{i}.log"
        mine = [
            tuple(map(float, m[1:]))
            for m in STATS.findall(log_path.read_text())
            if _epoch(m[0]) - WINDOW_S >= steady_from
        ]
        if not mine:
            raise SystemExit(f"no steady fan-in figures in {log_path}")
        rates.append(sum(w[0] for w in mine) / sum(w[1] for w in mine))
        windows += mine
    msgs_per_s = sum(rates)
    return {
        "agents": agents,
        "processes": count,
        "connect_s": round(connect_s, 1),
        "msgs_per_s": round(msgs_per_s, 1),
        "p50_handle_ms": max(w[2] for w in windows),
        "p99_handle_ms": max(w[3] for w in windows),
        "server_cpu_pct": round(cpu, 1),
        "cpu_ms_per_msg": round(10 * cpu / msgs_per_s, 3),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--processes", type=int, default=1, help="daphne processes")
    parser.add_argument("--seconds", type=float, default=40, help="steady window")
    parser.add_argument("--heartbeat", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds in all")
    args = parser.parse_args(argv)
    processes.supervise(args.timeout)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    with database.throwaway():
        results = [
            measure(n, args.seconds, args.heartbeat, args.processes) for n in sorted(args.agents)
        ]
    for result in results:
        print(result, file=sys.stderr)
    print(json.dumps({**results[-1], "reference_s": reference}))


if __name__ == "__main__":
    main()
