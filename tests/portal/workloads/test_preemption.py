"""The portal applies the engine's preemptions: victims stop, are booked and requeued."""

from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import UsageRecord
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
