"""What preemption must always respect, on random cohorts that are full of borrowed work, and
what cycle after cycle of plans must do: settle, never loop, and give queues their quota back."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.engine import (
    FairSharing,
    Plan,
    PreemptionPolicy,
    Queue,
    ReclaimWithinCohort,
    Snapshot,
    WithinClusterQueue,
    Workload,
    plan,
)
from scheduler.engine.testing import (
    apply_plan,
    make_cluster,
    make_cohort,
    make_queue,
    make_snapshot,
    on,
)

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
POLICIES = st.sampled_from(
    [
        PreemptionPolicy(),
        PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.NEVER),
        PreemptionPolicy(within_cluster_queue=WithinClusterQueue.NEVER),
        PreemptionPolicy(borrow_within_cohort=True, max_priority_threshold=2),
        PreemptionPolicy(borrow_within_cohort=True, fair_sharing=FairSharing.OFF),
        PreemptionPolicy(
            reclaim_within_cohort=ReclaimWithinCohort.LOWER_PRIORITY,
            within_cluster_queue=WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY,
            borrow_within_cohort=True,
            fair_sharing=FairSharing.LESS_THAN_INITIAL_SHARE,
        ),
        PreemptionPolicy(preempt_by_fair_share=True, fair_sharing=FairSharing.BOTH),
    ]
)
CYCLES = 30
NEWER = WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY


def fill(draw: st.DrawFn, nodes, queues: list[Queue], first_id: int) -> list[Workload]:
    """Running work on every node: one whole-node job, two half-node jobs, or a two-node gang,
    with random owners, priorities, starts, checkpoints and elasticity."""
    running: list[Workload] = []
    index = 0
    while index < len(nodes):
        shape = draw(st.sampled_from(["whole", "halves", "gang", "empty"]))
        if shape == "gang" and index + 1 < len(nodes):
            parts = [(on(nodes[index]), on(nodes[index + 1]))]
            index += 2
        else:
            node = nodes[index]
            index += 1
            if shape == "empty":
                continue
            parts = (
                [(on(node),)]
                if shape != "halves"
                else [(on(node, 0, 1, 2, 3),), (on(node, 4, 5, 6, 7),)]
            )
        for placements in parts:
            gpus = sum(len(p.gpu_indices) for p in placements)
            running.append(
                Workload(
                    first_id + len(running),
                    draw(st.sampled_from(queues)).id,
                    "H800",
                    gpus,
                    float(draw(st.integers(-5, 5))),
                    priority=draw(st.integers(0, 2)),
                    placements=placements,
                    started_at=float(draw(st.integers(-500, 0))),
                    last_checkpoint_at=draw(st.sampled_from([None, -50.0])),
                    min_gpus=draw(st.sampled_from([None, None, gpus // 2])),
                )
            )
    return running


def pending(draw: st.DrawFn, queues: list[Queue], count: int) -> list[Workload]:
    return [
        Workload(
            wid,
            draw(st.sampled_from(queues)).id,
            "H800",
            draw(st.sampled_from([1, 2, 4, 8, 16])),
            float(wid),
            priority=draw(st.integers(0, 3)),
        )
        for wid in range(1, count + 1)
    ]


@st.composite
def churn(draw: st.DrawFn) -> Snapshot:
    """Two or three queues, mostly in one cohort tree (a cohort and a child cohort that may
    own quota), on one leaf of six nodes full of their work, with more work waiting: what
    preemption feeds on."""
    nodes = make_cluster(nodes=6)
    cohorts = [make_cohort("lab"), make_cohort("team", "lab", h800=draw(st.sampled_from([0, 8])))]
    queues = []
    for name in ("q1", "q2", "q3")[: draw(st.integers(2, 3))]:
        nominal = draw(st.sampled_from([0, 8, 16, 24, 32]))
        queues.append(
            make_queue(
                name,
                h800=nominal,
                guarantee=draw(st.sampled_from([0, nominal // 2])),
                cohort=draw(st.sampled_from(["lab", "lab", "team", None])),
                preemption=draw(POLICIES),
                priority=draw(st.sampled_from([0, 0, 1])),
            )
        )
    workloads = [*fill(draw, nodes, queues, 100), *pending(draw, queues, draw(st.integers(1, 5)))]
    return make_snapshot(nodes, queues, workloads, cohorts)


def usage_before(snapshot: Snapshot) -> Counter:
    usage: Counter = Counter()
    for workload in snapshot.workloads:
        if workload.is_running and not workload.preempting:
            usage[workload.queue_id] += workload.held
    return usage


@PROPERTY
@given(churn())
def test_no_queue_is_preempted_below_its_guarantee(snapshot: Snapshot) -> None:
    """What a queue keeps, gets and is about to get never falls below its guarantee (or below
    what it had, when that was less)."""
    result = plan(snapshot, now=0.0)
    workloads = {w.id: w for w in snapshot.workloads}
    before = usage_before(snapshot)
    after = Counter(before)
    for preemption in result.preemptions:
        after[workloads[preemption.workload_id].queue_id] -= workloads[preemption.workload_id].held
    for shrink in result.shrinks:
        after[workloads[shrink.workload_id].queue_id] -= sum(
            len(p.gpu_indices) for p in shrink.released
        )
    claimants = {p.for_workload_id for p in result.preemptions} | {
        s.for_workload_id for s in result.shrinks
    }
    starting = claimants | {a.workload_id for a in result.admissions}
    for workload_id in starting:
        after[workloads[workload_id].queue_id] += workloads[workload_id].gpus
    for queue in snapshot.queues:
        guarantee = queue.quota("H800").guarantee
        assert after[queue.id] >= min(before[queue.id], guarantee)


@PROPERTY
@given(churn())
def test_every_victim_is_one_the_rules_allow(snapshot: Snapshot) -> None:
    result = plan(snapshot, now=0.0)
    workloads = {w.id: w for w in snapshot.workloads}
    queues = {q.id: q for q in snapshot.queues}
    admitted = {a.workload_id for a in result.admissions}
    # What each queue used at most while the plan was made: before it, plus what it admitted.
    most = usage_before(snapshot) + Counter(
        {q: sum(workloads[a].gpus for a in admitted if workloads[a].queue_id == q) for q in queues}
    )
    for victim_id, claimant_id in [(p.workload_id, p.for_workload_id) for p in result.preemptions]:
        victim, claimant = workloads[victim_id], workloads[claimant_id]
        assert victim.is_running and not victim.preempting
        assert not claimant.is_running and claimant_id not in admitted
        if victim.queue_id == claimant.queue_id:
            newer = queues[victim.queue_id].preemption.within_cluster_queue == NEWER
            assert victim.priority < claimant.priority or (
                newer
                and victim.priority == claimant.priority
                and victim.submitted_at > claimant.submitted_at
            )
        else:
            victim_queue, claimant_queue = queues[victim.queue_id], queues[claimant.queue_id]
            assert victim_queue.cohort is not None and claimant_queue.cohort is not None
            assert most[victim_queue.id] > victim_queue.quota("H800").nominal
    for shrink in result.shrinks:
        workload = workloads[shrink.workload_id]
        released = {(p.node_id, i) for p in shrink.released for i in p.gpu_indices}
        held = {(p.node_id, i) for p in workload.placements for i in p.gpu_indices}
        assert released <= held
        assert shrink.gpus == workload.held - len(released) >= workload.fewest_gpus


@PROPERTY
@given(churn())
def test_room_held_for_a_claimant_is_still_enough_once_its_victims_stop(
    snapshot: Snapshot,
) -> None:
    result = plan(snapshot, now=0.0)
    workloads = {w.id: w for w in snapshot.workloads}
    nodes = {node.id: node for node in snapshot.nodes}
    freed: Counter = Counter()  # (claimant, node) -> GPUs its shrinks give back
    for shrink in result.shrinks:
        for placement in shrink.released:
            freed[shrink.for_workload_id, placement.node_id] += len(placement.gpu_indices)
    taken = Counter(
        p.node_id for a in result.admissions for p in a.placements for _ in p.gpu_indices
    )
    # Work stopping already and every victim of the plan, whichever claimant it was evicted
    # for: what it frees on a node is the room of whoever holds the node.
    victims = [workloads[p.workload_id] for p in result.preemptions]
    stopping = Counter(
        p.node_id
        for w in [*(w for w in snapshot.workloads if w.preempting), *victims]
        for p in w.placements
        for _ in p.gpu_indices
    )
    # Claimants: those that evict or shrink, and those that wait only for stopping work.
    claimants = {p.for_workload_id for p in result.preemptions} | {
        s.for_workload_id for s in result.shrinks
    }
    claimants |= {r.workload_id for r in result.reservations if "to make room" in r.reason}
    # Gangs hold whole nodes, each for one of them; smaller jobs may share a node's room.
    whole = [n for r in result.reservations if workloads[r.workload_id].gpus >= 8 for n in r.nodes]
    assert len(whole) == len(set(whole))
    shared: Counter = Counter()  # node -> GPUs smaller claimants count on there
    for reservation in result.reservations:
        if reservation.workload_id not in claimants:
            continue
        claimant = workloads[reservation.workload_id]
        room = {
            n: len(nodes[n].free) - taken[n] + stopping[n] + freed[claimant.id, n]
            for n in reservation.nodes
        }
        if claimant.gpus >= 8:
            assert all(room[n] == nodes[n].gpus for n in reservation.nodes)
            assert 8 * len(reservation.nodes) == claimant.gpus
        else:
            (node,) = reservation.nodes
            assert room[node] >= claimant.gpus
            shared[node] += claimant.gpus
    for node, gpus in shared.items():
        given = sum(n for (_, at), n in freed.items() if at == node)
        assert gpus <= len(nodes[node].free) - taken[node] + stopping[node] + given
        assert node not in whole


def running_state(snapshot: Snapshot) -> frozenset:
    return frozenset((w.id, w.placements) for w in snapshot.workloads if w.is_running)


def acts(result: Plan) -> bool:
    return bool(result.admissions or result.preemptions or result.shrinks)


@PROPERTY
@given(churn())
def test_applying_plan_after_plan_never_loops_and_settles(snapshot: Snapshot) -> None:
    seen = set()
    for cycle in range(CYCLES):
        result = plan(snapshot, now=float(cycle))
        if not acts(result):
            return
        state = running_state(snapshot)
        assert state not in seen, f"cycle {cycle} is back where an earlier one was"
        seen.add(state)
        snapshot = apply_plan(snapshot, result, now=float(cycle))
    pytest.fail(f"still preempting or admitting after {CYCLES} cycles")


@st.composite
def reclaimable(draw: st.DrawFn) -> tuple[Snapshot, int]:
    """A queue under its nominal quota with one pending job that fits in it, while the other
    queues of its cohort (nominal 0) only borrow and fill every other node."""
    nodes = make_cluster(nodes=draw(st.integers(2, 6)))
    own_nodes = draw(st.integers(0, len(nodes) - 1))
    nominal = 8 * draw(st.integers(own_nodes + 1, len(nodes)))
    owner = make_queue("owner", h800=nominal, cohort="lab")
    borrowers = [
        make_queue(name, h800=0, cohort="lab", preemption=draw(POLICIES))
        for name in ("b1", "b2")[: draw(st.integers(1, 2))]
    ]
    room = min(nominal - 8 * own_nodes, 8 * (len(nodes) - own_nodes))
    gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16, 24, 32) if g <= room]))
    mine = [
        Workload(90 + i, owner.id, "H800", 8, 0.0, placements=(on(node),))
        for i, node in enumerate(nodes[:own_nodes])
    ]
    theirs = fill(draw, nodes[own_nodes:], borrowers, 100)
    job = Workload(1, owner.id, "H800", gpus, 5.0, priority=draw(st.integers(0, 2)))
    others = [
        Workload(2 + i, w.queue_id, "H800", w.gpus, 0.0 + i, priority=w.priority)
        for i, w in enumerate(pending(draw, borrowers, draw(st.integers(0, 3))))
    ]
    return make_snapshot(nodes, [owner, *borrowers], [*mine, *theirs, job, *others]), 1


@PROPERTY
@given(reclaimable())
def test_a_queue_under_its_nominal_quota_gets_its_job_within_two_cycles(
    case: tuple[Snapshot, int],
) -> None:
    snapshot, job = case
    first = plan(snapshot, now=0.0)
    if job in {a.workload_id for a in first.admissions}:
        return
    second = plan(apply_plan(snapshot, first, now=0.0), now=1.0)
    assert job in {a.workload_id for a in second.admissions}, {
        p.workload_id: p.reason for p in second.pending
    }.get(job)
