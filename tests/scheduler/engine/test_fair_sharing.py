"""Fair sharing: who borrows first (weighted DRS), nested cohorts, strict and best-effort FIFO."""

from __future__ import annotations

import pytest

from scheduler.engine import Cohort, Queue, Strategy, Workload, plan
from scheduler.engine.quota import QuotaLedger
from scheduler.engine.testing import (
    make_cluster,
    make_cohort,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
    outcome,
)

NODES = make_cluster(leaves=2, nodes=8)  # 128 GPUs: quota, not room, decides here


def running(workload_id: int, queue: Queue, first: int, count: int) -> Workload:
    """`queue` holding `count` whole nodes of NODES from the last one back, after `first`."""
    return make_running(workload_id, queue, *(on(NODES[-n]) for n in range(first, first + count)))


lender = make_queue("lender", h800=24, cohort="research")
cv = make_queue("cv", h800=0, cohort="research")
speech = make_queue("speech", h800=0, cohort="research")

SHARE_CASES = [
    pytest.param(
        [lender, cv, speech],
        [running(90, cv, 1, 2), make_workload(1, cv, 8), make_workload(2, speech, 8)],
        {
            2: "dc1-p1-l2-n1",
            1: "queue cv would exceed its H800 quota (16/0 in use, job needs 8; "
            "cohort research has 0 idle to lend)",
        },
        id="borrowing goes first to the queue that borrows least",
    ),
    pytest.param(
        [lender, make_queue("cv", h800=0, cohort="research", weight=3.0), speech],
        [
            running(90, cv, 1, 1),
            make_workload(1, cv, 8),
            make_workload(2, speech, 8),
            make_workload(3, speech, 8),
        ],
        {
            1: "dc1-p1-l2-n1",
            2: "dc1-p1-l2-n2",
            3: "queue speech would exceed its H800 quota (8/0 in use, job needs 8; "
            "cohort research has 0 idle to lend)",
        },
        id="a larger weight lets a queue borrow more before others",
    ),
    pytest.param(
        [lender, make_queue("cv", h800=0, cohort="research", priority=10), speech],
        [running(90, cv, 1, 2), make_workload(1, cv, 8), make_workload(2, speech, 8)],
        {
            2: "dc1-p1-l2-n1",
            1: "queue cv would exceed its H800 quota (16/0 in use, job needs 8; "
            "cohort research has 0 idle to lend)",
        },
        id="queue priority does not buy a larger share of borrowed quota",
    ),
    pytest.param(
        [make_queue("lender", h800=8, cohort="research"), cv],
        [
            make_workload(1, cv, 8),
            make_workload(2, make_queue("lender", h800=8, cohort="research"), 8),
        ],
        {
            2: "dc1-p1-l1-n1",
            1: "queue cv would exceed its H800 quota (0/0 in use, job needs 8; "
            "cohort research has 0 idle to lend)",
        },
        id="work within its nominal quota goes before any borrowing, whatever the submit time",
    ),
    pytest.param(
        [make_queue("a", h800=8, priority=5), make_queue("b", h800=8)],
        [
            make_workload(1, make_queue("b", h800=8), 8),
            make_workload(2, make_queue("a", h800=8, priority=5), 8),
        ],
        {2: "dc1-p1-l1-n1", 1: "dc1-p1-l1-n2"},
        id="within nominal quota, queue priority decides",
    ),
]


@pytest.mark.parametrize(("queues", "workloads", "expected"), SHARE_CASES)
def test_fair_sharing(queues: list[Queue], workloads: list[Workload], expected: dict) -> None:
    snapshot = make_snapshot(NODES, queues, workloads)
    assert outcome(plan(snapshot, now=0.0), snapshot) == expected


def test_the_share_is_borrowed_over_lendable_over_weight() -> None:
    heavy = make_queue("cv", h800=0, cohort="research", weight=2.0)
    ledger = QuotaLedger([lender, heavy, speech])
    ledger.charge(heavy.id, "H800", 12)
    assert ledger.share(heavy) == pytest.approx(12 / 24 / 2)
    assert ledger.share(speech) == 0.0
    assert ledger.share(speech, "H800", 6) == pytest.approx(6 / 24)


# A tree: org > research (nlp) and product (ads).
nlp = make_queue("nlp", h800=8, cohort="research")
ads = make_queue("ads", h800=16, cohort="product")
ORG = [make_cohort("org"), make_cohort("research", "org"), make_cohort("product", "org")]

TREE_CASES = [
    pytest.param(
        ORG,
        [nlp, ads],
        [make_workload(1, nlp, 24)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2 dc1-p1-l1-n3"},
        id="a queue borrows a cousin's idle quota through the parent cohort",
    ),
    pytest.param(
        [
            make_cohort("org"),
            make_cohort("research", "org", h800_borrowing_limit=4),
            make_cohort("product", "org"),
        ],
        [nlp, ads],
        [make_workload(1, nlp, 16)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 16; "
            "cohort research has 4 idle to lend)"
        },
        id="a cohort's borrowing limit caps what its queues take from the parent",
    ),
    pytest.param(
        [
            make_cohort("org"),
            make_cohort("research", "org"),
            make_cohort("product", "org", h800_lending_limit=8),
        ],
        [nlp, ads],
        [make_workload(1, nlp, 24)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 24; "
            "cohort research has 8 idle to lend)"
        },
        id="a cohort's lending limit caps what it lends to other branches",
    ),
    pytest.param(
        [
            make_cohort("org"),
            make_cohort("research", "org", h800=16),
            make_cohort("product", "org"),
        ],
        [make_queue("nlp", h800=0, cohort="research", borrowing_limit=16), ads],
        [make_workload(1, make_queue("nlp", h800=0, cohort="research"), 16)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2"},
        id="a cohort's own quota is lent to its queues",
    ),
    pytest.param(
        [Cohort("a", parent="b"), Cohort("b", parent="a")],
        [make_queue("nlp", h800=8, cohort="a"), make_queue("ads", h800=8, cohort="b")],
        [make_workload(1, make_queue("nlp", h800=8, cohort="a"), 16)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2"},
        id="a cycle of cohorts is cut, never followed forever",
    ),
]


@pytest.mark.parametrize(("cohorts", "queues", "workloads", "expected"), TREE_CASES)
def test_nested_cohorts(
    cohorts: list[Cohort], queues: list[Queue], workloads: list[Workload], expected: dict
) -> None:
    snapshot = make_snapshot(NODES, queues, workloads, cohorts)
    assert outcome(plan(snapshot, now=0.0), snapshot) == expected


def test_reclaim_reaches_across_the_cohort_tree() -> None:
    # ads (product) lent 16 through org to nlp (research); the cluster is full; ads wants it back.
    small = make_cluster(nodes=3)
    borrowed = make_running(90, nlp, *(on(node) for node in small))
    snapshot = make_snapshot(small, [nlp, ads], [borrowed, make_workload(1, ads, 16)], ORG)
    assert [p.workload_id for p in plan(snapshot, now=0.0).preemptions] == [90]


STRICT = make_queue("strict", h800=1000, strategy=Strategy.STRICT_FIFO)
BEST = make_queue("best", h800=1000)


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        pytest.param(
            STRICT,
            {
                1: "needs 20 whole H800 nodes in one data center; the best data center has 16 free",
                2: "waits behind workload 1, the head of strict-FIFO queue strict",
            },
            id="a strict FIFO queue starts nothing behind a head that waits",
        ),
        pytest.param(
            BEST,
            {
                1: "needs 20 whole H800 nodes in one data center; the best data center has 16 free",
                2: "dc1-p1-l1-n1",
            },
            id="a best-effort FIFO queue lets later work start meanwhile",
        ),
    ],
)
def test_fifo_strategies(queue: Queue, expected: dict) -> None:
    snapshot = make_snapshot(
        NODES, [queue], [make_workload(1, queue, 160), make_workload(2, queue, 8)]
    )
    assert outcome(plan(snapshot, now=0.0), snapshot) == expected
