"""The portal applies the engine's preemptions: victims stop, are booked and requeued."""

from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation, UsageRecord
from tests.builders import make_queue, make_workload


def _refreshed(workload):
    workload.refresh_from_db()
    return workload


def test_a_queue_reclaims_its_quota_from_a_borrower(cluster, acme, globex):
    """Globex borrows Acme's idle H800s; when Acme needs its quota, the borrower is preempted,
    requeued with its GPU-hours booked, and Acme's job starts."""
    acme_q = make_queue(acme, "llm", cohort="research", h800=48)
    globex_q = make_queue(globex, "train", cohort="research", h800=48)
    borrower = make_workload(globex_q, "borrower", gpus=64)
    scheduling_cycle()
    assert _refreshed(borrower).state == State.ADMITTED

    claimant = make_workload(acme_q, "claimant", gpus=48)
    for _ in range(2):  # reclaimed within two cycles
        scheduling_cycle()
    assert _refreshed(claimant).state == State.ADMITTED
    assert _refreshed(borrower).state == State.PENDING
    assert not borrower.allocations.exists()
    moves = list(borrower.events.values_list("to_state", "reason"))
    assert moves[-2][0] == State.PREEMPTING and moves[-2][1]
    assert moves[-1] == (State.PENDING, "requeued after preemption")
    assert UsageRecord.objects.filter(workload=borrower, gpus=64).exists()
    assert borrower.started_at is None


def test_work_within_its_queues_quota_is_left_alone(cluster, acme, globex):
    acme_q = make_queue(acme, "llm", cohort="research", h800=48)
    globex_q = make_queue(globex, "train", cohort="research", h800=48)
    owner = make_workload(globex_q, "owner", gpus=48)
    scheduling_cycle()
    waiting = make_workload(acme_q, "waiting", gpus=64)  # more than its own quota of 48
    scheduling_cycle()
    scheduling_cycle()
    assert _refreshed(owner).state == State.ADMITTED
    assert _refreshed(waiting).state == State.PENDING
    assert waiting.pending_reason


def test_a_cycle_that_preempts_several_jobs_tells_the_agents_once(
    cluster, acme, globex, monkeypatch, django_capture_on_commit_callbacks
):
    """Two borrowers evicted and a claimant placed in one cycle: one desired-state pass for
    every node that changed, not one per victim and one more for the admissions."""
    acme_q = make_queue(acme, "llm", cohort="research", h800=64)
    globex_q = make_queue(globex, "train", cohort="research", h800=0)
    borrowers = [make_workload(globex_q, f"borrower-{i}", gpus=32) for i in range(2)]
    scheduling_cycle()
    assert {_refreshed(b).state for b in borrowers} == {State.ADMITTED}
    held = set(Allocation.objects.values_list("node_id", flat=True))
    passes = []
    monkeypatch.setattr("portal.workloads.desired.sync_nodes", passes.append)
    make_workload(acme_q, "claimant", gpus=64)
    with django_capture_on_commit_callbacks(execute=True):
        plan = scheduling_cycle()
    assert len(plan.preemptions) == 2
    assert len(passes) == 1
    assert passes[0] == held  # the victims' nodes (the claimant waits for them to stop)
