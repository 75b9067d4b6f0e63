"""Preemption: reclaim, priority within a queue, borrowing below a threshold; guarantees kept,
victims few and cheap and together, elastic work shrunk first, room held, no loops."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import (
    FairSharing,
    Placement,
    Plan,
    PreemptionPolicy,
    Queue,
    Snapshot,
    TopologyLevel,
    WithinClusterQueue,
    Workload,
    plan,
)
from scheduler.engine.testing import (
    apply_plan,
    make_cluster,
    make_cohort,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
    outcome,
)

NOW = 1000.0
LEAF = make_cluster(nodes=4)  # dc1-p1-l1-n1 .. n4
N1, N2, N3, N4 = LEAF
TWO_LEAVES = make_cluster(leaves=2, nodes=4)

nlp = make_queue("nlp", h800=32, cohort="research")
cv = make_queue("cv", h800=0, cohort="research")  # everything it runs is borrowed
speech = make_queue("speech", h800=0, cohort="research")
solo = make_queue("solo", h800=32)  # no cohort: only priority preempts here
nlp8 = make_queue("nlp", h800=8, cohort="research")
nlp16 = make_queue("nlp", h800=16, cohort="research")


def busy(workload_id: int, queue: Queue, *nodes, lost: float = 0.0, **extra) -> Workload:
    """A running workload on whole nodes that would lose `lost` seconds of work if stopped."""
    extra.setdefault("started_at", NOW - lost)
    return make_running(workload_id, queue, *(on(node) for node in nodes), **extra)


def decided(result: Plan) -> dict[str, object]:
    """What the plan stops and shrinks: preempted ids, and shrunk ids with the GPUs they keep."""
    return {
        "preempted": sorted(p.workload_id for p in result.preemptions),
        "shrunk": {s.workload_id: s.gpus for s in result.shrinks},
    }


def stops(*ids: int, **shrunk: int) -> dict[str, object]:
    return {"preempted": sorted(ids), "shrunk": {int(k[1:]): v for k, v in shrunk.items()}}


CV_ON_LEAF = [busy(90 + i, cv, node, lost=10.0 * (4 - i)) for i, node in enumerate(LEAF)]

CASES = [
    pytest.param(
        [nlp, cv],
        [*CV_ON_LEAF, make_workload(1, nlp, 16)],
        stops(92, 93),
        id="borrowed GPUs are reclaimed for a queue under its nominal quota",
    ),
    pytest.param(
        [make_queue("nlp", h800=8, cohort="research"), cv],
        [*CV_ON_LEAF, make_workload(1, make_queue("nlp", h800=8, cohort="research"), 16)],
        stops(),
        id="a queue that must borrow for the job does not reclaim",
    ),
    pytest.param(
        [nlp8, cv],
        [*CV_ON_LEAF, make_workload(1, nlp8, 16), make_workload(2, nlp8, 8)],
        stops(93),
        id="a job within the nominal quota reclaims behind a head gang that must borrow",
    ),
    pytest.param(
        [nlp, cv],
        [*CV_ON_LEAF, *(make_workload(i, nlp, 8) for i in (1, 2, 3))],
        stops(91, 92, 93),
        id="a queue far under its nominal quota reclaims for several jobs in one cycle",
    ),
    pytest.param(
        [nlp16, cv],
        [*CV_ON_LEAF, *(make_workload(i, nlp16, 8) for i in (1, 2, 3))],
        stops(92, 93),
        id="a queue reclaims for several jobs only up to its nominal quota",
    ),
    pytest.param(
        [nlp16, cv],
        [
            *CV_ON_LEAF,
            make_workload(1, nlp16, 8),
            make_workload(2, nlp16, 16),
            make_workload(3, nlp16, 8),
        ],
        stops(92, 93),
        id="a job that must borrow does not stop later jobs of its queue reclaiming",
    ),
    pytest.param(
        [nlp, make_queue("cv", h800=16, cohort="research")],
        [busy(90, make_queue("cv", h800=16, cohort="research"), *LEAF), make_workload(1, nlp, 16)],
        stops(90),
        id="borrowed work is reclaimed even when it also holds the lender's nominal share",
    ),
    pytest.param(
        [nlp, make_queue("cv", h800=16, cohort="research")],
        [busy(90, make_queue("cv", h800=16, cohort="research"), *LEAF), make_workload(1, nlp, 24)],
        stops(90),
        id="a reclaim takes a borrower's whole workload, more than the borrower borrows",
    ),
    pytest.param(
        [nlp, make_queue("cv", h800=16, cohort="research", guarantee=16)],
        [
            busy(90, make_queue("cv", h800=16, cohort="research", guarantee=16), *LEAF),
            make_workload(1, nlp, 16),
        ],
        stops(),
        id="work inside its queue's guarantee is never preempted",
    ),
    pytest.param(
        [nlp, make_queue("cv", h800=16, cohort="research", guarantee=16)],
        [
            *(
                busy(90 + i, make_queue("cv", h800=16, cohort="research", guarantee=16), node)
                for i, node in enumerate(LEAF)
            ),
            make_workload(1, nlp, 16),
        ],
        stops(90, 91),
        id="a queue above its guarantee loses what lies beyond it",
    ),
    pytest.param(
        [nlp, make_queue("cv", h800=16, cohort="research", guarantee=16)],
        [
            *(
                busy(90 + i, make_queue("cv", h800=16, cohort="research", guarantee=16), node)
                for i, node in enumerate(LEAF)
            ),
            make_workload(1, nlp, 24),
        ],
        stops(),
        id="a claimant that would need work inside a guarantee preempts nothing",
    ),
    pytest.param(
        [nlp, cv, make_queue("cv2", h800=0, cohort="vision")],
        [
            busy(90, make_queue("cv2", h800=0, cohort="vision"), N1, N2),
            busy(91, cv, N3, N4),
            make_workload(1, nlp, 32),
        ],
        stops(),
        id="queues of another cohort are not reclaimed from",
    ),
    pytest.param(
        [nlp, cv, speech],
        [
            busy(90, cv, N1, lost=500),
            busy(91, cv, N2, lost=500),
            busy(92, speech, N3, lost=1),
            busy(93, nlp, N4),
            make_workload(1, nlp, 8),
        ],
        stops(90),
        id="reclaim takes first from the queue with the highest fair share",
    ),
    pytest.param(
        [solo],
        [
            *(busy(90 + i, solo, node, lost=10.0 * (4 - i)) for i, node in enumerate(LEAF)),
            make_workload(1, solo, 8, priority=5),
        ],
        stops(93),
        id="a higher-priority job preempts lower-priority work of its own queue",
    ),
    pytest.param(
        [solo],
        [*(busy(90 + i, solo, node) for i, node in enumerate(LEAF)), make_workload(1, solo, 8)],
        stops(),
        id="equal priority never preempts",
    ),
    pytest.param(
        [solo],
        [
            *(busy(90 + i, solo, node) for i, node in enumerate(LEAF)),
            make_workload(1, solo, 16, priority=5, topology=TopologyLevel.NODE, required=True),
        ],
        stops(),
        id="nothing is preempted for a job that could never fit",
    ),
    pytest.param(
        [replace(solo, preemption=PreemptionPolicy(within_cluster_queue=WithinClusterQueue.NEVER))],
        [
            *(busy(90 + i, solo, node) for i, node in enumerate(LEAF)),
            make_workload(1, solo, 8, priority=5),
        ],
        stops(),
        id="a queue can switch priority preemption off",
    ),
    pytest.param(
        [make_queue("solo", h800=16)],
        [
            busy(90, solo, N1, lost=5),
            busy(91, solo, N2, lost=1),
            make_workload(1, solo, 8, priority=5),
        ],
        stops(91),
        id="a higher-priority job preempts for quota when GPUs are free but its quota is used",
    ),
    pytest.param(
        [
            make_queue(
                "nlp",
                h800=0,
                cohort="research",
                preemption=PreemptionPolicy(borrow_within_cohort=True, max_priority_threshold=4),
            ),
            make_queue("idle", h800=32, cohort="research"),
            cv,
        ],
        [
            *(busy(90 + i, cv, node, priority=1) for i, node in enumerate(LEAF)),
            make_workload(1, make_queue("nlp", h800=0, cohort="research"), 16, priority=3),
        ],
        stops(90, 91),
        id="a borrowing job evicts borrowed work below its queue's priority threshold",
    ),
    pytest.param(
        [
            make_queue(
                "nlp",
                h800=0,
                cohort="research",
                preemption=PreemptionPolicy(borrow_within_cohort=True, max_priority_threshold=4),
            ),
            make_queue("idle", h800=32, cohort="research"),
            cv,
        ],
        [
            *(busy(90 + i, cv, node, priority=4) for i, node in enumerate(LEAF)),
            make_workload(1, make_queue("nlp", h800=0, cohort="research"), 16, priority=3),
        ],
        stops(),
        id="borrowed work of higher priority than the borrowing job stays",
    ),
    pytest.param(
        [nlp, cv],
        [busy(90, cv, *LEAF, min_gpus=16), make_workload(1, nlp, 16)],
        stops(s90=16),
        id="an elastic job is shrunk instead of evicting anyone",
    ),
    pytest.param(
        [nlp, cv],
        [
            busy(90, cv, N1, N2, min_gpus=8, lost=100),
            busy(91, cv, N3, lost=50),
            busy(92, cv, N4, lost=9),
            make_workload(1, nlp, 16),
        ],
        stops(92, s90=8),
        id="an elastic job shrinks to its minimum, then the cheapest other victim goes",
    ),
    pytest.param(
        [nlp, cv],
        [
            busy(90, nlp, N1, N2),
            busy(91, cv, N3),
            make_running(92, cv, on(N4, 0, 1, 2, 3), started_at=NOW),
            make_running(93, cv, on(N4, 4, 5, 6, 7), started_at=NOW, min_gpus=2),
            make_workload(1, nlp, 16),
        ],
        stops(91, 92, 93),
        id="an elastic job whose shrink does not free its node is evicted instead",
    ),
]


@pytest.mark.parametrize(("queues", "workloads", "expected"), CASES)
def test_preemption(queues: list[Queue], workloads: list[Workload], expected: dict) -> None:
    assert decided(plan(make_snapshot(LEAF, queues, workloads), now=NOW)) == expected


TWO_NODES = make_cluster(nodes=2)
M1, M2 = TWO_NODES
CHOICE_CASES = [
    pytest.param(
        [busy(90, solo, M1, priority=0, lost=900), busy(91, solo, M2, priority=1, lost=1)],
        90,
        id="victims: the lowest priority first",
    ),
    pytest.param(
        [
            busy(90, solo, M1, started_at=10.0, last_checkpoint_at=995.0),
            busy(91, solo, M2, started_at=940.0),
        ],
        90,
        id="victims: then the least work lost since the last checkpoint",
    ),
    pytest.param(
        [
            busy(90, solo, M1, started_at=10.0, last_checkpoint_at=990.0),
            busy(91, solo, M2, started_at=40.0, last_checkpoint_at=990.0),
        ],
        91,
        id="victims: then the most recently started",
    ),
    pytest.param(
        [busy(91, solo, M2, lost=5), busy(90, solo, M1, lost=5)],
        90,
        id="victims: then the lowest id",
    ),
]


@pytest.mark.parametrize(("running", "victim"), CHOICE_CASES)
def test_the_least_valuable_victim_goes(running: list[Workload], victim: int) -> None:
    snapshot = make_snapshot(TWO_NODES, [solo], [*running, make_workload(1, solo, 8, priority=9)])
    assert decided(plan(snapshot, now=NOW)) == stops(victim)


def test_a_victim_that_does_not_complete_a_node_is_dropped_again() -> None:
    # 90 is the cheapest, but freeing its half of n1 makes no whole node while 91 stays.
    workloads = [
        make_running(90, solo, on(N1, 0, 1, 2, 3), started_at=NOW - 1),
        make_running(91, solo, on(N1, 4, 5, 6, 7), started_at=NOW - 999),
        busy(92, solo, N2, lost=10),
        busy(93, solo, N3, lost=20),
        busy(94, solo, N4, priority=9),
        make_workload(1, solo, 16, priority=5),
    ]
    assert decided(plan(make_snapshot(LEAF, [solo], workloads), now=NOW)) == stops(92, 93)


def test_victims_sit_together_in_one_leaf_rather_than_cheapest_and_scattered() -> None:
    lost = {"l1": [10, 20, 900, 900], "l2": [5, 100, 900, 900]}
    running = [
        busy(90 + i, cv, node, lost=lost[node.leaf][(node.id - 1) % 4])
        for i, node in enumerate(TWO_LEAVES)
    ]
    claimant = make_workload(
        1,
        make_queue("nlp", h800=64, cohort="research"),
        16,
        topology=TopologyLevel.LEAF,
        required=True,
    )
    queues = [make_queue("nlp", h800=64, cohort="research"), cv]
    result = plan(make_snapshot(TWO_LEAVES, queues, [*running, claimant]), now=NOW)
    assert decided(result) == stops(90, 91)  # dc1-p1-l1-n1 and n2, not l2-n1 (the cheapest)
    assert [r.nodes for r in result.reservations] == [(1, 2)]


def test_the_claimant_waits_with_its_cause_and_each_victim_hears_why() -> None:
    snapshot = make_snapshot(LEAF, [nlp, cv], [*CV_ON_LEAF, make_workload(1, nlp, 16)])
    result = plan(snapshot, now=NOW)
    assert outcome(result, snapshot) == {
        1: "preempting 2 workloads (queue cv: 2) to make room in leaf dc1/p1/l1 (queue nlp is "
        "under its H800 nominal quota (0/32 in use, job needs 16)); it starts once they have "
        "stopped"
    }
    assert {p.workload_id: p.reason for p in result.preemptions}[93] == (
        "reclaimed for workload 1: queue nlp is under its H800 nominal quota (0/32 in use, job "
        "needs 16), and queue cv borrows 32 H800 GPUs beyond its nominal 0"
    )
    assert {p.for_workload_id for p in result.preemptions} == {1}


def test_a_shrink_gives_back_whole_nodes_and_says_why() -> None:
    snapshot = make_snapshot(
        LEAF, [nlp, cv], [busy(90, cv, *LEAF, min_gpus=16), make_workload(1, nlp, 16)]
    )
    (shrink,) = plan(snapshot, now=NOW).shrinks
    assert shrink.released == (on(N3), on(N4))
    assert shrink.reason == (
        "shrunk from 32 to 16 GPUs (its minimum is 16) to make room for workload 1: queue nlp is "
        "under its H800 nominal quota (0/32 in use, job needs 16)"
    )


def test_a_one_node_job_holding_its_whole_node_shrinks_by_gpus_not_evicted() -> None:
    """An 8-GPU job with a minimum of 4 gives 4 GPUs of its node to a 4-GPU claimant."""
    snapshot = make_snapshot(
        [N1], [nlp, cv], [busy(90, cv, N1, min_gpus=4), make_workload(1, nlp, 4)]
    )
    result = plan(snapshot, now=NOW)
    assert decided(result) == {"preempted": [], "shrunk": {90: 4}}
    (shrink,) = result.shrinks
    assert [(p.node_id, len(p.gpu_indices)) for p in shrink.released] == [(N1.id, 4)]


def test_a_throughput_curve_is_interpolated_and_linear_without_one() -> None:
    linear = busy(90, cv, N1, N2, min_gpus=8)
    assert (linear.rate(12), linear.gpus_lost(16, 8)) == (12.0, 8.0)
    curved = replace(linear, throughput=((8, 100.0), (16, 120.0)))
    assert curved.rate(12) == 110.0 and curved.rate(4) == 50.0  # below: linear from 8
    assert curved.gpus_lost(16, 8) == pytest.approx(20 / (120 / 16))


def test_the_job_whose_last_gpus_add_least_throughput_is_shrunk() -> None:
    """Two borrowers of 16 GPUs with a minimum of 8: without curves the first in value order
    gives back a node; when the other's planner says its second node adds only 20 %, it does."""
    first, second = busy(90, cv, N1, N2, min_gpus=8), busy(91, cv, N3, N4, min_gpus=8)
    claimant = make_workload(1, nlp, 8)
    linear = plan(make_snapshot(LEAF, [nlp, cv], [first, second, claimant]), now=NOW)
    assert decided(linear) == {"preempted": [], "shrunk": {90: 8}}
    flat = replace(second, throughput=((8, 100.0), (16, 120.0)))
    result = plan(make_snapshot(LEAF, [nlp, cv], [first, flat, claimant]), now=NOW)
    assert decided(result) == {"preempted": [], "shrunk": {91: 8}}
    assert "(its minimum is 8, keeping 83% of its throughput)" in result.shrinks[0].reason


def test_work_already_stopping_is_waited_for_not_preempted_again() -> None:
    stopping = [replace(w, preempting=True) if w.id in (92, 93) else w for w in CV_ON_LEAF]
    snapshot = make_snapshot(LEAF, [nlp, cv], [*stopping, make_workload(1, nlp, 16)])
    result = plan(snapshot, now=NOW)
    assert decided(result) == stops()
    assert outcome(result, snapshot)[1] == (
        "waiting for 2 preempted workloads to stop to make room in leaf dc1/p1/l1; it starts "
        "once they have stopped"
    )


def test_room_held_for_a_claimant_is_not_given_to_later_work() -> None:
    ops = make_queue("ops", h800=8)
    running = [busy(91, cv, N2), busy(92, cv, N3), busy(93, cv, N4)]
    snapshot = make_snapshot(
        LEAF, [nlp, cv, ops], [*running, make_workload(1, nlp, 16), make_workload(2, ops, 8)]
    )
    result = plan(snapshot, now=NOW)
    assert decided(result) == stops(91)
    assert [(r.workload_id, r.nodes) for r in result.reservations] == [(1, (1, 2))]
    assert outcome(result, snapshot)[2] == (
        "needs 1 whole H800 node in one data center; the best data center has 0 free"
    )


@pytest.mark.parametrize(
    ("second", "its_node"),
    [(4, 1), (8, 2)],
    ids=["a smaller job beside the first", "a one-node gang on the other node"],
)
def test_later_claimants_wait_for_the_rest_of_a_victim_rather_than_evict_another(
    second: int, its_node: int
) -> None:
    # 91 spans two nodes and is the cheapest victim; the first claimant's room is half of one.
    running = [busy(91, cv, N1, N2), busy(92, cv, N3, lost=100.0), busy(93, cv, N4, lost=200.0)]
    snapshot = make_snapshot(
        LEAF, [nlp, cv], [*running, make_workload(1, nlp, 4), make_workload(2, nlp, second)]
    )
    first, then = cycles(snapshot, 2)
    assert decided(first) == stops(91)
    assert sorted((r.workload_id, r.nodes) for r in first.reservations) == [
        (1, (1,)),
        (2, (its_node,)),
    ]
    assert outcome(first, snapshot)[2].startswith("waiting for 1 preempted workload to stop")
    assert sorted(a.workload_id for a in then.admissions) == [1, 2]
    assert decided(then) == stops()


def test_smaller_jobs_share_the_node_one_victim_frees_rather_than_evict_one_each() -> None:
    # 91 is the cheapest victim and frees one node: room for both 4-GPU jobs. A claimant used
    # to hold the whole node, and the second evicted 92 beside GPUs about to be free.
    running = [busy(91, cv, N1), busy(92, cv, N2, lost=100.0), busy(93, cv, N3, N4, lost=200.0)]
    snapshot = make_snapshot(
        LEAF, [nlp, cv], [*running, make_workload(1, nlp, 4), make_workload(2, nlp, 4)]
    )
    first, then = cycles(snapshot, 2)
    assert decided(first) == stops(91)
    assert sorted((r.workload_id, r.nodes) for r in first.reservations) == [(1, (1,)), (2, (1,))]
    assert sorted(a.workload_id for a in then.admissions) == [1, 2]
    assert {p.node_id for a in then.admissions for p in a.placements} == {1}
    assert decided(then) == stops()


def test_a_small_claimant_counts_what_a_node_offers_after_the_cycles_admissions() -> None:
    # Node 1: 4 GPUs free and 4 of stopping work (8 free soon); node 2: 6 of stopping work.
    # Job 1 waits for node 2's; job 2 starts on node 1's free GPUs, which leaves node 1 with
    # 4 soon: just what job 3 needs, so job 3 waits there.
    big = make_queue("big", h800=64)
    running = [
        make_running(91, big, on(N1, 0, 1, 2, 3), preempting=True),
        make_running(92, big, on(N2, 0, 1, 2, 3, 4, 5), preempting=True),
        make_running(93, big, on(N2, 6, 7), on(N3), on(N4)),
    ]
    waiting = [make_workload(1, big, 6), make_workload(2, big, 4), make_workload(3, big, 4)]
    result = plan(make_snapshot(LEAF, [big], [*running, *waiting]), now=NOW)
    assert [(a.workload_id, a.placements) for a in result.admissions] == [
        (2, (on(N1, 4, 5, 6, 7),))
    ]
    assert [(r.workload_id, r.nodes) for r in result.reservations] == [
        (1, (N2.id,)),
        (3, (N1.id,)),
    ]
    assert decided(result) == stops()


def test_a_gangs_reservation_leaves_out_a_node_promised_in_part_to_a_smaller_job() -> None:
    # The 1-GPU job evicts 91 and waits for one GPU of node 1; the gang (its priority, so it
    # evicts nobody) reserves two nodes for later, and node 1 cannot be one of them.
    big = make_queue("big", h800=64)  # quota to spare: room decides
    running = [busy(91, big, N1, N2), busy(92, big, N3, N4)]
    waiting = [make_workload(1, big, 1, priority=1), make_workload(2, big, 16)]
    result = plan(make_snapshot(LEAF, [big], [*running, *waiting]), now=NOW)
    assert decided(result) == stops(91)
    reserved = {r.workload_id: r.nodes for r in result.reservations}
    assert reserved[1] == (1,) and 1 not in reserved[2]


def cycles(snapshot: Snapshot, count: int) -> list[Plan]:
    """Plan and apply `count` cycles, a second apart."""
    plans = []
    for second in range(count):
        plans.append(plan(snapshot, now=NOW + second))
        snapshot = apply_plan(snapshot, plans[-1], now=NOW + second)
    return plans


def test_a_borrower_spares_work_whose_queue_would_start_it_again_first() -> None:
    # Both queues would borrow 8 GPUs with their job, so their shares tie, and the next cycle
    # then goes by queue priority: q3's. Evicting 102 would start it again, cycle after cycle.
    q2 = make_queue(
        "q2",
        h800=16,
        cohort="lab",
        preemption=PreemptionPolicy(borrow_within_cohort=True, fair_sharing=FairSharing.OFF),
    )
    q3 = make_queue("q3", h800=8, cohort="lab", priority=1)
    running = [busy(103, q2, N1, priority=1), busy(102, q3, N2, N3)]
    snapshot = make_snapshot(LEAF, [q2, q3], [*running, make_workload(1, q2, 16, priority=1)])
    assert [decided(p) for p in cycles(snapshot, 3)] == [stops()] * 3


def test_a_reclaimed_workload_does_not_reclaim_back_and_the_claimant_starts_next_cycle() -> None:
    snapshot = make_snapshot(LEAF, [nlp, cv], [*CV_ON_LEAF, make_workload(1, nlp, 16)])
    first, second, third = cycles(snapshot, 3)
    assert decided(first) == stops(92, 93)
    assert [a.workload_id for a in second.admissions] == [1]
    assert decided(second) == decided(third) == stops()
    assert third.admissions == []


def test_room_reclaimed_behind_a_head_that_must_borrow_is_not_taken_back_by_a_borrower() -> None:
    # cv borrows all of nlp's quota with a gang submitted first. nlp's head gang must borrow,
    # so it waits; nlp's 8-GPU job, behind it, reclaims. Next cycle nlp is taken by that job
    # (within its nominal quota) before the evicted gang, which would borrow the freed node.
    cv8 = make_queue("cv", h800=8, cohort="research")
    gang = busy(90, cv8, M1, M2, submitted_at=0.0)
    snapshot = make_snapshot(
        TWO_NODES, [nlp8, cv8], [gang, make_workload(1, nlp8, 16), make_workload(2, nlp8, 8)]
    )
    plans = cycles(snapshot, 4)
    assert [sorted(p.workload_id for p in x.preemptions) for x in plans] == [[90], [], [], []]
    assert [[a.workload_id for a in x.admissions] for x in plans] == [[], [2], [], []]


def test_a_lower_priority_victim_never_preempts_its_claimant_back() -> None:
    running = [busy(90 + i, solo, node, lost=i) for i, node in enumerate(LEAF)]
    snapshot = make_snapshot(LEAF, [solo], [*running, make_workload(1, solo, 8, priority=5)])
    plans = cycles(snapshot, 4)
    assert [sorted(p.workload_id for p in x.preemptions) for x in plans] == [[90], [], [], []]
    assert [[a.workload_id for a in x.admissions] for x in plans] == [[], [1], [], []]


def test_a_borrowed_victim_that_would_come_back_first_is_not_preempted() -> None:
    # Cohort team (8 GPUs of its own) sits under lab; lab holds q1's idle 8 GPUs. q3 (no quota
    # of its own) borrows all of team's 8 and the 1-GPU job of a 2nd borrows one more. q2's
    # 16-GPU job (priority 1) may borrow over work below priority 2, but once the 1-GPU job is
    # gone, it finds quota only at lab, while the 1-GPU job, requeued, finds it in team and so
    # is admitted first next cycle (Kueue's borrowing level): preempting it would repeat every
    # two cycles. It keeps running, and q2's job waits.
    cohorts = [make_cohort("lab"), make_cohort("team", "lab", h800=8)]
    q1 = make_queue("q1", cohort="lab", h800=16)
    borrowing = PreemptionPolicy(borrow_within_cohort=True, max_priority_threshold=2)
    q2 = make_queue("q2", cohort="team", preemption=borrowing, h800=8)
    q3 = make_queue("q3", cohort="team", h800=0)
    six = make_cluster(nodes=6)
    running = [
        make_running(100, q1, on(six[0], 0, 1, 2, 3), started_at=0.0),
        make_running(101, q1, on(six[0], 4, 5, 6, 7), started_at=0.0),
        make_running(102, q3, on(six[4]), started_at=0.0),
    ]
    pending = [make_workload(1, q3, 1), make_workload(2, q2, 16, priority=1)]
    snapshot = make_snapshot(six, [q1, q2, q3], [*running, *pending], cohorts)
    plans = cycles(snapshot, 4)
    assert [[a.workload_id for a in x.admissions] for x in plans] == [[1], [], [], []]
    assert [x.preemptions for x in plans] == [[], [], [], []]
    assert "would exceed its H800 quota" in outcome(plans[-1], snapshot)[2]


def test_a_victim_listed_twice_on_a_node_frees_all_it_holds_there() -> None:
    """A running workload whose placements name one node twice (here once without GPUs) holds
    what they list together: evicting it frees that node whole, so a gang of two nodes gets a
    room of two nodes, not of one."""
    nodes = make_cluster(nodes=2)
    queue = make_queue("a", h800=64)
    first = nodes[0]
    victim = make_workload(
        1, queue, 8, placements=(on(first), Placement(first.id, ())), started_at=0.0
    )
    gang = make_workload(2, queue, 16, priority=5)

    result = plan(make_snapshot(nodes, [queue], [victim, gang]), 100.0)

    assert [p.workload_id for p in result.preemptions] == [1]
    [reservation] = result.reservations
    assert reservation.nodes == (nodes[0].id, nodes[1].id)
