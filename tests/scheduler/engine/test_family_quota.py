"""A family quota (Hopper: H800 and H20) sits above its models' quotas as a cohort above its
queues: a queue may hold that many GPUs of the family's models in all, any mix; a model's own
quota still caps that model; beyond the family's quota the queue borrows, and what it borrows
may be taken back from any of its GPUs of the family."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import FamilyQuota, plan
from scheduler.engine.quota import QuotaLedger
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    on,
    outcome,
)
from scheduler.engine.testing import make_workload as workload

NOW = 10_000.0
H800 = make_cluster("H800", nodes=2)  # ids 1, 2
H20 = make_cluster("H20", nodes=2, first_id=3, prefix="h20-")  # ids 3, 4
HOPPER = ("H800", "H20")


def hopper(queue, nominal, borrowing_limit=None):
    """The queue with a Hopper family quota."""
    family = FamilyQuota("hopper", HOPPER, nominal, borrowing_limit)
    return replace(queue, families=(family,))


alone = hopper(make_queue("alone"), 16)
capped = hopper(make_queue("capped", h800=8), 16)
lender = make_queue("lender", cohort="c", h20=16)
borrower = hopper(make_queue("borrower", cohort="c"), 8)
strict = hopper(make_queue("strict", cohort="c"), 8, borrowing_limit=0)


def fates(queues, *workloads):
    snapshot = make_snapshot(H800 + H20, queues, workloads)
    result = plan(snapshot, NOW)
    return outcome(result, snapshot), {p.workload_id for p in result.preemptions}


@pytest.mark.parametrize(
    "queues, workloads, expected",
    [
        pytest.param(
            [alone],
            [
                workload(1, alone, 8, gpu_model="H800"),
                workload(2, alone, 8, gpu_model="H20"),
                workload(3, alone, 8, gpu_model="H20"),
            ],
            {
                1: "dc1-p1-l1-n1",
                2: "h20-dc1-p1-l1-n1",
                3: "queue alone would exceed its hopper quota (16/16 in use, job needs 8; the "
                "queue is in no cohort, so it cannot borrow)",
            },
            id="the family's quota on any of its models, in all",
        ),
        pytest.param(
            [alone],
            [workload(1, alone, 16, gpu_model="H20")],
            {1: "h20-dc1-p1-l1-n1 h20-dc1-p1-l1-n2"},
            id="a model without a quota of its own may use all the family's",
        ),
        pytest.param(
            [capped],
            [
                workload(1, capped, 8, gpu_model="H800"),
                workload(2, capped, 8, gpu_model="H800"),
                workload(3, capped, 8, gpu_model="H20"),
            ],
            {
                1: "dc1-p1-l1-n1",
                2: "queue capped would exceed its H800 quota (8/8 in use, job needs 8; the queue "
                "is in no cohort, so it cannot borrow)",
                3: "h20-dc1-p1-l1-n1",
            },
            id="a model's own quota still caps that model",
        ),
        pytest.param(
            [lender, borrower],
            [
                workload(1, borrower, 8, gpu_model="H800"),
                workload(2, borrower, 8, gpu_model="H20"),
            ],
            {1: "dc1-p1-l1-n1", 2: "h20-dc1-p1-l1-n1"},
            id="beyond the family's quota it borrows what the cohort lends",
        ),
        pytest.param(
            [lender, strict],
            [
                workload(1, strict, 8, gpu_model="H800"),
                workload(2, strict, 8, gpu_model="H20"),
            ],
            {
                1: "dc1-p1-l1-n1",
                2: "queue strict is at its borrowing limit for hopper (0/0 borrowed beyond its "
                "quota of 8; the job needs 8, which would make 8)",
            },
            id="the family's borrowing limit",
        ),
    ],
)
def test_family_quota(queues, workloads, expected):
    assert fates(queues, *workloads)[0] == expected


def test_a_queue_over_its_family_quota_gives_back_what_it_borrows():
    """The borrower holds 8 H800 and 8 H20 on a family quota of 8: each model is within the
    quota the family gives it, but the family is over by 8, so the lender, claiming its own H20
    quota, takes the H20 back."""
    running = [
        make_running(1, borrower, on(H800[0]), gpu_model="H800"),
        make_running(2, borrower, on(H20[0]), gpu_model="H20"),
    ]
    claim = workload(3, lender, 16, gpu_model="H20")
    fate, preempted = fates([lender, borrower], *running, claim)
    assert preempted == {2}
    # Without the family above it, the same H20 work is within its queue's quota: kept.
    per_model = replace(borrower, families=(), quotas=borrower.model_quotas)
    fate, preempted = fates([lender, per_model], *running, replace(claim))
    assert preempted == set()


def test_fair_sharing_counts_a_family_excess_once_at_its_cheapest_worth():
    queue = hopper(make_queue("q", cohort="c"), 8)
    ledger = QuotaLedger([queue, lender], worth=[("H800", 5.0), ("H20", 1.0)])
    ledger.charge(queue.id, "H800", 8)
    ledger.charge(queue.id, "H20", 4)
    assert ledger.borrowing(queue, "H800") == 4
    assert ledger.borrowing(queue, "H20") == 4
    lendable = 8 * 5.0 + (8 + 16) * 1.0  # the family's 8 of each model, the lender's 16 H20
    assert ledger.share(queue) == pytest.approx(4 * 1.0 / lendable)
    assert not ledger.within_nominal(queue, "H20", 1)
    assert ledger.nominal_room(queue, "H800") == -4


def test_beyond_its_family_a_queue_borrows_only_what_others_lend():
    """Alone in its cohort with H800 16 and Hopper 16, holding 16 H20: its idle H800 quota is
    its own, not something to borrow past its family's ceiling."""
    queue = hopper(make_queue("solo", cohort="c", h800=16), 16)
    running = make_running(1, queue, on(H20[0]), on(H20[1]), gpu_model="H20")
    fate, _ = fates([queue], running, workload(2, queue, 8, gpu_model="H800"))
    assert fate[2].startswith("queue solo would exceed its hopper quota (16/16 in use")


def test_the_ceiling_the_api_checks_keeps_to_the_family():
    ledger = QuotaLedger([capped, strict, lender])
    assert ledger.ceiling(capped, "H800") == 8  # its own model quota
    assert ledger.ceiling(capped, "H20") == 16  # the family's, no cohort to borrow from
    assert ledger.ceiling(strict, "H20") == 8  # the family's borrowing limit of 0


def test_a_share_after_a_release_counts_the_release_on_the_whole_family():
    queue = hopper(make_queue("q", cohort="c"), 8)
    ledger = QuotaLedger([queue, lender])
    ledger.charge(queue.id, "H800", 8)
    ledger.charge(queue.id, "H20", 4)
    assert ledger.share(queue) > 0
    assert ledger.share(queue, "H20", -4) == 0  # back within the family's 8
