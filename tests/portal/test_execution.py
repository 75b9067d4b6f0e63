"""What the engine and the checkpoint policies decide reaches the jobs, every layer real (the
ASGI server, a Celery worker, simulated agents on sockets): a reclaim carried out gracefully,
and routine saves asked for at a job's interval."""

import pytest

from portal.workloads import invariants
from portal.workloads.checkpoints import request_routine
from portal.workloads.choices import CheckpointKind, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from tests.builders import make_queue, make_workload
from tests.portal.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _state(workload):
    return Workload.objects.get(pk=workload.pk).state


def test_the_claimant_starts_only_after_the_victim_saved_and_stopped(fleet, acme, globex):
    acme_q = make_queue(acme, "llm", cohort="research", h800=32)
    globex_q = make_queue(globex, "train", cohort="research", h800=32)
    borrower = make_workload(globex_q, "borrower", gpus=64, simulated_duration_s=3600)
    scheduling_cycle()
    wait_until(lambda: _state(borrower) == State.RUNNING, 30, "the borrower to run")
    claimant = make_workload(acme_q, "claimant", gpus=32, simulated_duration_s=3600)
    plan = scheduling_cycle()
    assert [p.workload_id for p in plan.preemptions] == [borrower.pk]
    wait_until(lambda: _state(claimant) == State.RUNNING, 60, "the claimant to run")
    events = list(borrower.events.values_list("to_state", "reason", "at"))
    preempted = next(at for state, _, at in events if state == State.PREEMPTING)
    requeued = next(at for state, _, at in events if state == State.PENDING and at > preempted)
    assert (events[-1][0], events[-1][1]) == (
        State.PENDING,
        "requeued after preemption, from its save",
    )
    save = borrower.checkpoints.get(kind=CheckpointKind.REQUESTED)
    assert preempted <= save.created_at <= requeued  # saved while preempting, before the stop
    admitted = claimant.events.get(to_state=State.ADMITTED).at
    assert admitted >= requeued  # the claimant got GPUs only once the victim's were free
    wait_until(lambda: invariants.violations() == [], 15, "the invariants to hold")


def test_routine_saves_are_asked_for_and_registered_of_the_policys_kind(fleet, acme):
    queue = make_queue(acme, "llm", h800=64)
    job = make_workload(
        queue,
        "async-saver",
        gpus=16,
        checkpoint_policy="async",
        checkpoint_interval_s=1,
        simulated_duration_s=3600,
    )
    scheduling_cycle()
    wait_until(lambda: _state(job) == State.RUNNING, 30, "the job to run")
    saves = job.checkpoints.filter(kind=CheckpointKind.ASYNC)
    for count in (1, 2):
        wait_until(lambda: request_routine() == [job.pk], 10, "a save to be due")
        wait_until(lambda c=count: saves.count() == c, 10, f"save {count} registered")
    assert len({c.step for c in saves}) == 2  # two saves, each of the job's whole state
