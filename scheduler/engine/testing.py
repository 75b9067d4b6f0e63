"""Builders for small snapshots, for tests and examples (like Kueue's pkg/util/testing).

    nlp = make_queue("nlp", h800=64, cohort="research")
    nodes = make_cluster("H800", leaves=2, nodes=4)
    job = make_workload(1, nlp, gpus=16)
    snapshot = make_snapshot(nodes, [nlp], [job])

`make_snapshot` takes the GPUs of running workloads off their nodes' free lists, so a test
states who holds what only once. `apply_plan` plays a plan onto its snapshot (preempted work
stops at once and is requeued, shrinks and admissions take effect), for tests that run cycle
after cycle.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from scheduler.engine.model import (
    Cohort,
    Node,
    Placement,
    Plan,
    PreemptionPolicy,
    Queue,
    Quota,
    Snapshot,
    Strategy,
    TopologyLevel,
    Workload,
)

DEFAULT_POLICY = PreemptionPolicy()


def make_queue(
    name: str,
    *,
    cohort: str | None = None,
    priority: int = 0,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    guarantee: int = 0,
    weight: float = 1.0,
    strategy: Strategy = Strategy.BEST_EFFORT_FIFO,
    preemption: PreemptionPolicy = DEFAULT_POLICY,
    region: str = "",
    **nominal: int,
) -> Queue:
    """A queue with a nominal quota per GPU model, given as `h800=64`; limits and the
    guarantee apply to every model.

    The id is derived from the name, so tests can refer to queues by name alone.
    """
    quotas = tuple(
        Quota(
            model.upper(),
            count,
            guarantee=min(guarantee, count),
            borrowing_limit=borrowing_limit,
            lending_limit=lending_limit,
        )
        for model, count in sorted(nominal.items())
    )
    return Queue(
        zlib.crc32(name.encode()),
        name,
        quotas,
        cohort=cohort,
        priority=priority,
        weight=weight,
        region=region,
        strategy=strategy,
        preemption=preemption,
    )


def make_cohort(name: str, parent: str | None = None, **limits: int | None) -> Cohort:
    """A cohort, nested under `parent`; `h800=16` gives it quota of its own, and
    `h800_borrowing_limit=8` / `h800_lending_limit=8` limit what it takes from or gives to its
    parent."""
    models = sorted({key.split("_")[0] for key in limits})
    quotas = tuple(
        Quota(
            model.upper(),
            limits.get(model) or 0,
            borrowing_limit=limits.get(f"{model}_borrowing_limit"),
            lending_limit=limits.get(f"{model}_lending_limit"),
        )
        for model in models
    )
    return Cohort(name, parent, quotas)


def make_node(
    name: str,
    *,
    node_id: int,
    gpu_model: str = "H800",
    datacenter: str = "dc1",
    pod: str = "p1",
    leaf: str = "l1",
    gpus: int = 8,
    schedulable: bool = True,
) -> Node:
    """One node with all its GPUs free."""
    return Node(
        node_id,
        name,
        gpu_model,
        datacenter,
        pod,
        leaf,
        gpus,
        tuple(range(gpus)),
        schedulable=schedulable,
    )


def make_cluster(
    gpu_model: str = "H800",
    *,
    datacenters: int = 1,
    pods: int = 1,
    leaves: int = 1,
    nodes: int = 4,
    gpus: int = 8,
    first_id: int = 1,
    prefix: str = "",
) -> tuple[Node, ...]:
    """A regular cluster with every GPU free, named like `dc1-p2-l1-n3`.

    Each data center has `pods` pods of `leaves` leaves of `nodes` nodes. Give clusters of
    different models a distinct `first_id` and `prefix` when one snapshot holds both.
    """
    built = []
    for d in range(1, datacenters + 1):
        for p in range(1, pods + 1):
            for leaf in range(1, leaves + 1):
                for n in range(1, nodes + 1):
                    name = f"{prefix}dc{d}-p{p}-l{leaf}-n{n}"
                    built.append(
                        make_node(
                            name,
                            node_id=first_id + len(built),
                            gpu_model=gpu_model,
                            datacenter=f"dc{d}",
                            pod=f"p{p}",
                            leaf=f"l{leaf}",
                            gpus=gpus,
                        )
                    )
    return tuple(built)


def cordon(nodes: Iterable[Node], *names: str) -> tuple[Node, ...]:
    """The nodes, with those named marked unschedulable."""
    return tuple(replace(node, schedulable=False) if node.name in names else node for node in nodes)


def on(node: Node, *indices: int) -> Placement:
    """A placement on `node`: the given GPU indices, or all of them."""
    return Placement(node.id, indices or tuple(range(node.gpus)))


def make_workload(
    workload_id: int,
    queue: Queue,
    gpus: int,
    *,
    gpu_model: str = "H800",
    submitted_at: float | None = None,
    priority: int = 0,
    topology: TopologyLevel = TopologyLevel.DATACENTER,
    required: bool = False,
    placements: Sequence[Placement] = (),
    **extra: object,
) -> Workload:
    """A workload of `queue`; pending unless given placements. Submitted at its id by default.

    `extra` sets the other fields: min_gpus, max_gpus, started_at, last_checkpoint_at,
    time_limit_s, preempting.
    """
    return Workload(
        workload_id,
        queue.id,
        gpu_model,
        gpus,
        float(workload_id) if submitted_at is None else submitted_at,
        priority=priority,
        topology=topology,
        topology_required=required,
        placements=tuple(placements),
        **extra,  # type: ignore[arg-type]
    )


def make_running(
    workload_id: int,
    queue: Queue,
    *placements: Placement,
    gpu_model: str = "H800",
    **extra: object,
) -> Workload:
    """A running workload holding exactly these placements; `extra` as for make_workload."""
    gpus = sum(len(placement.gpu_indices) for placement in placements)
    return make_workload(
        workload_id, queue, gpus, gpu_model=gpu_model, placements=placements, **extra
    )


def make_snapshot(
    nodes: Iterable[Node],
    queues: Iterable[Queue],
    workloads: Iterable[Workload] = (),
    cohorts: Iterable[Cohort] = (),
) -> Snapshot:
    """A snapshot whose nodes no longer list the GPUs its running workloads hold as free."""
    workloads = tuple(workloads)
    held: dict[int, set[int]] = defaultdict(set)
    for workload in workloads:
        for placement in workload.placements:
            held[placement.node_id].update(placement.gpu_indices)
    nodes = tuple(
        replace(node, free=tuple(i for i in node.free if i not in held[node.id])) for node in nodes
    )
    return Snapshot(nodes, tuple(queues), workloads, tuple(cohorts))


def apply_plan(snapshot: Snapshot, plan: Plan, now: float) -> Snapshot:
    """The snapshot after the plan, as if every step took effect at once: preempted workloads
    stop and wait again (keeping their submit time), shrunk ones give back their released
    GPUs, moved ones restart on their new GPUs, admitted ones start on their placements at
    `now`."""
    stopped = {p.workload_id for p in plan.preemptions}
    shrunk = {s.workload_id: s for s in plan.shrinks}
    moved = {m.workload_id: m for m in plan.moves}
    started = {a.workload_id: a.placements for a in plan.admissions}
    models = {node.id: node.gpu_model for node in snapshot.nodes}
    workloads = []
    for workload in snapshot.workloads:
        if workload.id in stopped:
            workload = replace(workload, placements=(), started_at=None, preempting=False)
        elif workload.id in shrunk:
            workload = _shrunk(workload, shrunk[workload.id].released)
        elif workload.id in moved:
            move = moved[workload.id]
            workload = replace(
                workload, placements=move.placements, gpu_model=move.gpu_model, resized_at=now
            )
        elif workload.id in started:
            placements = started[workload.id]
            gpus = sum(len(p.gpu_indices) for p in placements)
            model = models[placements[0].node_id]  # the one chosen, where it accepts several
            workload = replace(
                workload, placements=placements, gpus=gpus, started_at=now, gpu_model=model
            )
        workloads.append(workload)
    nodes = [replace(node, free=tuple(range(node.gpus))) for node in snapshot.nodes]
    return make_snapshot(nodes, snapshot.queues, workloads, snapshot.cohorts)


def _shrunk(workload: Workload, released: Iterable[Placement]) -> Workload:
    gone = {(p.node_id, i) for p in released for i in p.gpu_indices}
    placements = tuple(
        Placement(p.node_id, kept)
        for p in workload.placements
        if (kept := tuple(i for i in p.gpu_indices if (p.node_id, i) not in gone))
    )
    gpus = sum(len(p.gpu_indices) for p in placements)
    return replace(workload, placements=placements, gpus=gpus)


def outcome(plan: Plan, snapshot: Snapshot) -> dict[int, str]:
    """Each pending workload's fate in words, for table tests.

    An admitted workload maps to its nodes, e.g. `"dc1-p1-l1-n1 dc1-p1-l1-n2"`, with the GPU
    indices added for a partial node (`"dc1-p1-l1-n1[0,1]"`); a waiting one to its reason.
    """
    nodes = {node.id: node for node in snapshot.nodes}
    result = {pending.workload_id: pending.reason for pending in plan.pending}
    for admission in plan.admissions:
        result[admission.workload_id] = " ".join(
            _describe(nodes[p.node_id], p) for p in admission.placements
        )
    return result


def _describe(node: Node, placement: Placement) -> str:
    if len(placement.gpu_indices) == node.gpus:
        return node.name
    return f"{node.name}[{','.join(map(str, placement.gpu_indices))}]"
