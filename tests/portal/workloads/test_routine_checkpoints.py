"""The control plane asks running jobs for their routine saves, at their own interval or the
advisor's, and each policy's save is of its kind."""

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.agents.intake import record_acks
from portal.cluster.models import NodeCommand
from portal.workloads import checkpoints, lifecycle
from portal.workloads.advice import failure_rate
from portal.workloads.checkpoints import record_saved, request_routine
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from scheduler import checkpointing
from tests.builders import make_workload


def _running(queue, **fields):
    workload = make_workload(queue, gpus=16, **fields)
    scheduling_cycle()
    for node_id in set(workload.allocations.values_list("node_id", flat=True)):
        lifecycle.mark_started_many([(workload.pk, node_id, 0)])
    started = timezone.now() - timedelta(minutes=5)
    Workload.objects.filter(pk=workload.pk).update(started_at=started)
    workload.refresh_from_db()
    return workload


def test_a_save_is_asked_for_at_the_jobs_interval_and_not_while_one_is_unanswered(acme_llm):
    workload = _running(acme_llm, checkpoint_policy="async", checkpoint_interval_s=60)
    assert request_routine() == [workload.pk]
    asked = NodeCommand.objects.filter(workload=workload, action="checkpoint")
    assert len(asked) == 2 and {c.args["kind"] for c in asked} == {"async"}
    assert request_routine() == []  # still unanswered
    node = asked[0].node_id
    record_saved(workload.pk, node, {"step": 10, "kind": "async", "location": "s3://c/10"})
    record_acks([(c.node_id, str(c.pk), True, "saved") for c in asked])
    assert request_routine() == []  # saved just now
    assert request_routine(now=timezone.now() + timedelta(seconds=61)) == [workload.pk]


@pytest.mark.parametrize(
    ("policy", "kind"),
    [("periodic", "periodic"), ("async", "async"), ("triggered", "async")],
    ids=["periodic saves stop the world", "async saves", "a triggered policy's fallback"],
)
def test_without_an_interval_the_advisors_applies(acme_llm, policy, kind):
    workload = _running(acme_llm, checkpoint_policy=policy)
    rate, _ = failure_rate()
    every = checkpointing.interval_for(
        checkpointing.PolicyKind(policy), 16, failures_per_gpu_hour=rate
    )
    assert checkpoints.interval_s(workload, rate) == every
    since = workload.started_at
    assert request_routine(now=since + timedelta(seconds=every - 1)) == []
    assert request_routine(now=since + timedelta(seconds=every + 1)) == [workload.pk]
    assert {c.args["kind"] for c in NodeCommand.objects.filter(workload=workload)} == {kind}


def test_a_job_that_does_not_checkpoint_is_never_asked(acme_llm):
    _running(acme_llm, checkpoint_policy="none", checkpoint_interval_s=60)
    assert request_routine(now=timezone.now() + timedelta(hours=1)) == []


def test_a_failed_save_is_asked_for_again_at_the_next_interval_not_at_once(acme_llm):
    workload = _running(acme_llm, checkpoint_policy="periodic", checkpoint_interval_s=60)
    assert request_routine() == [workload.pk]
    asked = NodeCommand.objects.filter(workload=workload)
    record_acks([(c.node_id, str(c.pk), False, "no space left") for c in asked])
    assert request_routine() == []
    assert request_routine(now=timezone.now() + timedelta(seconds=61)) == [workload.pk]
