"""Backfill: a gang that cannot start reserves the domain it will use; only work that ends in
time, or that the gang could preempt, may use the reserved nodes meanwhile."""

from __future__ import annotations

import random
from contextlib import ExitStack
from dataclasses import replace

import pytest

from scheduler.engine import Placement, Plan, Reservation, TopologyLevel, Workload, plan
from scheduler.engine.backfill import MAX_PER_POOL
from scheduler.engine.capacity import pools_of
from scheduler.engine.errors import Inadmissible
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
    outcome,
)

NOW = 10_000.0
HOUR = 3600.0
NODES = make_cluster(leaves=2, nodes=4)  # dc1-p1-l1-n1..4 (ids 1-4), dc1-p1-l2-n1..4 (5-8)
L1, L2 = NODES[:4], NODES[4:]

train = make_queue("train", h800=1000, priority=5)  # its gangs head the cycle
ops = make_queue("ops", h800=1000)


def busy(workload_id: int, *nodes, ends_in: float | None = None, queue=ops) -> Workload:
    """Work holding whole nodes, stopped by its time limit `ends_in` seconds from now."""
    return make_running(
        workload_id, queue, *(on(node) for node in nodes), started_at=NOW, time_limit_s=ends_in
    )


def gang(workload_id: int = 1, nodes: int = 4) -> Workload:
    """A gang of `train` that needs `nodes` whole nodes in one leaf."""
    return make_workload(workload_id, train, 8 * nodes, topology=TopologyLevel.LEAF, required=True)


def reservations(result: Plan) -> list[tuple[int, tuple[str, ...], tuple[int, ...], float | None]]:
    return [(r.workload_id, r.domain, r.nodes, r.start_at) for r in result.reservations]


def test_a_gang_reserves_the_leaf_whose_nodes_free_up_soonest() -> None:
    running = [busy(90, *L1, ends_in=2 * HOUR), busy(91, *L2, ends_in=HOUR)]
    snapshot = make_snapshot(NODES, [train, ops], [*running, gang()])
    result = plan(snapshot, now=NOW)
    assert reservations(result) == [(1, ("dc1", "p1", "l2"), (5, 6, 7, 8), NOW + HOUR)]
    assert outcome(result, snapshot)[1] == (
        "needs 4 whole H800 nodes in one leaf; the best leaf has 0 free; reserved leaf "
        "dc1/p1/l2 for it: 0 of the 4 nodes it needs free now, the rest expected free in 60 min"
    )


def test_with_no_time_limits_known_the_leaf_closest_to_fitting_is_reserved() -> None:
    running = [busy(90, *L1), busy(91, *L2[:2])]
    snapshot = make_snapshot(NODES, [train, ops], [*running, gang()])
    result = plan(snapshot, now=NOW)
    assert reservations(result) == [(1, ("dc1", "p1", "l2"), (5, 6, 7, 8), None)]
    assert outcome(result, snapshot)[1].endswith(
        "reserved leaf dc1/p1/l2 for it: 2 of the 4 nodes it needs free now, the rest busy "
        "with work that has no time limit"
    )


KEPT_OFF = (
    "needs 1 whole H800 node in one data center; the best data center has 0 free; 2 nodes with "
    "free GPUs are reserved for waiting gang (workload 1), usable only by work that ends before "
    "they start or that they could preempt"
)

BACKFILL_CASES = [
    pytest.param(
        make_workload(2, ops, 8, time_limit_s=HOUR / 2),
        "dc1-p1-l2-n3",
        id="work that ends before the reservation starts may use the reserved nodes",
    ),
    pytest.param(
        make_workload(2, ops, 8, time_limit_s=2 * HOUR),
        KEPT_OFF,
        id="work that would still run when the gang starts is kept off the reserved nodes",
    ),
    pytest.param(
        make_workload(2, ops, 8),
        KEPT_OFF,
        id="work without a time limit is kept off the reserved nodes",
    ),
    pytest.param(
        make_workload(2, train, 8, priority=-1),
        "dc1-p1-l2-n3",
        id="lower-priority work of the gang's own queue may use them: the gang can preempt it",
    ),
    pytest.param(
        make_workload(2, train, 8),
        KEPT_OFF,
        id="work of the gang's queue at its priority is kept off them",
    ),
]


@pytest.mark.parametrize(("candidate", "expected"), BACKFILL_CASES)
def test_backfill(candidate: Workload, expected: str) -> None:
    # l1 is busy for good; l2 has 2 free nodes and 2 busy for another hour: the gang reserves
    # l2, holding its free nodes.
    running = [busy(90, *L1), busy(91, *L2[:2], ends_in=HOUR)]
    snapshot = make_snapshot(NODES, [train, ops], [*running, gang(), candidate])
    result = plan(snapshot, now=NOW)
    assert reservations(result) == [(1, ("dc1", "p1", "l2"), (5, 6, 7, 8), NOW + HOUR)]
    assert outcome(result, snapshot)[2] == expected


def test_borrowed_work_the_gang_could_reclaim_may_use_the_reserved_nodes() -> None:
    train_c = make_queue("train", h800=64, priority=5, cohort="lab")
    ops_c = make_queue("infer", h800=0, cohort="lab")  # all it runs is borrowed from train
    running = [busy(90, *L1), busy(91, *L2[:2], ends_in=HOUR, queue=train_c)]
    pending = [
        make_workload(1, train_c, 32, topology=TopologyLevel.LEAF, required=True),
        make_workload(2, ops_c, 8),
    ]
    snapshot = make_snapshot(NODES, [train_c, ops_c, ops], [*running, *pending])
    assert outcome(plan(snapshot, now=NOW), snapshot)[2] == "dc1-p1-l2-n3"


def test_one_reservation_per_queue_and_the_first_gang_gets_it() -> None:
    running = [busy(90, *L1), busy(91, *L2[:2], ends_in=HOUR)]
    snapshot = make_snapshot(NODES, [train, ops], [*running, gang(1), gang(2, nodes=3)])
    result = plan(snapshot, now=NOW)
    assert [r.workload_id for r in result.reservations] == [1]
    assert "reserved leaf" not in outcome(result, snapshot)[2]


def test_reservations_per_pool_are_capped_and_do_not_share_nodes() -> None:
    big = make_cluster(leaves=MAX_PER_POOL + 2, nodes=4)
    queues = [make_queue(f"q{i}", h800=1000, priority=10 - i) for i in range(MAX_PER_POOL + 1)]
    holder = make_running(90, ops, *(on(node) for node in big if node.name.endswith("n4")))
    gangs = [
        make_workload(i + 1, queue, 32, topology=TopologyLevel.LEAF, required=True)
        for i, queue in enumerate(queues)
    ]
    result = plan(make_snapshot(big, [*queues, ops], [holder, *gangs]), now=NOW)
    assert [r.workload_id for r in result.reservations] == list(range(1, MAX_PER_POOL + 1))
    reserved = [node for r in result.reservations for node in r.nodes]
    assert len(reserved) == len(set(reserved))


def test_a_gang_that_could_never_fit_reserves_nothing() -> None:
    one_node = make_workload(1, train, 16, topology=TopologyLevel.NODE, required=True)
    result = plan(make_snapshot(NODES, [train], [one_node]), now=NOW)
    assert result.reservations == []


def test_a_reservation_is_a_plan_output_with_the_reason() -> None:
    running = [busy(90, *L1), busy(91, *L2[:2], ends_in=HOUR)]
    (reservation,) = plan(
        make_snapshot(NODES, [train, ops], [*running, gang()]), now=NOW
    ).reservations
    assert reservation == Reservation(
        1,
        TopologyLevel.LEAF,
        ("dc1", "p1", "l2"),
        (5, 6, 7, 8),
        NOW + HOUR,
        "reserved leaf dc1/p1/l2 for it: 2 of the 4 nodes it needs free now, the rest expected "
        "free in 60 min",
    )


def test_a_gang_is_not_starved_by_small_work_over_cycles() -> None:
    # Every cycle new one-node work arrives; l2 frees up after an hour; the gang still starts.
    running = [busy(90, *L1), busy(91, *L2[:2], ends_in=HOUR)]
    workloads = [*running, gang()]
    snapshot = make_snapshot(NODES, [train, ops], workloads)
    assert plan(snapshot, now=NOW).admissions == []
    later = replace(snapshot, workloads=(busy(90, *L1), make_workload(3, ops, 8), gang()))
    later = make_snapshot(NODES, [train, ops], later.workloads)
    result = plan(later, now=NOW + HOUR)
    assert [a.workload_id for a in result.admissions] == [1]
    assert outcome(result, later)[3] == (
        "needs 1 whole H800 node in one data center; the best data center has 0 free"
    )


@pytest.mark.parametrize("seed", range(60))
def test_a_small_job_fits_with_held_gpus_lent_where_lending_them_finds_it_room(seed: int) -> None:
    """`Pool.fits_lent` (a small job kept off reserved nodes) says what lending the held GPUs
    and placing the job there says, changing nothing: on shared and single-tenant nodes."""
    rng = random.Random(seed)
    nodes = [
        replace(node, single_tenant=rng.random() < 0.3, tenant=rng.choice([None, 1, 2]))
        for node in make_cluster(leaves=2, nodes=4)
    ]
    [pool] = pools_of(nodes).values()
    for node in nodes:  # work of either tenant on most GPUs, reservations on some nodes
        taken = rng.sample(range(8), rng.choice([8, 8, 7, 6, 4]))
        pool.take(Placement(node.id, tuple(taken)), rng.choice([1, 2]))
    for owner in (101, 102):
        pool.hold(owner, rng.sample([n.id for n in nodes], 2))
    for node in nodes:
        free = sorted(pool.free(node.id))
        if free:  # nothing fits now but on the held GPUs: the rest is taken
            pool.take(Placement(node.id, tuple(free)), rng.choice([1, 2]))
    job = make_workload(1, ops, rng.choice([1, 2, 4, 7]), tenant=rng.choice([1, 2]))
    owners = rng.choice([[101], [102], [101, 102]])
    before = {node.id: set(pool.free(node.id)) for node in nodes}
    with ExitStack() as stack:
        for owner in owners:
            stack.enter_context(pool.lent(owner))
        try:
            lent = bool(pool.find(job))
        except Inadmissible:
            lent = False
    assert pool.fits_lent(job.gpus, job.tenant, owners) == lent
    assert {node.id: set(pool.free(node.id)) for node in nodes} == before
