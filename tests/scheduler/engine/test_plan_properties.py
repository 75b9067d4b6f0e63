"""What every plan must satisfy, checked on random small clusters and workloads."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from itertools import groupby
from operator import itemgetter
from random import Random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.engine import (
    Node,
    Placement,
    Plan,
    PreemptionPolicy,
    Queue,
    Quota,
    ReclaimWithinCohort,
    Snapshot,
    TopologyLevel,
    WithinClusterQueue,
    Workload,
    plan,
)
from scheduler.engine.testing import make_snapshot

NODE_SIZE = {"H800": 8, "H20": 4}
COHORTS = [None, "research", "research", "vision"]
POLICIES = st.sampled_from(
    [
        PreemptionPolicy(),
        PreemptionPolicy(
            reclaim_within_cohort=ReclaimWithinCohort.NEVER,
            within_cluster_queue=WithinClusterQueue.NEVER,
        ),
        PreemptionPolicy(borrow_within_cohort=True, max_priority_threshold=1),
    ]
)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def nodes(draw: st.DrawFn) -> tuple[Node, ...]:
    """Up to 2 data centers x 2 pods x 2 leaves x 4 nodes, of two models and node sizes."""
    built: list[Node] = []
    for dc in range(draw(st.integers(1, 2))):
        for pod in range(draw(st.integers(1, 2))):
            for leaf in range(draw(st.integers(1, 2))):
                for _ in range(draw(st.integers(1, 4))):
                    model = draw(st.sampled_from(sorted(NODE_SIZE)))
                    size = NODE_SIZE[model]
                    # Mostly empty nodes, so that multi-node gangs get a chance.
                    partly_used = draw(st.integers(0, 3)) == 0
                    free = (
                        draw(st.frozensets(st.integers(0, size - 1)))
                        if partly_used
                        else frozenset(range(size))
                    )
                    built.append(
                        Node(
                            len(built) + 1,
                            f"n{len(built) + 1:02d}",
                            model,
                            f"dc{dc}",
                            f"p{pod}",
                            f"l{leaf}",
                            size,
                            tuple(sorted(free)),
                            schedulable=draw(st.booleans() | st.just(True)),
                        )
                    )
    return tuple(built)


@st.composite
def queues(draw: st.DrawFn) -> tuple[Queue, ...]:
    """One to four queues with random quotas, cohorts and limits."""
    # Coarse values, so that usage often lands exactly on a quota or a limit.
    limits = st.sampled_from([None, 0, 4, 8, 16])
    return tuple(
        Queue(
            qid,
            f"q{qid}",
            tuple(
                Quota(
                    model,
                    nominal := draw(st.sampled_from([0, 4, 8, 16, 32, 64])),
                    guarantee=draw(st.sampled_from([0, nominal // 2, nominal])),
                    borrowing_limit=draw(limits),
                    lending_limit=draw(limits),
                )
                for model in sorted(NODE_SIZE)
            ),
            cohort=draw(st.sampled_from(COHORTS)),
            preemption=draw(POLICIES),
        )
        for qid in range(1, draw(st.integers(1, 4)) + 1)
    )


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """A consistent snapshot: each node's busy GPUs belong to one running workload."""
    cluster = draw(nodes())
    all_queues = draw(queues())
    queue_ids = [queue.id for queue in all_queues]
    running = [
        running_details(
            draw,
            Workload(
                100 + node.id,
                draw(st.sampled_from(queue_ids)),
                node.gpu_model,
                node.gpus - len(node.free),
                0.0,
                placements=(
                    Placement(node.id, tuple(sorted(set(range(node.gpus)) - set(node.free)))),
                ),
            ),
        )
        for node in cluster
        if len(node.free) < node.gpus
    ]
    pending = [
        # Queue 99 is not in the snapshot; one workload in five belongs to it or so.
        Workload(
            wid,
            draw(st.sampled_from([*queue_ids * 4, 99])),
            draw(st.sampled_from(sorted(NODE_SIZE))),
            draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48])),
            float(draw(st.integers(0, 3))),
            priority=draw(st.integers(0, 2)),
            topology=draw(st.sampled_from(TopologyLevel)),
            topology_required=draw(st.booleans()),
            time_limit_s=draw(st.sampled_from([None, 10.0, 1000.0])),
        )
        for wid in range(1, draw(st.integers(1, 10)) + 1)
    ]
    return Snapshot(cluster, all_queues, (*running, *pending))


def running_details(draw: st.DrawFn, workload: Workload) -> Workload:
    """A running workload with a random priority, start, checkpoint, time limit, elasticity,
    and now and then already on its way out."""
    started = float(draw(st.integers(-100, 0)))
    return replace(
        workload,
        priority=draw(st.integers(0, 2)),
        started_at=started,
        last_checkpoint_at=draw(st.sampled_from([None, started + 5])),
        time_limit_s=draw(st.sampled_from([None, 50.0, 500.0])),
        min_gpus=draw(st.sampled_from([None, None, 1, workload.gpus // 2 or 1])),
        preempting=draw(st.integers(0, 9)) == 0,
    )


@st.composite
def crowded_cohorts(draw: st.DrawFn) -> Snapshot:
    """One cohort of busy queues on one roomy leaf, so that quota is what decides."""
    cluster = tuple(
        Node(i, f"n{i:02d}", "H800", "dc0", "p0", "l0", 8, tuple(range(8))) for i in range(1, 17)
    )
    limits = st.sampled_from([None, None, 4, 8, 16])
    all_queues = tuple(
        Queue(
            qid,
            f"q{qid}",
            (
                Quota(
                    "H800",
                    nominal := draw(st.sampled_from([0, 8, 16, 32])),
                    guarantee=draw(st.sampled_from([0, nominal // 2])),
                    borrowing_limit=draw(limits),
                    lending_limit=draw(limits),
                ),
            ),
            cohort=draw(st.sampled_from(["research", "research", None])),
            preemption=draw(POLICIES),
        )
        for qid in range(1, draw(st.integers(2, 4)) + 1)
    )
    # Running workloads fill the leaf's GPUs in order, some spilling over onto a second node.
    gpus = iter([(node.id, index) for node in cluster for index in range(8)])
    held = {queue.id: draw(st.sampled_from([0, 0, 4, 8, 12])) for queue in all_queues}
    running = [
        running_details(
            draw, running_on([next(gpus) for _ in range(count)], 100 + queue_id, queue_id)
        )
        for queue_id, count in held.items()
        if count
    ]
    pending = [
        Workload(
            wid,
            draw(st.sampled_from(sorted(held))),
            "H800",
            draw(st.sampled_from([1, 2, 4, 8, 16])),
            float(wid),
            priority=draw(st.integers(0, 3)),
        )
        for wid in range(1, draw(st.integers(1, 8)) + 1)
    ]
    return make_snapshot(cluster, all_queues, [*running, *pending])


def running_on(gpus: list[tuple[int, int]], workload_id: int, queue_id: int) -> Workload:
    """A running H800 workload holding these (node id, GPU index) pairs."""
    placements = tuple(
        Placement(node_id, tuple(index for _, index in group))
        for node_id, group in groupby(gpus, key=itemgetter(0))
    )
    return Workload(workload_id, queue_id, "H800", len(gpus), 0.0, placements=placements)


def admitted(snapshot: Snapshot, result: Plan) -> list[tuple[Workload, tuple[Placement, ...]]]:
    workloads = {workload.id: workload for workload in snapshot.workloads}
    return [(workloads[a.workload_id], a.placements) for a in result.admissions]


@PROPERTY
@given(snapshots())
def test_no_gpu_is_given_twice_and_only_free_gpus_of_schedulable_nodes_are_given(
    snapshot: Snapshot,
) -> None:
    nodes = {node.id: node for node in snapshot.nodes}
    taken = Counter(
        (p.node_id, i) for w in snapshot.workloads for p in w.placements for i in p.gpu_indices
    )
    for workload, placements in admitted(snapshot, plan(snapshot, now=0.0)):
        for placement in placements:
            node = nodes[placement.node_id]
            assert node.schedulable and node.gpu_model == workload.gpu_model
            assert set(placement.gpu_indices) <= set(node.free)
            taken.update((node.id, i) for i in placement.gpu_indices)
    assert all(count == 1 for count in taken.values())


@PROPERTY
@given(snapshots())
def test_gangs_are_all_or_nothing_with_exactly_the_gpus_asked(snapshot: Snapshot) -> None:
    nodes = {node.id: node for node in snapshot.nodes}
    for workload, placements in admitted(snapshot, plan(snapshot, now=0.0)):
        assert sum(len(p.gpu_indices) for p in placements) == workload.gpus
        assert len({p.node_id for p in placements}) == len(placements)
        if workload.gpus >= NODE_SIZE[workload.gpu_model]:
            assert all(len(p.gpu_indices) == nodes[p.node_id].gpus for p in placements)
        else:
            assert len(placements) == 1


@PROPERTY
@given(snapshots())
def test_gangs_stay_in_one_data_center_and_within_a_required_domain(snapshot: Snapshot) -> None:
    nodes = {node.id: node for node in snapshot.nodes}
    depth = {
        TopologyLevel.NODE: 4,
        TopologyLevel.LEAF: 3,
        TopologyLevel.POD: 2,
        TopologyLevel.DATACENTER: 1,
        TopologyLevel.ANY: 0,
    }
    for workload, placements in admitted(snapshot, plan(snapshot, now=0.0)):
        paths = [
            (n.datacenter, n.pod, n.leaf, n.id) for n in (nodes[p.node_id] for p in placements)
        ]
        if workload.topology != TopologyLevel.ANY:
            assert len({path[:1] for path in paths}) == 1
        if workload.topology_required and len(placements) > 1:
            assert len({path[: depth[workload.topology]] for path in paths}) == 1


@PROPERTY
@given(snapshots() | crowded_cohorts())
def test_quota_and_borrowing_limits_hold_at_every_admission(snapshot: Snapshot) -> None:
    """Replays the admissions in order against the quota rules, stated from scratch. Work
    already stopping holds no quota; work the plan preempts still does (conservative)."""
    queues = {queue.id: queue for queue in snapshot.queues}
    usage = Counter()
    for workload in snapshot.workloads:
        if workload.preempting:
            continue
        usage[(workload.queue_id, workload.gpu_model)] += sum(
            len(p.gpu_indices) for p in workload.placements
        )
    for workload, _ in admitted(snapshot, plan(snapshot, now=0.0)):
        queue, model = queues[workload.queue_id], workload.gpu_model
        usage[(queue.id, model)] += workload.gpus
        borrowed = usage[(queue.id, model)] - queue.quota(model).nominal
        if borrowed > 0:
            assert queue.cohort is not None
            limit = queue.quota(model).borrowing_limit
            assert limit is None or borrowed <= limit
            members = [q for q in queues.values() if q.cohort == queue.cohort]
            assert sum(over(q, model, usage) for q in members) <= sum(
                lent(q, model, usage) for q in members if q.id != queue.id
            )


def over(queue: Queue, model: str, usage: Counter[tuple[int, str]]) -> int:
    return max(0, usage[(queue.id, model)] - queue.quota(model).nominal)


def lent(queue: Queue, model: str, usage: Counter[tuple[int, str]]) -> int:
    quota = queue.quota(model)
    limit = quota.lending_limit if quota.lending_limit is not None else quota.nominal
    return max(0, min(quota.nominal - usage[(queue.id, model)], limit))


@PROPERTY
@given(snapshots())
def test_every_pending_workload_is_admitted_or_told_why_and_where_it_stands(
    snapshot: Snapshot,
) -> None:
    result = plan(snapshot, now=0.0)
    pending_ids = sorted(w.id for w in snapshot.workloads if not w.is_running)
    decided = [a.workload_id for a in result.admissions] + [p.workload_id for p in result.pending]
    assert sorted(decided) == pending_ids
    assert all(p.reason.strip() for p in result.pending)
    queue_of = {w.id: w.queue_id for w in snapshot.workloads}
    positions: dict[int, list[int]] = {}
    for entry in result.pending:
        positions.setdefault(queue_of[entry.workload_id], []).append(entry.position)
    assert all(seen == list(range(1, len(seen) + 1)) for seen in positions.values())


@PROPERTY
@given(snapshots())
def test_usage_is_what_running_and_admitted_workloads_hold_after_the_plan(
    snapshot: Snapshot,
) -> None:
    result = plan(snapshot, now=0.0)
    stopped = {p.workload_id for p in result.preemptions}
    given_back = {
        s.workload_id: sum(len(p.gpu_indices) for p in s.released) for s in result.shrinks
    }
    expected = Counter()
    for workload in snapshot.workloads:
        if workload.id not in stopped and not workload.preempting:
            expected[(workload.queue_id, workload.gpu_model)] += sum(
                len(p.gpu_indices) for p in workload.placements
            ) - given_back.get(workload.id, 0)
    for workload, _ in admitted(snapshot, result):
        expected[(workload.queue_id, workload.gpu_model)] += workload.gpus
    assert result.usage == {key: gpus for key, gpus in expected.items() if gpus}


@PROPERTY
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_same_snapshot_gives_the_same_plan_whatever_its_order(
    snapshot: Snapshot, rng: Random
) -> None:
    shuffled = replace(
        snapshot,
        **{
            name: tuple(rng.sample(getattr(snapshot, name), len(getattr(snapshot, name))))
            for name in ("nodes", "queues", "workloads")
        },
    )
    assert plan(snapshot, now=5.0) == plan(shuffled, now=5.0)
