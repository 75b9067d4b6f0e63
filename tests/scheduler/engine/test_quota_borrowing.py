"""Quota: nominal quota, borrowing from a cohort, borrowing and lending limits."""

from __future__ import annotations

import pytest

from scheduler.engine import Queue, Workload, plan
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
    outcome,
)

# Room for 16 whole nodes, so only quota decides in these cases.
NODES = make_cluster(leaves=2, nodes=8)


def running(workload_id: int, queue: Queue, node_numbers: range) -> Workload:
    """A workload of `queue` holding whole nodes of NODES, counted from the last one back."""
    return make_running(workload_id, queue, *(on(NODES[-n]) for n in node_numbers))


nlp = make_queue("nlp", h800=8, cohort="research")
cv = make_queue("cv", h800=16, cohort="research")

CASES = [
    pytest.param(
        [make_queue("nlp", h800=16)],
        [],
        [make_workload(1, make_queue("nlp", h800=16), 16)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2"},
        id="a job within the nominal quota is admitted",
    ),
    pytest.param(
        [make_queue("nlp", h800=8)],
        [],
        [make_workload(1, make_queue("nlp", h800=8), 16)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 16; "
            "the queue is in no cohort, so it cannot borrow)"
        },
        id="a queue without a cohort cannot borrow",
    ),
    pytest.param(
        [nlp, cv],
        [],
        [make_workload(1, nlp, 16)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2"},
        id="a queue borrows idle quota from its cohort",
    ),
    pytest.param(
        [make_queue("nlp", h800=8, cohort="research", borrowing_limit=4), cv],
        [],
        [make_workload(1, make_queue("nlp", h800=8, cohort="research", borrowing_limit=4), 16)],
        {
            1: "queue nlp is at its borrowing limit for H800 (0/4 borrowed beyond its quota of "
            "8; the job needs 16, which would make 8)"
        },
        id="borrowing stops at the borrowing limit",
    ),
    pytest.param(
        [nlp, make_queue("cv", h800=16, cohort="research", lending_limit=4)],
        [],
        [make_workload(1, nlp, 16)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 16; "
            "cohort research has 4 idle to lend)"
        },
        id="a lending limit caps what a member lends",
    ),
    pytest.param(
        [nlp, cv],
        [running(90, cv, range(1, 3))],
        [make_workload(1, nlp, 16)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 16; "
            "cohort research has 0 idle to lend)"
        },
        id="a cohort member using its whole quota lends nothing",
    ),
    pytest.param(
        [nlp, cv, make_queue("speech", h800=0, cohort="research")],
        [running(90, make_queue("speech", h800=0, cohort="research"), range(1, 3))],
        [make_workload(1, nlp, 16)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 16; "
            "cohort research has 0 idle to lend)"
        },
        id="GPUs already lent to one member are not idle for another",
    ),
    pytest.param(
        [nlp, make_queue("cv", h800=16, cohort="vision")],
        [],
        [make_workload(1, nlp, 16)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 16; "
            "cohort research has 0 idle to lend)"
        },
        id="queues of another cohort do not lend",
    ),
    pytest.param(
        [make_queue("nlp", h800=16)],
        [],
        [
            make_workload(1, make_queue("nlp", h800=16), 8),
            make_workload(2, make_queue("nlp", h800=16), 16),
        ],
        {
            1: "dc1-p1-l1-n1",
            2: "queue nlp would exceed its H800 quota (8/16 in use, job needs 16; "
            "the queue is in no cohort, so it cannot borrow)",
        },
        id="admissions earlier in the plan count against the quota",
    ),
    pytest.param(
        [nlp, cv],
        [running(90, nlp, range(1, 4))],
        [make_workload(2, cv, 8)],
        {2: "dc1-p1-l2-n1"},
        id="a queue always gets its nominal quota, even when it has lent it out",
    ),
    pytest.param(
        [nlp, cv],
        [],
        [make_workload(1, nlp, 24), make_workload(2, cv, 8)],
        {
            1: "queue nlp would exceed its H800 quota (0/8 in use, job needs 24; "
            "cohort research has 8 idle to lend)",
            2: "dc1-p1-l1-n1",
        },
        id="work within its queue's nominal quota goes before work that must borrow",
    ),
    pytest.param(
        [nlp, cv],
        [running(90, cv, range(1, 2))],
        [make_workload(1, nlp, 16), make_workload(2, nlp, 8)],
        {
            1: "queue nlp would exceed its H800 quota (8/8 in use, job needs 16; "
            "cohort research has 8 idle to lend)",
            2: "dc1-p1-l2-n1",
        },
        id="in a queue, a job within the nominal quota goes before earlier ones that borrow",
    ),
    pytest.param(
        [nlp, cv],
        [running(90, cv, range(1, 2))],
        [make_workload(1, nlp, 16, priority=5), make_workload(2, nlp, 8)],
        {
            1: "dc1-p1-l2-n1 dc1-p1-l2-n2",
            2: "queue nlp would exceed its H800 quota (16/8 in use, job needs 8; "
            "cohort research has 0 idle to lend)",
        },
        id="in a queue, a higher-priority job that must borrow still goes first",
    ),
    pytest.param(
        [make_queue("nlp", h20=64)],
        [],
        [make_workload(1, make_queue("nlp", h20=64), 8)],
        {
            1: "queue nlp would exceed its H800 quota (0/0 in use, job needs 8; "
            "the queue is in no cohort, so it cannot borrow)"
        },
        id="a quota for one GPU model does not cover another",
    ),
]


@pytest.mark.parametrize(("queues", "held", "pending", "expected"), CASES)
def test_quota(
    queues: list[Queue], held: list[Workload], pending: list[Workload], expected: dict[int, str]
) -> None:
    snapshot = make_snapshot(NODES, queues, [*held, *pending])
    assert outcome(plan(snapshot, now=0.0), snapshot) == expected


def test_usage_counts_running_and_admitted_gpus() -> None:
    snapshot = make_snapshot(
        NODES, [nlp, cv], [running(90, cv, range(1, 2)), make_workload(1, nlp, 16)]
    )
    assert plan(snapshot, now=0.0).usage == {(nlp.id, "H800"): 16, (cv.id, "H800"): 8}
