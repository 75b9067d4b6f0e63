"""Budgets: a hard budget keeps out work that could overrun it, a soft one stops borrowing and
lowers the fair-share weight, and no budget ever stops running work."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.engine import Budget, Plan, Snapshot, plan
from scheduler.engine.budget import SOFT_WEIGHT, seconds_left
from scheduler.engine.cycle import Cycle
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
    outcome,
)
from tests.scheduler.engine.test_plan_digests import NOW
from tests.scheduler.engine.test_plan_digests import snapshot as random_snapshot

H = 3600.0
NODES = make_cluster(leaves=2, nodes=8)
H20 = make_cluster("H20", nodes=8, first_id=100, prefix="h20-")

llm = make_queue("llm", h800=64, h20=64)
cv = make_queue("cv", h800=64)
nlp = make_queue("nlp", h800=8, cohort="research")
lender = make_queue("lender", h800=64, cohort="research")


def budget(queue, limit, used=0.0, hard=True, **extra) -> Budget:
    return Budget(f"queue {queue.name}", (queue.id,), limit, used, hard, **extra)


def job(workload_id, queue, gpus, hours=None, **extra):
    limit = None if hours is None else hours * H
    return make_workload(workload_id, queue, gpus, time_limit_s=limit, **extra)


def decide(queues, workloads, budgets, nodes=NODES) -> dict[int, str]:
    snapshot = replace(make_snapshot(nodes, queues, workloads), budgets=tuple(budgets))
    return outcome(plan(snapshot, NOW), snapshot)


CASES = [
    pytest.param(
        [llm],
        [job(1, llm, 16, hours=96)],
        [budget(llm, 2000, used=800)],
        {
            1: "budget of queue llm: 1,200 GPU-hours left this month, this job needs up to "
            "1,536 (16 H800 GPUs for 96 h), 336 more than is left"
        },
        id="a hard budget keeps out a job whose GPUs for its time limit would overrun it",
    ),
    pytest.param(
        [llm],
        [job(1, llm, 16, hours=75)],
        [budget(llm, 2000, used=800)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2"},
        id="a job that fits what is left starts",
    ),
    pytest.param(
        [llm],
        [job(1, llm, 8, hours=100), job(2, llm, 16, hours=96)],
        [budget(llm, 2000)],
        {
            1: "dc1-p1-l1-n1",
            2: "budget of queue llm: 1,200 GPU-hours left this month, this job needs up to "
            "1,536 (16 H800 GPUs for 96 h), 336 more than is left",
        },
        id="what the cycle admits counts against the budget",
    ),
    pytest.param(
        [llm],
        [
            make_running(90, llm, on(NODES[-1]), started_at=NOW - H, time_limit_s=101 * H),
            job(1, llm, 16, hours=96),
        ],
        [budget(llm, 2000)],
        {
            1: "budget of queue llm: 1,200 GPU-hours left this month after its running jobs' "
            "time limits, this job needs up to 1,536 (16 H800 GPUs for 96 h), 336 more than "
            "is left"
        },
        id="running jobs count until their time limits",
    ),
    pytest.param(
        [llm],
        [job(1, llm, 8)],
        [budget(llm, 2000)],
        {
            1: "budget of queue llm is hard and this job has no time limit: only jobs with one "
            "start under it (2,000 GPU-hours left this month)"
        },
        id="a job without a time limit waits under a hard budget",
    ),
    pytest.param(
        [llm],
        [job(1, llm, 16, hours=96, gpu_model="H20"), job(2, llm, 32, hours=96, gpu_model="H20")],
        [budget(llm, 1000, weights=(("H20", 0.4),), window="in the last 30 days")],
        {
            1: "h20-dc1-p1-l1-n1 h20-dc1-p1-l1-n2",
            2: "budget of queue llm: 386 GPU-hours left in the last 30 days, this job needs up "
            "to 1,229 (32 H20 GPUs for 96 h, weighted 0.4), 843 more than is left",
        },
        id="GPU-hours count at their GPU model's weight",
    ),
    pytest.param(
        [llm, cv],
        [job(1, llm, 8, hours=100), job(2, cv, 8, hours=50)],
        [Budget("tenant acme", (llm.id, cv.id), 1000, hard=True)],
        {
            1: "dc1-p1-l1-n1",
            2: "budget of tenant acme: 200 GPU-hours left this month, this job needs up to 400 "
            "(8 H800 GPUs for 50 h), 200 more than is left",
        },
        id="a tenant's budget covers all its queues",
    ),
    pytest.param(
        [llm, cv],
        [job(1, llm, 16, hours=96), job(2, cv, 16)],
        [budget(llm, 100)],
        {
            1: "budget of queue llm: 100 GPU-hours left this month, this job needs up to 1,536 "
            "(16 H800 GPUs for 96 h), 1,436 more than is left",
            2: "dc1-p1-l1-n1 dc1-p1-l1-n2",
        },
        id="a queue without a budget is not held back",
    ),
    pytest.param(
        [llm],
        [job(1, llm, 16, hours=96), job(2, llm, 8, hours=10)],
        [budget(llm, 100)],
        {
            1: "budget of queue llm: 100 GPU-hours left this month, this job needs up to 1,536 "
            "(16 H800 GPUs for 96 h), 1,436 more than is left",
            2: "dc1-p1-l1-n1",
        },
        id="a smaller job behind one the budget keeps out still starts",
    ),
    pytest.param(
        [nlp, lender],
        [job(1, nlp, 8), job(2, nlp, 16)],
        [budget(nlp, 1000, used=1200, hard=False)],
        {
            1: "dc1-p1-l1-n1",
            2: "budget of queue nlp is spent this month (1,200 of 1,000 GPU-hours used): its "
            "jobs start only within their queue's nominal H800 quota, and this one would borrow",
        },
        id="over a soft budget a queue runs within its nominal quota and borrows no more",
    ),
    pytest.param(
        [nlp, lender],
        [job(1, nlp, 24)],
        [budget(nlp, 1000, used=999, hard=False)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2 dc1-p1-l1-n3"},
        id="under its soft budget a queue borrows, whatever the job may use",
    ),
]


@pytest.mark.parametrize(("queues", "workloads", "budgets", "expected"), CASES)
def test_budgets(queues, workloads, budgets, expected) -> None:
    nodes = NODES + H20 if any(w.gpu_model == "H20" for w in workloads) else NODES
    assert decide(queues, workloads, budgets, nodes) == expected


def test_near_a_months_end_a_job_counts_only_the_time_left_in_it() -> None:
    """10 GPU-hours left: 8 GPUs for a 10 h limit start an hour before the month ends (the
    other 9 h fall in the next month), not two hours before it."""
    workloads = [job(1, llm, 8, hours=10)]
    soon = budget(llm, 10, ends_at=NOW + H)
    assert decide([llm], workloads, [soon]) == {1: "dc1-p1-l1-n1"}
    later = budget(llm, 10, ends_at=NOW + 2 * H)
    assert decide([llm], workloads, [later]) == {
        1: "budget of queue llm: 10 GPU-hours left this month, this job needs up to 16 "
        "(8 H800 GPUs for the 2 h left this month), 6 more than is left"
    }
    running = make_running(90, cv, on(NODES[1]), started_at=NOW, time_limit_s=10 * H)
    shared = Budget("tenant acme", (llm.id, cv.id), 20, hard=True, ends_at=NOW + H)
    # The running job counts 8 GPU-hours to the month's end, not 80: 12 are left for job 1.
    assert decide([llm, cv], workloads + [running], [shared])[1] == "dc1-p1-l1-n1"


def test_a_queue_far_over_its_hard_budget_keeps_its_running_work() -> None:
    """Running work, elastic included, is never stopped or shrunk by a budget; it only does
    not grow."""
    running = make_running(
        90, llm, on(NODES[0]), started_at=NOW - 600, time_limit_s=10 * H, min_gpus=4, max_gpus=16
    )
    running = replace(running, last_checkpoint_at=NOW - 60)
    snapshot = replace(
        make_snapshot(NODES, [llm], [running]), budgets=(budget(llm, 100, used=5000),)
    )
    result = plan(snapshot, NOW)
    assert (result.preemptions, result.shrinks, result.grows) == ([], [], [])
    assert result.usage == {(llm.id, "H800"): 8}
    unbudgeted = plan(replace(snapshot, budgets=()), NOW)
    assert [g.workload_id for g in unbudgeted.grows] == [90]  # the budget is what stops it


def test_a_grow_counts_the_rest_of_the_time_limit() -> None:
    running = make_running(
        90, llm, on(NODES[0]), started_at=NOW - 2 * H, time_limit_s=12 * H, max_gpus=16
    )
    running = replace(running, min_gpus=8, last_checkpoint_at=NOW - 60)
    assert seconds_left(running, NOW) == 10 * H
    # 8 GPUs held for 10 more hours (80), and another 8 for those 10 hours (80): 160.
    for limit, grows in ((159.0, []), (160.0, [90])):
        snapshot = replace(make_snapshot(NODES, [llm], [running]), budgets=(budget(llm, limit),))
        assert [g.workload_id for g in plan(snapshot, NOW).grows] == grows


def test_over_a_soft_budget_a_queue_keeps_a_quarter_of_its_weight() -> None:
    snapshot = replace(
        make_snapshot(NODES, [nlp, lender], []),
        budgets=(budget(nlp, 10, used=10, hard=False), budget(lender, 10, used=9, hard=False)),
    )
    ledger = Cycle(snapshot, NOW).ledger
    assert ledger.queue(nlp.id).weight == SOFT_WEIGHT
    assert ledger.queue(lender.id).weight == 1.0


def _charged(snapshot: Snapshot, result: Plan, index: int) -> float:
    """Weighted GPU-hours the plan commits against budget `index`: admissions and claimants
    for their time limits, grows for the rest of theirs."""
    limited = snapshot.budgets[index]
    workloads = {w.id: w for w in snapshot.workloads}
    claimants = {p.for_workload_id for p in result.preemptions + result.shrinks}
    charged = 0.0
    for admission in result.admissions:
        w = workloads[admission.workload_id]
        gpus = sum(len(p.gpu_indices) for p in admission.placements)
        if w.queue_id in limited.queue_ids:
            charged += gpus * w.time_limit_s / H * limited.weight(w.gpu_model)
    for claimant in claimants:
        w = workloads[claimant]
        if w.queue_id in limited.queue_ids:
            charged += w.gpus * w.time_limit_s / H * limited.weight(w.gpu_model)
    for grown in result.grows:
        w = workloads[grown.workload_id]
        if w.queue_id in limited.queue_ids:
            extra = sum(len(p.gpu_indices) for p in grown.added)
            charged += extra * seconds_left(w, NOW) / H * limited.weight(w.gpu_model)
    return charged


def _held(snapshot: Snapshot, index: int) -> float:
    limited = snapshot.budgets[index]
    return sum(
        w.held * seconds_left(w, NOW) / H * limited.weight(w.gpu_model)
        for w in snapshot.workloads
        if w.queue_id in limited.queue_ids
        and w.placements
        and not w.preempting
        and w.time_limit_s is not None
    )


@pytest.mark.parametrize("seed", range(60))
def test_admissions_never_overrun_a_hard_budget(seed: int) -> None:
    """On random snapshots with hard budgets (one per queue, and one over several queues):
    what the plan starts, makes room for or grows fits in what each budget had left."""
    base = random_snapshot(seed)
    rng = random.Random(seed)
    weights = (("H20", 0.4),)
    budgets = [
        Budget(f"queue {q.name}", (q.id,), rng.uniform(0, 3000), rng.uniform(0, 500), True)
        for q in base.queues
        if rng.random() < 0.7
    ]
    shared = tuple(q.id for q in base.queues[::2])
    budgets.append(Budget("tenant t", shared, rng.uniform(0, 5000), 0.0, True, weights=weights))
    snapshot = replace(base, budgets=tuple(budgets))
    result = plan(snapshot, NOW)
    for index, limited in enumerate(snapshot.budgets):
        left = limited.limit - limited.used - _held(snapshot, index)
        charged = _charged(snapshot, result, index)
        assert charged == 0 or charged <= left + 1e-6, limited


@pytest.mark.parametrize("seed", range(60))
def test_a_spent_hard_budget_starts_and_stops_nothing(seed: int) -> None:
    base = random_snapshot(seed)
    spent = tuple(Budget(f"queue {q.name}", (q.id,), 0.0, 0.0, True) for q in base.queues)
    result = plan(replace(base, budgets=spent), NOW)
    assert (result.admissions, result.preemptions, result.shrinks, result.grows) == ([], [], [], [])
