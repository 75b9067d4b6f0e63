"""A Celery worker killed in the middle of a recovery: the next worker finishes it, once."""

import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.agents.intake import record_fault
from portal.cluster.models import Node
from portal.workloads.choices import RecoveryOutcome, RecoveryStep
from portal.workloads.models import Allocation, Recovery
from portal.workloads.tasks import resume_recoveries
from scheduler import faults
from tests.portal.processes import start_worker, wait_until
from tests.portal.workloads.test_recovery import running_job, spare_in_pod_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_recovery_survives_its_worker_being_killed(acme_llm, clean_redis):
    workload, (master, lost) = running_job(acme_llm, checkpoint_policy="triggered")
    spare = spare_in_pod_of(lost)
    first = start_worker()
    try:
        # No agent answers the triggered save, so the first worker sits in the saving step.
        record_fault(lost, faults.lookup("xid-79"))
        recovery = Recovery.objects.get(workload=workload)
        wait_until(
            lambda: "advance_recovery" in first.output(),
            30,
            "the first worker to take the recovery",
            check=first,
        )
    finally:
        os.kill(first.process.pid, signal.SIGKILL)  # no goodbye, no ack
        first.process.wait()
    assert Recovery.objects.get(pk=recovery.pk).step == RecoveryStep.SAVING

    # Time passes: the save's deadline goes by and nobody has touched the recovery.
    Recovery.objects.filter(pk=recovery.pk).update(
        save_deadline=timezone.now(), updated_at=timezone.now() - timedelta(minutes=1)
    )
    # What beat runs every 5 s, before the second worker starts: once up, that worker may also
    # be handed the first one's unfinished task again and touch the recovery first.
    assert resume_recoveries() == [recovery.pk]
    second = start_worker()
    try:
        wait_until(
            lambda: Recovery.objects.get(pk=recovery.pk).step == RecoveryStep.RESTARTING,
            30,
            "the second worker to finish the recovery",
            check=second,
        )
    finally:
        second.stop()

    recovery.refresh_from_db()
    workload.refresh_from_db()
    assert recovery.outcome == RecoveryOutcome.SPARE and "timed out" in recovery.detail
    assert workload.attempt == 1  # restarted once
    held = Allocation.objects.filter(workload=workload)
    assert held.count() == 16 and set(held.values_list("node_id", flat=True)) == {master, spare.pk}
    assert not Allocation.objects.exclude(workload=workload).exists()  # nothing leaked
    assert not Node.objects.get(pk=spare.pk).spare
