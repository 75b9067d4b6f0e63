"""Chaos of the control plane itself and of what tenants' jobs do to their node: PostgreSQL and
Redis restarted, the web tier down, an ASGI process and a Celery worker killed, a replica writing
bad load values, five large jobs on one node, one after another on one working stack; how long
until it has recovered, and what it cost healthy nodes and jobs.

    python -m bench.chaos [--agents 1000] [--short] [--seed 1]

The stack of `bench.soak` with two daphne processes, on a PostgreSQL cluster of the bench's
own (initdb in a temporary folder, run as the postgres user when this is root; fsync off) and
a Redis server of its own: `agents` simulated H800 nodes (two pods, a hot spare in each), half
of their agents on each daphne, heartbeats every 5 s as in production (so the lost-node grace
is 15 s), one Celery worker and beat; and one real agent (`wanka-agent --backend processes`)
on a node of H20 GPUs of its own, where tenants' jobs run as processes. A Philly-shaped stream of
jobs (`bench.soak.submit`, one a second per 400 nodes) keeps the scheduler busy. Then, in turn:

1. replica: an inference replica on the real node serves on its port and writes a bad load
   value to its load file every second (-1 in flight, NaN and infinite rates, 2^64, not
   JSON); the node keeps beating for `--replica-s`, its report of the replica without a load;
2. large: five 1-GPU jobs on the real node, each near the most the API takes (a command of
   60,000 characters, 27,000 Chinese ones of environment: 222 kB as sent): the node's desired
   state is over a megabyte, sent in parts; all five run.
   These six jobs run on through the faults below, and are cancelled at the end;
3. postgres: the cluster is stopped as a crash stops it (`pg_ctl stop -m immediate`) and
   started again 2 s later;
4. redis, five times: the server is killed (SIGKILL) and started again, empty, 2 s later;
5. web: both ASGI processes are killed, every agent cut off, and started again 30 s later;
6. daphne: the first ASGI process, with half the agents on it, is killed and started again on
   its port 2 s later (systemd's RestartSec=2); its agents come back to it;
7. worker: the worker is killed while a scheduling cycle runs, several times: the bench
   submits a burst of jobs, watches Redis for the cycle lock of a cycle it has not killed, and
   sends SIGKILL a random 0-50 ms into it; a kill counts as mid-cycle when the lock is still
   held once the worker is dead. The worker is started again 2 s after each.

From each fault's moment: agents_back_s, until every node is connected in the database and
has been heard from (a heartbeat) since the fault (at most one heartbeat period when no agent
lost its socket); job_running_s, until a 16-GPU probe job, submitted just after the fault
(again and again while the database refuses it), is admitted and reported running by its nodes;
cycle_resumed_s, from the moment what the fault stopped is started again until a scheduling
cycle has finished (the cycles' histogram in Redis counts one more).
Throughout, every 5 s, the invariant checker (`portal.workloads.invariants`), as the soak runs
it: a violation counts when it is still there at the next check; and every agent's own view:
a GPU that two workloads run on at once is double-booked. Nodes that a fault left silent past
the grace are declared lost by the product and, like the soak's on-call, rebooted and returned
to service afterwards; each fault says how many (nodes_lost). Then the stream stops and the
stack settles for 30 s: a job still admitted or starting after a minute, running past its
simulated end, or preempting or recovering with no change for three minutes is stuck.

One line a fault, then the last line, JSON: faults (a list of {fault, agents_back_s,
job_running_s, cycle_resumed_s, invariant_violations, nodes_lost}; the worker's also kills and
kills_mid_cycle; the tenants' faults {fault, job_running_s, heard_s (since the real node's last
heartbeat, at the end), load_ignored}), nodes_lost_healthy (nodes declared lost in all: every
node is healthy throughout), jobs_hit (jobs a fault interrupted: a recovery from a fault, a
failure; a resize the scheduler decides is not one),
cycle_resumed_s (the longest),
agents, agents_on_killed_daphne, heartbeat_s, processes (by kind), restarts (processes that
exited on their own and were started again), jobs_submitted, invariant_violations (persistent,
in all), gpus_double_booked, jobs_stuck, reference_s (the reference loop, `bench.reference`,
timed first) and wall_s. Targets: no invariant violation, no GPU double-booked, no job stuck,
no healthy node lost, no job hit, the cycle resumed within 10 s of each fault, the replica's
node heard within two heartbeats and its load ignored, every fault recovered within its timeout
(`--recover-s`, 120 s); otherwise it says what it was waiting for and exits 1. `--short` (CI):
100 agents, three kills of the worker, shorter pauses, about four and a half minutes. Its
processes and the PostgreSQL cluster are stopped, and the cluster's folder removed, at the end,
on failure, on SIGTERM and past `--timeout`.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import processes
from bench.real_agents import AgentProcesses
from bench.reference import reference_s
from bench.soak import Fleet, Watch, arrivals, build, db, free_port, restart_exited, start_stack
from bench.soak import submit as submit_job

TENANT_FAULTS = ("replica", "large")
FAULTS = (*TENANT_FAULTS, "postgres", *("redis",) * 5, "web", "daphne", "worker")
HEARTBEAT_S = 5.0  # production's
DOWN_S = 2.0  # from a crash to the start again (systemd's RestartSec=2 in deploy/systemd)
WEB_DOWN_S = 30.0
STOPPED = {"redis": ("redis",), "daphne": ("daphne",), "web": ("daphne", "daphne-2")}
CYCLE_RESUMED_S = 10.0  # the target
# A replica that serves on $PORT and writes a bad load value every second.
BAD_LOAD = """
import http.server, os, threading, time
port = int(os.environ["PORT"])
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), http.server.BaseHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
bad = ['{"in_flight": -1}', '{"in_flight": 1, "requests_per_s": NaN}', "not json",
       '{"in_flight": 18446744073709551616}', '{"in_flight": 0, "requests_per_s": Infinity}']
while True:
    for text in bad:
        with open(os.environ["WANKA_LOAD_FILE"], "w") as load:
            load.write(text)
        time.sleep(1)
"""
SLEEP = "import time; time.sleep(3600)"
STUCK_S = {"admitted": 60, "starting": 60, "preempting": 180, "recovering": 180}
SETTINGS = {"DJANGO_SETTINGS_MODULE": "portal.settings", "WANKA_HEARTBEAT_S": str(HEARTBEAT_S)}


class Postgres:
    """A PostgreSQL cluster of the bench's own, which it crashes and starts again; stopped and
    removed with the bench's processes (`processes.on_stop`)."""

    def __init__(self, logs: Path):
        self.dir = Path(tempfile.mkdtemp(prefix="wanka-chaos-pg-"))
        self.port, self.log = free_port(), self.dir / "postgres.log"
        self.logs = logs  # where its log is copied when it is removed
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        processes.on_stop(self.remove)
        data = str(self.dir / "data")
        self._as_owner("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")

    def _as_owner(self, *command: str) -> None:
        """Run `command` as the cluster's owner: postgres when this is root (initdb refuses
        root), else this user."""
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(command[:2])} failed: {done.stderr or done.stdout}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        options += " -c max_connections=200 -c full_page_writes=off"
        data = str(self.dir / "data")
        self._as_owner("pg_ctl", "-D", data, "-o", options, "-l", str(self.log), "-w", "start")

    def crash(self) -> None:
        self._as_owner("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "stop")

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def create(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def remove(self) -> None:
        if (self.dir / "data" / "postmaster.pid").exists():
            self.crash()
        with contextlib.suppress(OSError):
            shutil.copy(self.log, self.logs / "postgres.log")
        shutil.rmtree(self.dir, ignore_errors=True)


def probe(queues, model, fault: str) -> int:
    """A 16-GPU job ahead of the stream (priority 100), to see scheduling work again."""
    from portal.core.triggers import trigger_cycle
    from portal.workloads.models import Workload

    job = Workload.objects.create(
        tenant=queues[0].tenant,
        queue=queues[0],
        name=f"probe-{fault}",
        gpu_model=model,
        gpus=16,
        priority=100,
        topology="pod",
        simulated_duration_s=60,
    )
    with contextlib.suppress(Exception):  # Redis is down: beat's next cycle takes it
        trigger_cycle()
    return job.pk


def real_node(queue):
    """One node of 8 H20 GPUs, in a data center of its own, for the real agent; `queue` may
    use it."""
    from portal.demo import installation
    from portal.quotas.models import QueueQuota
    from scheduler.agent.fleet import NodeSpec

    [node] = installation.build_cluster({"real": {"p1": ("H20", 1)}}, nodes_per_leaf=1)
    QueueQuota.objects.create(queue=queue, gpu_model=node.gpu_model, nominal=8)
    return NodeSpec(hostname=node.name, token=node.issue_token(), gpu_model="H20")


def tenant_jobs(queue, fault: str) -> list[int]:
    """The jobs of a tenant's fault, on the real node: the replica, or the five large jobs."""
    from bench.soak import free_port
    from portal.core.triggers import trigger_cycle
    from portal.workloads.models import Workload

    common = {
        "tenant": queue.tenant,
        "queue": queue,
        "gpu_model_id": queue.quotas.get(gpu_model__name="H20").gpu_model_id,
        "gpus": 1,
        "checkpoint_policy": "none",
    }
    if fault == "replica":
        made = [Workload.objects.create(name="replica", kind="inference", serve_port=free_port(),
                                        command=shlex.join([sys.executable, "-c", BAD_LOAD]),
                                        **common)]  # fmt: skip
    else:
        # Near what the API takes: a command of 60,000 characters, 27,000 Chinese ones of
        # environment (222 kB as the protocol writes it).
        command = shlex.join([sys.executable, "-c", SLEEP, "x" * 60_000])
        env = {"NOTE": "中" * 27_000}
        made = [
            Workload.objects.create(name=f"large-{i}", command=command, env=env, **common)
            for i in range(5)
        ]
    trigger_cycle()
    return [job.pk for job in made]


def all_running(job_ids: list[int]) -> bool:
    from portal.workloads.models import Workload

    return Workload.objects.filter(pk__in=job_ids, state="running").count() == len(job_ids)


def replica_report(job_id: int, node_name: str) -> dict:
    """What the real node last said: seconds since its last heartbeat, and whether its report
    of the replica carries a load (it must not: every value it wrote was bad)."""
    from portal.cluster.models import Node
    from portal.cluster.summary import LAST_SEEN
    from portal.core.redis import client
    from portal.services.load import serving

    node = Node.objects.get(name=node_name)
    beat = client().zscore(LAST_SEEN, node.pk)
    record = serving([job_id]).get(job_id, {})
    return {
        "heard_s": round(time.time() - beat, 1) if beat else None,
        "load_ignored": bool(record) and record.get("in_flight") is None,
    }


def cancel_all(job_ids: list[int]) -> None:
    from portal.workloads.lifecycle import cancel
    from portal.workloads.models import Workload

    for job in Workload.objects.filter(pk__in=job_ids, state="running"):
        cancel(job, reason="the chaos is over")


def cycles() -> int:
    """Scheduling cycles finished, as the cycles' histogram in Redis counts them."""
    from portal.core.measure import CYCLE
    from portal.core.redis import client

    return int(client().hget(CYCLE, "count") or 0)


def hit_since(moment: float) -> list[str]:
    """Jobs interrupted since `moment` (recovered from a fault, or failed), each with why. A
    resize the scheduler decides (a shrink to make room, a grow) is no fault: not counted."""
    from datetime import UTC, datetime

    from django.db.models import Q

    from portal.workloads.models import Workload

    after = datetime.fromtimestamp(moment, UTC)
    faulted = Q(recoveries__started_at__gte=after, recoveries__fault__isnull=False)
    hit = faulted | Q(state="failed", finished_at__gte=after)
    return [
        f"job {job.pk}: "
        + "; ".join(f"{e.at:%H:%M:%S} {e.to_state} ({e.reason})" for e in job.events.all())
        + "".join(f"; recovery: {r.fault or r.detail}" for r in job.recoveries.all())
        for job in Workload.objects.filter(hit).distinct()
    ]


def running(job_id: int) -> bool:
    from portal.workloads.models import Workload

    return Workload.objects.get(pk=job_id).state == "running"


def job_state(job_id: int) -> str:
    from portal.workloads.models import Workload

    job = Workload.objects.get(pk=job_id)
    return f"it is {job.state} ({job.pending_reason or job.events.last()})"


def heard_from(since: float, nodes: int) -> bool:
    """Every node connected in the database and heard from (a heartbeat) since `since`."""
    return min(agents_back(since)) >= nodes


def not_back(since: float) -> dict[str, tuple]:
    """The nodes not yet back: name -> (connected in the database, seconds since its last
    heartbeat or None, health)."""
    from portal.cluster.models import Node
    from portal.cluster.summary import LAST_SEEN
    from portal.core.redis import client

    beats = dict(client().zrange(LAST_SEEN, 0, -1, withscores=True))
    now, found = time.time(), {}
    rows = Node.objects.values_list("pk", "name", "connected", "health")
    for pk, name, connected, health in rows:
        beat = beats.get(str(pk))
        if not connected or beat is None or beat < since:
            found[name] = (connected, beat and round(now - beat, 1), health)
    return found


def agents_back(since: float) -> tuple[int, int]:
    """How many nodes were heard from since `since`, how many are connected."""
    from portal.cluster.models import Node
    from portal.cluster.summary import LAST_SEEN
    from portal.core.redis import client

    heard = client().zcount(LAST_SEEN, since, "+inf")
    return heard, Node.objects.filter(connected=True).count()


def lost_since(moment: float) -> int:
    from datetime import UTC, datetime

    from portal.cluster.models import FaultEvent

    after = datetime.fromtimestamp(moment, UTC)
    return FaultEvent.objects.filter(kind="heartbeat-loss", occurred_at__gte=after).count()


def stuck_jobs() -> list[str]:
    """Jobs that have stopped moving: admitted or starting for a minute, preempting or
    recovering with no change for three, running well past their simulated end."""
    from django.db.models import Max
    from django.utils import timezone

    from portal.workloads.models import Workload

    now, found = timezone.now(), []
    rows = (
        Workload.objects.filter(state__in=[*STUCK_S, "running"])
        .annotate(changed=Max("events__at"))
        .values_list("pk", "state", "changed", "simulated_duration_s")
    )
    for pk, state, changed, duration in rows:
        age = (now - changed).total_seconds() if changed else 0
        limit = STUCK_S.get(state) or 1.5 * (duration or 0) + 120
        if age > limit:
            found.append(f"workload {pk} has been {state} for {age:.0f} s")
    return found


def double_booked(agents) -> set[tuple[str, int]]:
    """(node, GPU) pairs that two workloads run on at once, as each agent itself sees its node
    (read from the agent's own table of workloads: what it started and has not seen end)."""
    found = set()
    for agent in agents:
        held = Counter(
            index
            for workload in agent._workloads.values()
            if workload.state == "running"
            for index in workload.assignment.gpu_indices
        )
        found |= {(agent.hostname, index) for index, count in held.items() if count > 1}
    return found


def booked_twice() -> int:
    """GPUs with two allocations in the database (its unique constraint says none)."""
    from django.db.models import Count

    from portal.workloads.models import Allocation

    rows = Allocation.objects.values("node_id", "gpu_index").annotate(n=Count("id"))
    return rows.filter(n__gt=1).count()


class Recovered(Exception):
    """A fault did not recover in time: what it waited for."""


async def until(check, what: str, timeout: float, why=None, every: float = 0.5) -> float:
    """The time (epoch seconds) at which `check()` (ORM or Redis calls, on a thread) first
    holds; a call that fails (the database or Redis is down) counts as not yet. Past
    `timeout`, Recovered says what it waited for and, from `why()`, where things stand."""
    deadline = time.monotonic() + timeout
    with processes.waiting_for(what):
        while True:
            with contextlib.suppress(Exception):
                if await db(check):
                    return time.time()
            if time.monotonic() > deadline:
                where = f": {await retried(why)}" if why else ""
                raise Recovered(f"waited {timeout:g} s for {what}{where}")
            await asyncio.sleep(every)


async def retried(func, *args):
    """`func(*args)` on a thread, again every 0.2 s while it fails (the database is down)."""
    while True:
        try:
            return await db(func, *args)
        except Exception:
            await asyncio.sleep(0.2)


class Chaos:
    """The stack, its fleet and the faults, each measured from its moment."""

    def __init__(self, args, logs: Path, postgres: Postgres, redis_port: int, url: str):
        self.args, self.logs, self.postgres = args, logs, postgres
        self.rng = random.Random(args.seed)
        self.queues, self.model, specs = build(args.agents, args.seed)
        self.real_spec = real_node(self.queues[0])
        self.children, _ = start_stack(logs, url, redis_port, daphnes=2)
        ports = [self.children[name].port for name in ("daphne", "daphne-2")]
        urls = [f"ws://127.0.0.1:{p}/ws/agent/" for p in ports]
        self.fleet = Fleet(specs, urls, HEARTBEAT_S)
        self.real = AgentProcesses(urls[0], logs, HEARTBEAT_S, grace_s=5.0)
        self.nodes = len(specs) + 1
        self.tenant_jobs: list[int] = []  # the replica and the large jobs, on the real node
        self.back: tuple[float, int] | None = None  # when the fault's part was started again
        self.watch, self.restarts, self.jobs = Watch(), Counter(), 0
        self.doubles: set[tuple[str, int]] = set()
        self.busy = asyncio.Lock()  # held while a fault kills and starts processes
        self.streaming = True
        self.results: list[dict] = []  # one a fault recovered from

    async def background(self) -> None:
        """The job stream, the supervisor, the checks: until cancelled."""
        next_check = 0.0
        while True:
            if self.streaming:
                for _ in range(arrivals(self.rng, self.nodes / 400)):
                    await self.submit()
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + 5
                await self.watch.check()
                self.doubles |= double_booked(self.fleet.agents.values())
            if not self.busy.locked():
                async with self.busy:
                    await restart_exited(self.children, self.restarts)
            await asyncio.sleep(1)

    async def submit(self) -> None:
        self.jobs += 1
        try:
            await db(submit_job, self.rng, self.queues, self.model, self.jobs)
        except Exception as error:  # the database or Redis is down: a job less
            print(f"submit: {error!r}", file=sys.stderr)

    async def produce(self, fault: str, crashed: asyncio.Event) -> dict:
        """Bring the fault about: set `crashed` at its moment, start again what it stopped
        after `DOWN_S`; what there is to say of it besides the common figures."""
        async with self.busy:
            if fault == "worker":
                return await self.kill_worker(crashed)
            if fault == "postgres":
                await asyncio.to_thread(self.postgres.crash)
            for name in STOPPED.get(fault, ()):
                await asyncio.to_thread(self.children[name].kill)
            crashed.set()
            await asyncio.sleep(WEB_DOWN_S if fault == "web" else DOWN_S)
            if fault == "postgres":
                await asyncio.to_thread(self.postgres.start)
            for name in STOPPED.get(fault, ()):
                await asyncio.to_thread(self.children[name].start)
            await self.started_again()
        return {}

    async def started_again(self) -> None:
        """What the fault stopped is up again: from now, and the cycles counted so far."""
        self.back = (time.time(), await retried(cycles))

    async def kill_worker(self, crashed: asyncio.Event) -> dict:
        """SIGKILL the worker in the middle of cycles, `--kills` times, starting it again after
        each; `crashed` is set at the last."""
        kills = mid_cycle = 0
        killed: set[str] = set()  # the locks of cycles killed (a dead holder's lingers)
        while mid_cycle < self.args.kills:
            if kills >= 3 * self.args.kills:
                raise Recovered(f"killed the worker mid-cycle {mid_cycle} times of {kills}")
            for _ in range(5):  # a burst, so that the cycle has work to do
                await self.submit()
            held = await asyncio.to_thread(self.kill_in_cycle, killed)
            if held is None:
                raise Recovered("waited 30 s for a scheduling cycle to kill the worker in")
            kills, mid_cycle = kills + 1, mid_cycle + held
            if mid_cycle == self.args.kills:
                crashed.set()
            await asyncio.sleep(DOWN_S)
            await asyncio.to_thread(self.children["worker"].start)
        await self.started_again()
        return {"kills": kills, "kills_mid_cycle": mid_cycle}

    def kill_in_cycle(self, killed: set[str]) -> bool | None:
        """Wait for a cycle's lock (one not killed before), SIGKILL the worker a random 0-50 ms
        in; whether the lock was still held once it was dead (None: no cycle came in 30 s)."""
        from portal.core.redis import client
        from portal.workloads.cycle import LOCK

        redis, deadline = client(), time.monotonic() + 30
        while (token := redis.get(LOCK)) is None or token in killed:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.002)
        time.sleep(self.rng.uniform(0, 0.05))
        self.children["worker"].kill()
        killed.add(token)
        return redis.get(LOCK) == token

    async def tenant_fault(self, fault: str) -> dict:
        """A tenant's jobs on the real node (`tenant_jobs`), from their submission until they
        run; the replica's then watched for `--replica-s`."""
        before, started = set(self.watch.persistent), time.time()
        jobs = await retried(tenant_jobs, self.queues[0], fault)
        self.tenant_jobs += jobs
        runs = await until(
            lambda: all_running(jobs),
            f"the {fault} jobs to run on the real node",
            self.args.recover_s,
            lambda: job_state(jobs[0]),
        )
        extra = {}
        if fault == "replica":
            await asyncio.sleep(self.args.replica_s)
            extra = await retried(replica_report, jobs[0], self.real_spec.hostname)
        return {
            "fault": fault,
            "job_running_s": round(runs - started, 1),
            **extra,
            "invariant_violations": len(self.watch.persistent - before),
            "nodes_lost": await retried(lost_since, started),
        }

    async def fault(self, fault: str) -> dict:
        """One fault, from its moment until the agents are back and scheduling works again."""
        if fault in TENANT_FAULTS:
            return await self.tenant_fault(fault)
        before, started = set(self.watch.persistent), time.time()
        crashed = asyncio.Event()
        producing = asyncio.create_task(self.produce(fault, crashed))
        waiting = asyncio.create_task(crashed.wait())
        await asyncio.wait({producing, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if not crashed.is_set():
            waiting.cancel()
            await producing  # it failed: say why
        moment, limit = time.time(), self.args.recover_s
        job = await retried(probe, self.queues, self.model, fault)  # submitted in the outage
        back, runs, resumed = await asyncio.gather(
            until(
                lambda: heard_from(moment, self.nodes),
                f"all {self.nodes} agents to be back after the {fault} fault",
                limit,
                lambda: self.missing(moment),
            ),
            until(
                lambda: running(job),
                f"the probe job to run after the {fault} fault",
                limit,
                lambda: job_state(job),
            ),
            self.cycle_resumed(fault, producing),
        )
        extra = await producing
        await asyncio.sleep(self.args.pause)  # a late lost-node verdict, violations seen twice
        lost = await retried(lost_since, started)
        await self.fleet.repair()
        return {
            "fault": fault,
            "agents_back_s": round(back - moment, 1),
            "job_running_s": round(runs - moment, 1),
            "cycle_resumed_s": resumed,
            "invariant_violations": len(self.watch.persistent - before),
            "nodes_lost": lost,
            **extra,
        }

    async def cycle_resumed(self, fault: str, producing: asyncio.Task) -> float:
        """Seconds from when what the fault stopped is up again until a cycle has finished."""
        await producing
        up, base = self.back
        at = await until(
            lambda: cycles() > base,
            f"a scheduling cycle after the {fault} fault",
            self.args.recover_s,
        )
        return round(max(0.0, at - up), 1)

    def missing(self, since: float) -> str:
        """Which agents are not back, as the database, Redis and the agents themselves see
        them (a few)."""
        absent = not_back(since)
        lines = [
            f"{name} (connected in the database: {connected}, last heartbeat {age} s ago, "
            f"{health}; its socket open: {self._open(name)})"
            for name, (connected, age, health) in sorted(absent.items())[:5]
        ]
        return f"{len(absent)} not back, e.g. " + "; ".join(lines)

    def _open(self, name: str) -> str:
        agent = self.fleet.agents.get(name)
        return str(agent.connected) if agent else "a real agent's, see its log"

    async def run(self) -> None:
        self.started = time.time()
        await self.fleet.start(stagger_s=0.02)  # the fleet's ramp: 50 connections a second
        await self.real.start([self.real_spec])
        background = asyncio.create_task(self.background())
        try:
            await until(
                lambda: heard_from(time.time() - HEARTBEAT_S, self.nodes),
                f"all {self.nodes} agents to connect",
                300,
                lambda: self.missing(time.time() - HEARTBEAT_S),
            )
            await asyncio.sleep(self.args.warmup)
            for fault in FAULTS:
                result = await self.fault(fault)
                figures = ", ".join(f"{k} {v}" for k, v in result.items() if k != "fault")
                print(f"{fault}: {figures}", file=sys.stderr, flush=True)
                self.results.append(result)
            self.streaming = False
            await retried(cancel_all, self.tenant_jobs)
            with processes.waiting_for("the stack to settle"):
                await asyncio.sleep(self.args.settle)
                await self.fleet.repair()
                await self.watch.check()
        finally:
            background.cancel()
            await self.fleet.stop()
            await self.real.stop(list(self.real.children))
            self.real.end_orphans()

    def stop(self) -> None:
        for child in reversed(list(self.children.values())):
            child.stop()


def chaos(args, logs: Path, postgres: Postgres, redis_port: int) -> dict:
    from bench.agents import database_url

    stack = Chaos(args, logs, postgres, redis_port, database_url())
    try:
        try:
            asyncio.run(stack.run())
            failure = None
        except Recovered as error:
            failure = str(error)
        stuck = [] if failure else asyncio.run(retried(stuck_jobs))
        doubles = len(stack.doubles) + asyncio.run(retried(booked_twice))
        lost = asyncio.run(retried(lost_since, stack.started))
        hit = asyncio.run(retried(hit_since, stack.started))
    finally:
        stack.stop()
    for violation in sorted(stack.watch.persistent):
        print(f"violation: {violation}", file=sys.stderr)
    for line in stuck:
        print(f"stuck: {line}", file=sys.stderr)
    for line in hit:
        print(f"hit: {line}", file=sys.stderr)
    return {
        "faults": stack.results,
        "failure": failure,
        "agents": stack.nodes,
        "agents_on_killed_daphne": len(
            [u for u in stack.fleet.urls.values() if f":{stack.children['daphne'].port}/" in u]
        ),
        "heartbeat_s": HEARTBEAT_S,
        "nodes_lost_healthy": lost,
        "jobs_hit": len(hit),
        "cycle_resumed_s": max(
            (f["cycle_resumed_s"] for f in stack.results if "cycle_resumed_s" in f), default=None
        ),
        "processes": {"postgres": 1, **Counter(n.partition("-")[0] for n in stack.children)},
        "restarts": dict(stack.restarts),
        "jobs_submitted": stack.jobs,
        "invariant_violations": len(stack.watch.persistent),
        "gpus_double_booked": doubles,
        "jobs_stuck": len(stuck),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="CI: 100 agents, about 3 minutes")
    parser.add_argument("--agents", type=int, help="simulated nodes (default 1000; short 100)")
    parser.add_argument("--kills", type=int, help="mid-cycle kills of the worker (5; short 3)")
    parser.add_argument("--recover-s", type=float, default=120, help="a fault's timeout")
    parser.add_argument("--replica-s", type=float, default=30, help="the bad replica's watch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, help="seconds in all")
    args = parser.parse_args(argv)
    args.agents = args.agents or (100 if args.short else 1000)
    args.kills = args.kills or (3 if args.short else 5)
    args.warmup, args.pause, args.settle = (10, 5, 20) if args.short else (30, 10, 30)
    started = time.monotonic()
    processes.supervise(args.timeout or (720 if args.short else 1800))
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    logs = Path(tempfile.mkdtemp(prefix="wanka-chaos-"))
    postgres, redis_port = Postgres(logs), free_port()  # its own, which it crashes
    postgres.start()
    postgres.create("wanka_chaos")
    os.environ.update(
        SETTINGS,
        DATABASE_URL=postgres.url("wanka_chaos"),
        WANKA_DATA_DIR=str(logs),
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
    )
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    try:
        result = chaos(args, logs, postgres, redis_port)
    finally:
        connection.close()
    print(f"logs: {logs}", file=sys.stderr)
    failure = result.pop("failure")
    wall = round(time.monotonic() - started, 1)
    print(json.dumps({**result, "reference_s": reference, "wall_s": wall}))
    if failure:
        raise SystemExit(f"a fault did not recover: {failure}")
    if result["invariant_violations"] or result["gpus_double_booked"] or result["jobs_stuck"]:
        raise SystemExit("the chaos broke an invariant, double-booked a GPU or left a job stuck")
    if result["nodes_lost_healthy"] or result["jobs_hit"]:
        raise SystemExit("the chaos cost healthy nodes or jobs")
    for replica in (f for f in result["faults"] if f["fault"] == "replica"):
        heard = replica["heard_s"]
        if not replica["load_ignored"] or heard is None or heard > 2 * HEARTBEAT_S:
            raise SystemExit("the replica's bad load values reached its report or its node")
    if (result["cycle_resumed_s"] or 0) > CYCLE_RESUMED_S:
        raise SystemExit(f"scheduling resumed later than {CYCLE_RESUMED_S:g} s after a fault")


if __name__ == "__main__":
    main()
