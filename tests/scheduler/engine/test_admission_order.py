"""Which pending workload goes first, and what each waiting one is told."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import Pending, Workload, plan
from scheduler.engine.ordering import Heads, queue_order
from scheduler.engine.quota import QuotaLedger
from scheduler.engine.testing import make_cluster, make_queue, make_snapshot, make_workload, outcome

nlp = make_queue("nlp", h800=1000)
cv = make_queue("cv", h800=1000)
prod = make_queue("prod", h800=1000, priority=10)
ONE_NODE = make_cluster(nodes=1)
FULL = "needs 1 whole H800 node in one data center; the best data center has 0 free"


def job(workload_id: int, **kwargs: object) -> Workload:
    return make_workload(workload_id, nlp, 8, **kwargs)


ORDER_CASES = [
    pytest.param(
        [job(1, priority=0), job(2, priority=5)],
        2,
        id="higher priority goes first even when submitted later",
    ),
    pytest.param(
        [job(1, priority=300), make_workload(2, prod, 8)],
        2,
        id="a higher-priority queue goes before a critical job of a lower one",
    ),
    pytest.param(
        [job(1, submitted_at=20.0), job(2, submitted_at=10.0)],
        2,
        id="equal priority: the earlier submission goes first",
    ),
    pytest.param(
        [job(2, submitted_at=10.0), job(1, submitted_at=10.0)],
        1,
        id="equal priority and submit time: the lower id goes first",
    ),
]


@pytest.mark.parametrize(("workloads", "first"), ORDER_CASES)
def test_the_first_in_order_gets_the_only_node(workloads: list[Workload], first: int) -> None:
    snapshot = make_snapshot(ONE_NODE, [nlp, prod], workloads)
    assert outcome(plan(snapshot, now=0.0), snapshot)[first] == "dc1-p1-l1-n1"


def test_queue_order_sorts_by_priority_then_submit_time_then_id() -> None:
    workloads = [
        job(3, submitted_at=1.0),
        job(2, submitted_at=1.0),
        job(9, priority=1, submitted_at=5.0),
        job(4, submitted_at=0.5),
    ]
    assert [w.id for w in sorted(workloads, key=queue_order)] == [9, 4, 2, 3]


def test_positions_count_each_queues_waiting_workloads_separately() -> None:
    workloads = [job(1), job(2), make_workload(3, cv, 8), job(4), make_workload(5, cv, 8)]
    result = plan(make_snapshot(ONE_NODE, [nlp, cv], workloads), now=0.0)
    assert result.pending == [
        Pending(2, FULL, 1),
        Pending(3, FULL, 1),
        Pending(4, FULL, 2),
        Pending(5, FULL, 2),
    ]


def test_a_head_that_does_not_fit_does_not_block_smaller_jobs_behind_it() -> None:
    snapshot = make_snapshot(ONE_NODE, [nlp], [make_workload(1, nlp, 16), job(2)])
    assert outcome(plan(snapshot, now=0.0), snapshot) == {
        1: "needs 2 whole H800 nodes in one data center; the best data center has 1 free",
        2: "dc1-p1-l1-n1",
    }


def test_a_workload_of_an_unknown_queue_waits_with_a_reason() -> None:
    orphan = make_workload(1, make_queue("gone", h800=8), 8)
    result = plan(make_snapshot(ONE_NODE, [nlp], [orphan]), now=0.0)
    assert result.pending == [Pending(1, f"queue {orphan.queue_id} is not in the snapshot", 1)]
    assert result.admissions == []


def test_the_plan_does_not_depend_on_now() -> None:
    snapshot = make_snapshot(ONE_NODE, [nlp], [job(1), job(2)])
    assert plan(snapshot, now=0.0) == plan(snapshot, now=1e9)


def test_a_queue_runs_only_in_its_own_region() -> None:
    east = replace(make_queue("east", h800=64), region="cn-east")
    west_nodes = [replace(node, region="cn-west") for node in make_cluster(nodes=2)]
    snapshot = make_snapshot(west_nodes, [east], [make_workload(1, east, 8)])
    result = plan(snapshot, now=0.0)
    assert result.admissions == []
    assert result.pending == [Pending(1, "region cn-east has no H800 nodes", 1)]


def test_a_queue_whose_first_must_borrow_hands_out_each_workload_within_its_quota_in_turn() -> None:
    lender = make_queue("lender", cohort="c", h800=64)
    queue = make_queue("q", cohort="c", h800=16)
    sizes = {1: 24, 2: 24, 3: 8, 4: 24, 5: 8, 6: 8}
    ledger = QuotaLedger([lender, queue])
    heads = Heads(
        ledger, [make_workload(i, queue, n, submitted_at=float(i)) for i, n in sizes.items()]
    )
    handed_out = []
    while (head := heads.next()) is not None:
        _, workload, fits = head
        handed_out.append((workload.id, fits))
        if fits:  # admitted: the queue uses its nominal quota up
            ledger.charge(queue.id, "H800", workload.gpus)
    assert handed_out == [(3, True), (5, True), (1, False), (2, False), (4, False), (6, False)]
