"""Scheduling policies compared in a simulation: Wanka's, and three baselines.

Each is a small transformation of what the production engine (`scheduler.engine.plan`) is
given, so every policy places gangs by the same rules and differs only where its definition
says:

- `wanka`: the cluster spec's queues, cohorts and preemption policies as they are.
- `fifo`: one strict-FIFO queue per region holding all of the region's GPUs (the engine runs a
  queue's work only in its own region), each job in that of its own queue's region: jobs start
  in submit order, a gang that does not fit blocks everything behind it in its region, and
  nothing is ever preempted or shrunk (job priorities and budgets are ignored).
- `static`: static partitions: each queue uses only its own nominal quota, in no cohort, so it
  neither borrows nor lends; within a queue, priorities still preempt as the queue says.
- `no-reclaim`: priority with borrowing but without reclaim: queues borrow idle quota of their
  cohort, but a queue under its quota never takes back what others borrowed; within a queue,
  priorities still preempt.

One more, for mixed fleets, is not among the what-if's choices (`POLICIES`): `blind`, Wanka's
blind to GPU models' speeds, the baseline of `bench.hetero`. The engine is not told a job's
speeds (`TraceJob.speeds`; its run time still follows them), so it starts a job that accepts
several models on the first of them with room, in the job's order, not on the fastest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from scheduler.engine import (
    Cohort,
    NodeIndex,
    Plan,
    PreemptionPolicy,
    Queue,
    Quota,
    ReclaimWithinCohort,
    Snapshot,
    Strategy,
    WithinClusterQueue,
    plan,
)
from scheduler.sim.spec import ClusterSpec
from scheduler.sim.trace import TraceJob

NO_PREEMPTION = PreemptionPolicy(
    reclaim_within_cohort=ReclaimWithinCohort.NEVER,
    within_cluster_queue=WithinClusterQueue.NEVER,
)


@dataclass(frozen=True)
class SchedulingPolicy:
    """What the engine sees under one policy: queues and cohorts, and each job's queue and
    priority."""

    name: str
    queues: tuple[Queue, ...]
    cohorts: tuple[Cohort, ...]
    # The FIFO baseline's queue id for each of the spec's queues (that of the queue's region);
    # its jobs then have priority 0 and no budgets. None: every job keeps its own queue.
    fifo_of: Mapping[str, int] | None = None
    speeds: bool = True  # whether the engine is told jobs' speeds per GPU model

    def queue_id(self, job: TraceJob, spec: ClusterSpec) -> int:
        return spec.queue_ids[job.queue] if self.fifo_of is None else self.fifo_of[job.queue]

    def priority(self, job: TraceJob) -> int:
        return job.priority if self.fifo_of is None else 0

    def plan(self, snapshot: Snapshot, now: float, index: NodeIndex | None = None) -> Plan:
        """The production engine's plan for the transformed snapshot."""
        return plan(snapshot, now, index=index)


def wanka(spec: ClusterSpec) -> SchedulingPolicy:
    return SchedulingPolicy("wanka", spec.queues, spec.cohorts)


def fifo(spec: ClusterSpec) -> SchedulingPolicy:
    """One strict-FIFO queue per region, numbered from 1 in region order, with all of the
    region's GPUs as its quota; regions of queues without nodes get a queue with none."""
    capacity: dict[str, Counter[str]] = {queue.region: Counter() for queue in spec.queues}
    for node in spec.nodes:
        capacity.setdefault(node.region, Counter())[node.gpu_model] += node.gpus
    queues = tuple(
        Queue(
            number,
            f"fifo {region}" if region else "fifo",
            tuple(Quota(model, gpus) for model, gpus in sorted(capacity[region].items())),
            strategy=Strategy.STRICT_FIFO,
            preemption=NO_PREEMPTION,
            region=region,
        )
        for number, region in enumerate(sorted(capacity), start=1)
    )
    of_region = {queue.region: queue.id for queue in queues}
    fifo_of = {queue.name: of_region[queue.region] for queue in spec.queues}
    return SchedulingPolicy("fifo", queues, (), fifo_of=fifo_of)


def static(spec: ClusterSpec) -> SchedulingPolicy:
    queues = tuple(replace(queue, cohort=None) for queue in spec.queues)
    return SchedulingPolicy("static", queues, ())


def no_reclaim(spec: ClusterSpec) -> SchedulingPolicy:
    queues = tuple(
        replace(
            queue,
            preemption=replace(
                queue.preemption,
                reclaim_within_cohort=ReclaimWithinCohort.NEVER,
                borrow_within_cohort=False,
            ),
        )
        for queue in spec.queues
    )
    return SchedulingPolicy("no-reclaim", queues, spec.cohorts)


def blind(spec: ClusterSpec) -> SchedulingPolicy:
    return SchedulingPolicy("blind", spec.queues, spec.cohorts, speeds=False)


POLICIES: dict[str, Callable[[ClusterSpec], SchedulingPolicy]] = {
    "wanka": wanka,
    "fifo": fifo,
    "static": static,
    "no-reclaim": no_reclaim,
}


def make_policy(name: str, spec: ClusterSpec) -> SchedulingPolicy:
    """The policy called `name` for this cluster; ValueError naming the known ones."""
    try:
        return POLICIES[name](spec)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
