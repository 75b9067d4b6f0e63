"""Conformance: scripted scenarios on the whole stack and in the simulator, side by side.

    python -m bench.conformance [--short] [--only SCENARIO ...]

Eight scenarios, each on a cluster of its own (one pod of 8-GPU H800 nodes, a region of its
own, two queues of one cohort): a reclaim with graceful preemption; an elastic job shrunk for
a claimant, then grown back; XID 79 on a job with a hot spare; XID 79 on an elastic job with
none; an agent that goes silent; a hang; a straggler (its queue replaces stragglers); a
drain. On the stack (a fresh throwaway PostgreSQL database, a Redis server of its own, daphne,
a Celery worker and beat, a simulated agent per node on its own WebSocket, heartbeats every
second) all eight run at once, in real time; in the simulator each runs with the production
engine on the same cluster, jobs and incidents, with the stack's delays
(`DETECTION`) and costs (`COSTS`).

For each scenario it prints every job's history on both sides, in the portal's words
(running, preempting, pending, recovering (spare), succeeded ...), whether they agree, and
each job's ETTR on both. The last line is JSON: scenarios, agree (how many agree), max_ettr_gap,
and per scenario its histories and ETTRs. Targets: all agree, no ETTR gap above 0.02; it
fails past them. `--short` halves the jobs' lengths (two minutes in all, for CI), so that the
same seconds weigh twice in an ETTR: it holds the gap to 0.04. The JSON also carries
reference_s, the reference loop (`bench.reference`) timed first. Past `--timeout` seconds it
says what it was waiting for and exits 1; its processes are stopped then, on failure and on
SIGTERM.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench import processes
from bench.reference import reference_s
from scheduler.checkpointing import Costs, Policy, PolicyKind
from scheduler.sim.incidents import Detection, Incident

GAP = 0.02  # the largest ETTR gap between the two sides that passes
HEARTBEAT_S = 1.0
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
)  # fmt: skip


# -- the simulator ---------------------------------------------------------------------------


def simulate(scenario: Scenario) -> dict:
    """Each job's history and ETTR in the simulator."""
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
    spec = replace(spec, spares=spares)
    ids = {job.name: number for number, job in enumerate(scenario.jobs, start=1)}
    trace = [
        TraceJob(
            ids[job.name], job.submit_s, job.gpus, "H800", job.duration_s, job.queue,
            min_gpus=job.min_gpus, checkpoint=Policy(PolicyKind(job.policy), job.interval_s),
        )
        for job in scenario.jobs
    ]  # fmt: skip
    incidents = [Incident(at, ids[name], rank, code) for at, name, rank, code in scenario.incidents]
    detection = replace(DETECTION, replace_stragglers=scenario.name == "straggler")
    config = SimConfig(
        cycle_s=1.0,
        costs=COSTS,
        failures_per_gpu_hour=0.0,
        grow_every_s=30.0,
        detection=detection,
    )
    sim = Simulator(trace, spec, make_policy("wanka", spec), config, incidents=incidents)
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


def submit(scenario: Scenario, job: Job) -> int:
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


async def on_stack(scenarios: tuple[Scenario, ...], logs: Path, database_url: str, redis_port: int):
    """Run every scenario at once on one stack; each job's history and ETTR."""
    from bench.soak import db, start_stack
    from portal.cluster.commands import send_command
    from scheduler.agent.fleet import build_agent

    specs = {s.name: await db(build, s) for s in scenarios}
    children, port = await asyncio.to_thread(start_stack, logs, database_url, redis_port)
    url = f"ws://127.0.0.1:{port}/ws/agent/"
    agents = {n.hostname: build_agent(n, url, HEARTBEAT_S) for ns in specs.values() for n in ns}
    tasks = [asyncio.create_task(agent.run()) for agent in agents.values()]

    async def connected() -> int:
        from portal.cluster.models import Node

        return await db(lambda: Node.objects.filter(connected=True).count())

    try:
        deadline = time.monotonic() + 60
        while await connected() < len(agents):
            if time.monotonic() > deadline:
                raise SystemExit("the agents did not all connect")
            await asyncio.sleep(0.2)

        async def run(scenario: Scenario) -> dict:
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
                    ids[item.name] = await db(submit, scenario, item)
                    continue
                _, name, rank, code = item
                node = await db(node_of, ids[name], rank)
                if node is None:
                    print(f"{scenario.name}: {name} has no node of rank {rank}", file=sys.stderr)
                elif code == "disconnect":
                    await agents[node[1]].stop()
                elif code == "drain":
                    await db(drain, node[0])
                else:
                    await db(lambda n=node, c=code: send_command(n[0], "inject_fault", code=c))
            limit = time.monotonic() + 600
            while not await db(finished, list(ids.values())):
                if time.monotonic() > limit:
                    break
                await asyncio.sleep(0.5)
            return {job.name: await db(outcome, ids[job.name]) for job in scenario.jobs}

        results = await asyncio.gather(*(run(s) for s in scenarios))
        return dict(zip([s.name for s in scenarios], results, strict=True))
    finally:
        await asyncio.gather(*(agent.stop() for agent in agents.values()))
        for task in tasks:
            task.cancel()
        for child in reversed(list(children.values())):
            child.stop()


def compare(scenarios, stack: dict, sim: dict) -> dict:
    rows, agree, gap = {}, 0, 0.0
    for scenario in scenarios:
        jobs = {}
        same = True
        for job in scenario.jobs:
            real, model = stack[scenario.name][job.name], sim[scenario.name][job.name]
            same &= real["history"] == model["history"]
            if real["ettr"] is not None and model["ettr"] is not None:
                gap = max(gap, abs(real["ettr"] - model["ettr"]))
            jobs[job.name] = {"stack": real, "sim": model}
        agree += same
        rows[scenario.name] = {"agree": same, "jobs": jobs}
        print(f"{scenario.name}: {'agree' if same else 'DIFFER'}", file=sys.stderr)
        for name, sides in jobs.items():
            for side in ("stack", "sim"):
                ettr = sides[side]["ettr"]
                shown = "-" if ettr is None else f"{ettr:.3f}"
                history = ", ".join(sides[side]["history"])
                print(f"  {name:9} {side:5} ETTR {shown}: {history}", file=sys.stderr)
            real, model = sides["stack"]["ettr"], sides["sim"]["ettr"]
            apart = None not in (real, model) and abs(real - model) > GAP
            log = sides["stack"].pop("log")  # printed where the sides part, never in the JSON
            for line in log if apart or not same else ():
                print(f"    {line}", file=sys.stderr)
    return {"scenarios": len(rows), "agree": agree, "max_ettr_gap": round(gap, 4), **rows}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="jobs half as long")
    names = [s.name for s in SCENARIOS]
    parser.add_argument("--only", action="append", choices=names, help="run only these")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds in all")
    args = parser.parse_args(argv)
    processes.supervise(args.timeout)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    chosen = [s for s in SCENARIOS if s.name in (args.only or names)]
    scenarios = tuple(s.shorter(0.5) if args.short else s for s in chosen)
    sim = {s.name: simulate(s) for s in scenarios}
    logs = Path(tempfile.mkdtemp(prefix="wanka-conformance-"))
    from bench.soak import free_port

    redis_port = free_port()
    os.environ.update(
        SETTINGS, WANKA_DATA_DIR=str(logs), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0"
    )
    import django

    django.setup()
    from django.db import connection

    from bench.agents import database_url

    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        with processes.waiting_for("the scenarios on the stack to end"):
            stack = asyncio.run(on_stack(scenarios, logs, database_url(), redis_port))
    finally:
        connection.close()
        connection.creation.destroy_test_db(test_db, verbosity=0)
    print(f"logs: {logs}", file=sys.stderr)
    result = compare(scenarios, stack, sim)
    print(json.dumps({**result, "reference_s": reference}))
    if result["agree"] < result["scenarios"] or result["max_ettr_gap"] > GAP * (
        2 if args.short else 1
    ):
        raise SystemExit("the stack and the simulator disagree")


if __name__ == "__main__":
    main()
