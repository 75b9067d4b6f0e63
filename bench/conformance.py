"""Conformance: scripted scenarios on the whole stack and in the simulator, side by side.

    python -m bench.conformance [--short] [--only SCENARIO ...]
    python -m bench.conformance --backend processes [--short] [--parallel N]

Twelve scenarios, each on a cluster of its own (one pod of 8-GPU H800 nodes, a region of its
own, two queues of one cohort): a reclaim with graceful preemption; an elastic job shrunk for
a claimant, then grown back; XID 79 on a job with a hot spare; XID 79 on an elastic job with
none; an agent that goes silent; a hang; a straggler (its queue replaces stragglers); a
drain; XID 79 on a job that saves every 600 s, so never before it (it restarts on the spare
from the start); a job that never saves and meets nothing, long enough that a false hang would
show; an elastic job (16 to 32 GPUs) submitted while another holds half the GPUs, which grows
once they free up (saving first); XID 79 on a job whose first spare has a GPU off the bus
since the start (its agent reported it, so the portal took it down: the job moves to the
second spare, and the simulator has the first out of service).

On the stack (a fresh throwaway PostgreSQL database, a Redis server of its own, daphne, a
Celery worker and beat, an agent per node on its own WebSocket, heartbeats every second) the
scenarios run in real time; in the simulator each runs with the production engine on the same
cluster, jobs and incidents, with the stack's delays and costs (`MODELS`). The agents:

- `--backend simulated` (the default): simulated agents in this process, whose jobs are
  timers, all scenarios at once. Incidents are the agents' fault drills; a silent agent is
  stopped.
- `--backend processes`: each node's agent is a real `wanka-agent --backend processes`, and
  each job runs `examples/train_tiny.py` (PyTorch on the CPU, a step a second, slower in
  proportion on fewer GPUs) on every node it holds. `--parallel` scenarios at once (4), each
  on agents started for it. XID 79 is the agent's drill (its simulated GPU falls off the bus);
  the silent agent is killed with SIGKILL, its job's processes left running, and started again
  15 s later, when it stops them before it says hello; the hang is SIGSTOP to the job's
  processes on the node, found by the portal from the steps the job reports; the straggler is
  SIGSTOP and SIGCONT a second each, which halves that node's steps. The hung job saves
  nothing in this mode (`for_processes`). The whole run takes about 8 minutes on 2 cores,
  `--short` under 5.

For each scenario it prints every job's history on both sides, in the portal's words
(running, preempting, pending, recovering (spare), succeeded ...), whether they agree, and
each job's ETTR on both. The invariant checker (`portal.workloads.invariants`) runs every 5 s
throughout; a violation counts when the next check still finds it. A false hang is a hang
fault recorded on a job of a scenario that made none. The last line is JSON: scenarios,
agree (how many agree), max_ettr_gap, violations, false_hangs, backend, wall_s, and per
scenario its histories, ETTRs, violations and false hangs. Targets: all agree, no ETTR gap
above 0.02 (0.03 with the processes backend), no violation, no false hang; it fails past
them. `--short` halves the jobs' lengths (for CI), so that the same seconds weigh twice in an
ETTR: it allows twice the gap. The JSON also carries reference_s, the reference loop
(`bench.reference`) timed first. Past `--timeout` seconds it says what it was waiting for and
exits 1; its processes (the jobs' too) are stopped then, on failure and on SIGTERM.
"""

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench import processes
from bench.real_agents import AgentProcesses, train_tiny
from bench.reference import reference_s
from bench.soak import Watch, db, free_port, start_stack
from scheduler.checkpointing import Costs, Policy, PolicyKind
from scheduler.sim.incidents import Detection, Incident

HEARTBEAT_S = 1.0
# With the processes backend, scenarios at once (each runs an agent process per node and a
# PyTorch process per node of each job, all on this machine), starting this far apart so that
# their PyTorch imports do not pile up; a killed agent is started again after RESTART_AFTER_S.
PARALLEL = 4
STAGGER_S = 10.0
RESTART_AFTER_S = 15.0
GRACE_S = 5.0  # agents' --grace-s: from SIGTERM to SIGKILL of a job's processes
# What the stack runs with: heartbeats every second (a silent agent is lost after three),
# a cycle and a sweep for stalls and due saves every second, short hang and straggler limits,
# grows at most every 30 s.
SETTINGS = {
    "DJANGO_SETTINGS_MODULE": "portal.settings",
    "WANKA_HEARTBEAT_S": str(HEARTBEAT_S),
    "WANKA_CYCLE_S": "1",
    "WANKA_SWEEP_S": "1",
    "WANKA_TRIGGERED_SAVE_TIMEOUT_S": "10",
    "WANKA_HANG_FLOOR_S": "5",
    "WANKA_STRAGGLER_FOR_S": "5",
    "WANKA_GROW_EVERY_S": "30",
}
# When the stack notices what it is not told, on average: the lost-node sweep runs every 5 s
# and finds a node three heartbeats silent; the sweep every second sees a hang once 10 steps
# (10 s) passed without progress, from counters a heartbeat old, and a straggler in the second
# whole 8 s window of its rates (`progress.RATE_OVER_S`) that reads it slow.
DETECTION = Detection(
    lost_after_s=3 * HEARTBEAT_S + 2.5, hang_after_s=10 + 2, straggler_for_s=4 + 8 + 8
)
# What a restart and a save from memory take on the stack (from recovering to running again:
# 0.3 to 1.1 s in these scenarios' runs): the acks, the desired state pushed, the agents
# starting the new attempt and reporting it. Simulated saves are instant: nothing stalls.
COSTS = Costs(
    save_stall_s=0.0,
    async_stall_s=0.0,
    async_persist_s=0.0,
    restart_s=0.5,
    triggered_save_s=0.2,
    triggered_success=1.0,
    step_s=1.0,  # simulated agents make a step a second
)


@dataclass(frozen=True)
class Model:
    """What the simulator is told of a backend's stack, and the largest ETTR gap between the
    two sides that passes."""

    costs: Costs
    detection: Detection
    gap: float
    start_s: float = 0.0  # a job's processes starting, which the portal counts as running


MODELS = {
    "simulated": Model(COSTS, DETECTION, gap=0.02),
    # train_tiny's step is its pause of 1 s and a few ms of CPU work. A restart, from the
    # restart pushed to running again, took 0.0-0.3 s in the runs; a save from memory, from
    # the fault to the restart pushed, 0.5-1.2 s: the next step boundary, the save, the agent
    # reading the manifest (the simulator also loses half a step there). Python, PyTorch and
    # the model take about 3 s to start before the first step (more while others start), which
    # the portal counts as running: work added to each job. A hung process is stopped and
    # ignores SIGTERM: the agent kills it after its grace, booked as a later notice.
    "processes": Model(
        replace(COSTS, restart_s=0.2, triggered_save_s=0.4),
        replace(DETECTION, hang_after_s=DETECTION.hang_after_s + GRACE_S),
        gap=0.03,
        start_s=3.0,
    ),
}


@dataclass(frozen=True)
class Job:
    name: str
    queue: str  # "a" or "b"
    gpus: int
    duration_s: float
    policy: str = "triggered"
    interval_s: int | None = None
    min_gpus: int | None = None
    submit_s: float = 0.0


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int  # schedulable nodes, then `spares` hot spares
    quotas: tuple[int, int]  # nominal GPUs of queues a and b
    jobs: tuple[Job, ...]
    incidents: tuple[tuple[float, str, int, str], ...] = ()  # (at, job, node rank, code)
    spares: int = 0
    broken_spares: int = 0  # the first spares have GPU 0 off the bus (XID 79) from the start

    def shorter(self, factor: float) -> "Scenario":
        jobs = tuple(replace(j, duration_s=j.duration_s * factor) for j in self.jobs)
        return replace(self, jobs=jobs)


TRAIN = Job("train", "a", 16, 90)
SCENARIOS = (
    Scenario(
        "reclaim",
        4,
        (16, 16),
        (Job("borrower", "b", 32, 120, "async", 10), Job("claimant", "a", 16, 40, submit_s=20)),
    ),
    Scenario(
        "shrink-grow",
        4,
        (16, 16),
        (
            Job("elastic", "b", 32, 150, "async", 10, min_gpus=16),
            Job("claimant", "a", 16, 40, submit_s=20),
        ),
    ),
    Scenario("xid79-spare", 2, (16, 0), (TRAIN,), ((20, "train", 1, "xid-79"),), spares=1),
    Scenario(
        "xid79-elastic",
        3,
        (24, 0),
        (replace(TRAIN, gpus=24, min_gpus=8),),
        ((20, "train", 1, "xid-79"),),
    ),
    Scenario("disconnect", 2, (16, 0), (TRAIN,), ((20, "train", 1, "disconnect"),), spares=1),
    Scenario("hang", 1, (8, 0), (replace(TRAIN, gpus=8),), ((20, "train", 0, "hang"),)),
    Scenario("straggler", 2, (16, 0), (TRAIN,), ((20, "train", 1, "straggler"),), spares=1),
    Scenario(
        "drain", 2, (16, 0), (replace(TRAIN, policy="async", interval_s=10),),
        ((20, "train", 1, "drain"),), spares=1,
    ),
    Scenario(
        "rare-saves", 2, (16, 0), (replace(TRAIN, policy="periodic", interval_s=600),),
        ((20, "train", 1, "xid-79"),), spares=1,
    ),
    Scenario("never-saves", 1, (8, 0), (replace(TRAIN, gpus=8, policy="none"),)),
    Scenario(
        "valley",
        4,
        (16, 16),
        (
            Job("holder", "a", 16, 40),
            Job("elastic", "b", 32, 120, min_gpus=16, submit_s=5),
        ),
    ),
    Scenario(
        "broken-spare", 2, (16, 0), (TRAIN,), ((20, "train", 1, "xid-79"),), spares=2,
        broken_spares=1,
    ),
)  # fmt: skip


# -- the simulator ---------------------------------------------------------------------------


def simulate(scenario: Scenario, model: Model = MODELS["simulated"]) -> dict:
    """Each job's history and ETTR in the simulator. A broken spare is out of service: the
    portal takes a node down when its agent reports the fault."""
    from scheduler.sim import Simulator, parse_spec
    from scheduler.sim.policies import make_policy
    from scheduler.sim.simulator import SimConfig
    from scheduler.sim.trace import TraceJob

    a, b = scenario.quotas
    spec = parse_spec(
        {
            "name": scenario.name,
            "datacenters": [
                {
                    "name": scenario.name,
                    "pods": [
                        {"name": "p1", "leaves": 1, "gpu_model": "H800",
                         "nodes_per_leaf": scenario.nodes + scenario.spares}
                    ],
                }
            ],
            "cohorts": [{"name": "c"}],
            "queues": [
                {"name": "a", "cohort": "c", "quotas": {"H800": a}},
                {"name": "b", "cohort": "c", "quotas": {"H800": b}},
            ],
        }
    )  # fmt: skip
    spares = tuple(node.id for node in spec.nodes[scenario.nodes :])
    broken, spares = spares[: scenario.broken_spares], spares[scenario.broken_spares :]
    spec = replace(spec, spares=spares)
    ids = {job.name: number for number, job in enumerate(scenario.jobs, start=1)}
    trace = [
        TraceJob(
            ids[job.name], job.submit_s, job.gpus, "H800", job.duration_s + model.start_s,
            job.queue,
            min_gpus=job.min_gpus, checkpoint=Policy(PolicyKind(job.policy), job.interval_s),
        )
        for job in scenario.jobs
    ]  # fmt: skip
    incidents = [Incident(at, ids[name], rank, code) for at, name, rank, code in scenario.incidents]
    detection = replace(model.detection, replace_stragglers=scenario.name == "straggler")
    config = SimConfig(
        cycle_s=1.0,
        costs=model.costs,
        failures_per_gpu_hour=0.0,
        grow_every_s=30.0,
        detection=detection,
    )
    sim = Simulator(trace, spec, make_policy("wanka", spec), config, incidents=incidents)
    for node_id in broken:
        sim.allocations.close(node_id)
    sim.run()
    return {
        job.name: {
            "history": sim.jobs[ids[job.name]].history,
            "ettr": sim.jobs[ids[job.name]].ettr(sim.end),
        }
        for job in scenario.jobs
    }


# -- the stack -------------------------------------------------------------------------------


def build(scenario: Scenario) -> list:
    """The scenario's region, pod, nodes (spares last) and queues; the agents' specs."""
    from portal.cluster.models import Node, Pod
    from portal.demo import installation
    from portal.quotas.choices import StragglerPolicy
    from portal.quotas.models import Cohort, Queue, QueueQuota
    from portal.tenancy.models import Tenant
    from scheduler.agent.fleet import NodeSpec

    nodes = installation.build_cluster(
        {scenario.name: {"p1": ("H800", 1)}},
        nodes_per_leaf=scenario.nodes + scenario.spares,
        region=scenario.name,
    )
    Pod.objects.filter(datacenter__name=scenario.name).update(hot_spares=scenario.spares)
    Node.objects.filter(pk__in=[n.pk for n in nodes[scenario.nodes :]]).update(spare=True)
    tenant, _ = Tenant.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    cohort = Cohort.objects.create(name=scenario.name)
    policy = StragglerPolicy.REPLACE if scenario.name == "straggler" else StragglerPolicy.ALERT
    for name, nominal in zip("ab", scenario.quotas, strict=True):
        queue = Queue.objects.create(
            tenant=tenant,
            name=f"{scenario.name}-{name}",
            region=nodes[0].leaf.pod.datacenter.region,
            cohort=cohort,
            straggler_policy=policy,
        )
        QueueQuota.objects.create(queue=queue, gpu_model=nodes[0].gpu_model, nominal=nominal)
    return [NodeSpec(hostname=n.name, token=n.issue_token(), gpu_model="H800") for n in nodes]


def submit(scenario: Scenario, job: Job, real: bool) -> int:
    """Submit the job: with `real` processes, train_tiny is its command."""
    from portal.core.triggers import trigger_cycle
    from portal.quotas.models import Queue
    from portal.workloads.models import Workload

    queue = Queue.objects.select_related("tenant").get(name=f"{scenario.name}-{job.queue}")
    workload = Workload.objects.create(
        tenant=queue.tenant,
        queue=queue,
        name=f"{scenario.name}-{job.name}",
        gpu_model=queue.quotas.get().gpu_model,
        gpus=job.gpus,
        min_gpus=job.min_gpus,
        checkpoint_policy=job.policy,
        checkpoint_interval_s=job.interval_s,
        simulated_duration_s=job.duration_s,
        command=train_tiny(int(job.duration_s), job.gpus) if real else "",
    )
    trigger_cycle()
    return workload.pk


def node_of(workload_id: int, rank: int) -> tuple[int, str] | None:
    from portal.workloads.models import Allocation

    return (
        Allocation.objects.filter(workload_id=workload_id, node_rank=rank)
        .values_list("node_id", "node__name")
        .first()
    )


def drain(node_id: int) -> None:
    from portal.cluster.choices import Health
    from portal.cluster.models import Node

    Node.objects.get(pk=node_id).set_health(Health.DRAINING, "conformance: drained")


def finished(ids: list[int]) -> bool:
    from portal.workloads.choices import TERMINAL
    from portal.workloads.models import Workload

    return not Workload.objects.filter(pk__in=ids).exclude(state__in=TERMINAL).exists()


def outcome(workload_id: int) -> dict:
    """The workload's history (states in the portal's words, each recovery with its outcome,
    repeats folded) and ETTR."""
    from portal.workloads.choices import TERMINAL, State
    from portal.workloads.ettr import job_report
    from portal.workloads.models import Recovery, Workload

    workload = Workload.objects.get(pk=workload_id)
    outcomes = iter(
        Recovery.objects.filter(workload=workload)
        .exclude(outcome="")
        .order_by("started_at", "pk")
        .values_list("outcome", flat=True)
    )
    shown = {State.RUNNING, State.PREEMPTING, State.PENDING, State.RECOVERING, *TERMINAL}
    events = list(workload.events.order_by("at", "pk").values_list("at", "to_state", "reason"))
    states: list[str] = []
    for _, state, _ in events:  # notes repeat the state they are made in: one word each
        if state in shown and (states or state != State.PENDING) and state not in states[-1:]:
            states.append(state)
    history = [
        f"recovering ({next(outcomes, 'in_place').replace('_', ' ')})"
        if state == State.RECOVERING
        else state
        for state in states
    ]
    saves = workload.checkpoints.values_list("created_at", "kind", "step")
    lines = sorted(
        [(at, f"{state}: {why}") for at, state, why in events]
        + [(at, f"saved ({kind}) at step {step}") for at, kind, step in saves]
    )
    start = events[0][0]
    log = [f"{(at - start).total_seconds():6.1f} s {line}" for at, line in lines]
    return {"history": history, "ettr": job_report(workload)["ettr"], "log": log}


def node_ids(names: list[str]) -> list[int]:
    from portal.cluster.models import Node

    return list(Node.objects.filter(name__in=names).order_by("name").values_list("pk", flat=True))


def connected(names: list[str]) -> bool:
    from portal.cluster.models import Node

    return Node.objects.filter(name__in=names, connected=True).count() == len(names)


def down(node_id: int) -> bool:
    from portal.cluster.choices import Health
    from portal.cluster.models import Node

    return Node.objects.filter(pk=node_id, health=Health.DOWN).exists()


def hangs(ids: list[int]) -> int:
    """How many hang faults were recorded on these workloads."""
    from portal.cluster.models import FaultEvent

    return FaultEvent.objects.filter(kind="hang", workloads__in=ids).distinct().count()


async def until(what: str, check, *args, seconds: float = 60) -> None:
    """Wait until `check(*args)` (a query) is true; exit saying `what` was awaited after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while not await db(check, *args):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


class SimulatedAgents:
    """Each node's agent in this process, on a `SimulatedBackend`: its jobs are timers."""

    def __init__(self, url: str):
        self.url = url
        self.agents: dict = {}
        self.tasks: dict[str, asyncio.Task] = {}

    async def start(self, nodes) -> None:
        from scheduler.agent.fleet import build_agent

        for node in nodes:
            agent = self.agents[node.hostname] = build_agent(node, self.url, HEARTBEAT_S)
            self.tasks[node.hostname] = asyncio.create_task(agent.run())

    async def disconnect(self, name: str) -> None:
        """The agent goes silent for good."""
        await self.agents[name].stop()

    async def stop(self, names) -> None:
        await asyncio.gather(*(self.agents.pop(name).stop() for name in names))
        for name in names:
            self.tasks.pop(name).cancel()


async def straggle(pgid: int) -> None:
    """Slow the job's processes on the node to half their steps: stopped one second in two,
    until they end. (A step is mostly train_tiny's pause, whose time runs on while the process
    is stopped: stopped a second at a time, a process with 1 s steps makes one step in two
    seconds.)"""
    with contextlib.suppress(ProcessLookupError):
        while True:
            os.killpg(pgid, signal.SIGSTOP)
            await asyncio.sleep(1)
            os.killpg(pgid, signal.SIGCONT)
            await asyncio.sleep(1)


async def run(scenario: Scenario, nodes, agents) -> dict:
    """One scenario on agents of its own: its jobs submitted and its incidents made on time.
    Each job's history and ETTR, the workloads, and the hang faults recorded where it made no
    hang."""
    from portal.cluster.commands import send_command

    real = isinstance(agents, AgentProcesses)
    names = [node.hostname for node in nodes]
    await agents.start(nodes)
    stragglers: list[asyncio.Task] = []
    try:
        await until(f"the agents of {scenario.name}", connected, names)
        broken = (await db(node_ids, names))[scenario.nodes :][: scenario.broken_spares]
        for node_id in broken:  # its agent reports the fault and the portal takes it down
            await db(lambda n=node_id: send_command(n, "inject_fault", code="xid-79"))
            await until(f"a broken spare of {scenario.name} to go down", down, node_id)
        print(f"{scenario.name}: started", file=sys.stderr, flush=True)
        start = time.monotonic()
        ids: dict[str, int] = {}
        steps = sorted(
            [(j.submit_s, 0, j) for j in scenario.jobs]
            + [(i[0], 1, i) for i in scenario.incidents],
            key=lambda step: step[:2],
        )
        for at, what, item in steps:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            if what == 0:
                ids[item.name] = await db(submit, scenario, item, real)
                continue
            _, name, rank, code = item
            node = await db(node_of, ids[name], rank)
            print(f"{scenario.name}: {code} on {node and node[1]}", file=sys.stderr, flush=True)
            if node is None:
                print(f"{scenario.name}: {name} has no node of rank {rank}", file=sys.stderr)
            elif code == "disconnect" and real:
                await agents.kill(node[1], RESTART_AFTER_S)
            elif code == "disconnect":
                await agents.disconnect(node[1])
            elif code == "drain":
                await db(drain, node[0])
            elif real and code == "hang":
                agents.hang(node[1], ids[name])
            elif real and code == "straggler":
                stragglers.append(asyncio.create_task(straggle(agents.group(node[1], ids[name]))))
            else:
                await db(lambda n=node, c=code: send_command(n[0], "inject_fault", code=c))
        limit = time.monotonic() + 600
        while not await db(finished, list(ids.values())):
            if time.monotonic() > limit:
                break
            await asyncio.sleep(0.5)
        hung = any(code == "hang" for *_, code in scenario.incidents)
        print(f"{scenario.name}: done in {time.monotonic() - start:.0f} s", file=sys.stderr)
        return {
            "jobs": {job.name: await db(outcome, ids[job.name]) for job in scenario.jobs},
            "ids": list(ids.values()),
            "false_hangs": 0 if hung else await db(hangs, list(ids.values())),
        }
    finally:
        for task in stragglers:
            task.cancel()
        await agents.stop(names)


async def on_stack(
    scenarios: tuple[Scenario, ...],
    logs: Path,
    database_url: str,
    redis_port: int,
    backend: str,
    parallel: int,
) -> tuple[dict, list[str]]:
    """Run the scenarios on one stack, `parallel` at a time (with the processes backend, each
    starting STAGGER_S after the one before at the earliest), each on agents of its own; what
    `run` says of each, and the invariant violations that persisted (the checker runs every
    5 s throughout)."""
    specs = {s.name: await db(build, s) for s in scenarios}
    children, port = await asyncio.to_thread(start_stack, logs, database_url, redis_port)
    url = f"ws://127.0.0.1:{port}/ws/agent/"
    real = backend == "processes"
    agents = AgentProcesses(url, logs, HEARTBEAT_S, GRACE_S) if real else SimulatedAgents(url)
    stagger_s = STAGGER_S if real else 0.0
    if real:
        processes.on_stop(agents.end_orphans)
    watch, slots = Watch(), asyncio.Semaphore(parallel)

    async def checking() -> None:
        while True:
            await watch.check()
            await asyncio.sleep(5)

    async def one(number: int, scenario: Scenario) -> dict:
        await asyncio.sleep(number * stagger_s)
        async with slots:
            return await run(scenario, specs[scenario.name], agents)

    checker = asyncio.create_task(checking())
    try:
        results = await asyncio.gather(*(one(n, s) for n, s in enumerate(scenarios)))
        await watch.check()
        return dict(zip([s.name for s in scenarios], results, strict=True)), sorted(
            watch.persistent
        )
    finally:
        checker.cancel()
        for child in reversed(list(children.values())):
            child.stop()


def owns(scenario: Scenario, ids: list[int], violation: str) -> bool:
    """Whether the violation names a workload or node of the scenario (its nodes' names begin
    with the scenario's)."""
    named = re.findall(r"\b(workload|node|spare) ([\w-]+)", violation)
    return any(
        name in map(str, ids) if kind == "workload" else name.startswith(f"{scenario.name}-")
        for kind, name in named
    )


def compare(scenarios, stack: dict, sim: dict, violations: list[str], allowed: float) -> dict:
    """Each scenario's two sides, printed (with the stack's log of a job where they part), and
    the figures: how many agree, the largest ETTR gap, the persistent invariant violations
    (each also counted for the scenario it names) and the false hangs."""
    rows, agree, gap = {}, 0, 0.0
    for scenario in scenarios:
        ran = stack[scenario.name]
        jobs = {}
        same = True
        for job in scenario.jobs:
            real, model = ran["jobs"][job.name], sim[scenario.name][job.name]
            same &= real["history"] == model["history"]
            if real["ettr"] is not None and model["ettr"] is not None:
                gap = max(gap, abs(real["ettr"] - model["ettr"]))
            jobs[job.name] = {"stack": real, "sim": model}
        agree += same
        broken = sum(owns(scenario, ran["ids"], v) for v in violations)
        hangs = ran["false_hangs"]
        rows[scenario.name] = {
            "agree": same,
            "violations": broken,
            "false_hangs": hangs,
            "jobs": jobs,
        }
        print(
            f"{scenario.name}: {'agree' if same else 'DIFFER'}; {broken} violations, "
            f"{hangs} false hangs",
            file=sys.stderr,
        )
        for name, sides in jobs.items():
            for side in ("stack", "sim"):
                ettr = sides[side]["ettr"]
                shown = "-" if ettr is None else f"{ettr:.3f}"
                history = ", ".join(sides[side]["history"])
                print(f"  {name:9} {side:5} ETTR {shown}: {history}", file=sys.stderr)
            real, model = sides["stack"]["ettr"], sides["sim"]["ettr"]
            apart = None not in (real, model) and abs(real - model) > allowed
            log = sides["stack"].pop("log")  # printed where the sides part, never in the JSON
            for line in log if apart or not same else ():
                print(f"    {line}", file=sys.stderr)
    for violation in violations:
        print(f"violation: {violation}", file=sys.stderr)
    return {
        "scenarios": len(rows),
        "agree": agree,
        "max_ettr_gap": round(gap, 4),
        "violations": len(violations),
        "false_hangs": sum(row["false_hangs"] for row in rows.values()),
        **rows,
    }


def for_processes(scenario: Scenario) -> Scenario:
    """The scenario as run with the processes backend. train_tiny saves between steps, so a
    job whose processes are stopped (the hang) cannot answer the save from memory that the
    simulator has a hung job make; and routine saves come when the control plane's sweep
    finds them due (every 10 s), not on the simulator's schedule. So the hung job saves
    nothing here, on both sides, and restarts from the start."""
    if scenario.name != "hang":
        return scenario
    return replace(scenario, jobs=tuple(replace(job, policy="none") for job in scenario.jobs))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="jobs half as long")
    names = [s.name for s in SCENARIOS]
    parser.add_argument("--only", action="append", choices=names, help="run only these")
    parser.add_argument(
        "--backend",
        choices=("simulated", "processes"),
        default="simulated",
        help="the agents: simulated in this process, or wanka-agent processes running train_tiny",
    )
    parser.add_argument(
        "--parallel", type=int, help=f"scenarios at once (all; with processes {PARALLEL})"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds in all")
    args = parser.parse_args(argv)
    processes.supervise(args.timeout)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    real = args.backend == "processes"
    chosen = [s for s in SCENARIOS if s.name in (args.only or names)]
    chosen = [for_processes(s) for s in chosen] if real else chosen
    scenarios = tuple(s.shorter(0.5) if args.short else s for s in chosen)
    model = MODELS[args.backend]
    sim = {s.name: simulate(s, model) for s in scenarios}
    parallel = args.parallel or (PARALLEL if real else len(scenarios))
    logs = Path(tempfile.mkdtemp(prefix="wanka-conformance-"))
    redis_port = free_port()
    os.environ.update(
        SETTINGS, WANKA_DATA_DIR=str(logs), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0"
    )
    import django

    django.setup()
    from django.db import connection

    from bench.agents import database_url

    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    began = time.monotonic()
    try:
        with processes.waiting_for("the scenarios on the stack to end"):
            stack, violations = asyncio.run(
                on_stack(scenarios, logs, database_url(), redis_port, args.backend, parallel)
            )
    finally:
        connection.close()
        connection.creation.destroy_test_db(test_db, verbosity=0)
    print(f"logs: {logs}", file=sys.stderr)
    allowed = model.gap * (2 if args.short else 1)
    result = compare(scenarios, stack, sim, violations, allowed)
    wall = round(time.monotonic() - began)
    print(json.dumps({**result, "backend": args.backend, "wall_s": wall, "reference_s": reference}))
    if result["agree"] < result["scenarios"] or result["max_ettr_gap"] > allowed:
        raise SystemExit("the stack and the simulator disagree")
    if result["violations"] or result["false_hangs"]:
        raise SystemExit("the stack broke an invariant or took a running job for hung")


if __name__ == "__main__":
    main()
