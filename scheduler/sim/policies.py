"""Scheduling policies compared in a simulation: Wanka's, and three baselines.

Each is a small transformation of what the production engine (`scheduler.engine.plan`) is
given, so every policy places gangs by the same rules and differs only where its definition
says:

- `wanka`: the cluster spec's queues, cohorts and preemption policies as they are.
- `fifo`: one strict-FIFO queue holding the whole cluster: jobs start in submit order, a gang
  that does not fit blocks everything behind it, and nothing is ever preempted or shrunk
  (job priorities are ignored).
- `static`: static partitions: each queue uses only its own nominal quota, in no cohort, so it
  neither borrows nor lends; within a queue, priorities still preempt as the queue says.
- `no-reclaim`: priority with borrowing but without reclaim: queues borrow idle quota of their
  cohort, but a queue under its quota never takes back what others borrowed; within a queue,
  priorities still preempt.
"""

from __future__ import annotations

from collections.abc import Callable
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

FIFO_QUEUE_ID = 0
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
    one_queue: bool = False  # every job goes to FIFO_QUEUE_ID with priority 0

    def queue_id(self, job: TraceJob, spec: ClusterSpec) -> int:
        return FIFO_QUEUE_ID if self.one_queue else spec.queue_ids[job.queue]

    def priority(self, job: TraceJob) -> int:
        return 0 if self.one_queue else job.priority

    def plan(self, snapshot: Snapshot, now: float, index: NodeIndex | None = None) -> Plan:
        """The production engine's plan for the transformed snapshot."""
        return plan(snapshot, now, index=index)


def wanka(spec: ClusterSpec) -> SchedulingPolicy:
    return SchedulingPolicy("wanka", spec.queues, spec.cohorts)


def fifo(spec: ClusterSpec) -> SchedulingPolicy:
    quotas = tuple(Quota(model, gpus) for model, gpus in spec.capacity.items())
    queue = Queue(
        FIFO_QUEUE_ID,
        "fifo",
        quotas,
        strategy=Strategy.STRICT_FIFO,
        preemption=NO_PREEMPTION,
        region=_only_region(spec),
    )
    return SchedulingPolicy("fifo", (queue,), (), one_queue=True)


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


def _only_region(spec: ClusterSpec) -> str:
    regions = sorted({node.region for node in spec.nodes})
    if len(regions) > 1:
        raise ValueError("the fifo baseline needs a cluster of one region")
    return regions[0]
