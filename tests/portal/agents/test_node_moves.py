"""Drain that drains and down that recovers: what an operator asks of a node reaches the jobs
on it."""

from datetime import timedelta

from django.utils import timezone

from portal.agents.intake import carry_out_node_moves, record_acks
from portal.cluster.choices import Health
from portal.cluster.models import FaultEvent, Node, NodeCommand
from portal.workloads import lifecycle
from portal.workloads.checkpoints import record_saved
from portal.workloads.choices import RecoveryOutcome, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from portal.workloads.recovery import advance
from tests.builders import make_workload


def _run(workload):
    scheduling_cycle()
    for node_id in set(workload.allocations.values_list("node_id", flat=True)):
        lifecycle.mark_started_many([(workload.pk, node_id, 0)])
    return workload.allocations.first().node


def _state(workload):
    return Workload.objects.get(pk=workload.pk).state


def test_a_drained_nodes_job_moves_to_a_spare_and_the_node_goes_down(acme_llm, cluster):
    workload = make_workload(acme_llm, "pretrain", gpus=8)
    node = _run(workload)
    spare = Node.objects.filter(leaf__pod=node.leaf.pod, allocations__isnull=True).last()
    Node.objects.filter(pk=spare.pk).update(spare=True)
    node.set_health(Health.DRAINING, "by the operator")
    assert carry_out_node_moves() == [workload.pk]
    fault = FaultEvent.objects.get(kind="drain")
    assert list(fault.workloads.all()) == [workload] and fault.message == "it moves to a spare"
    # Nothing has failed: it saves first (its policy is async, not triggered), then moves.
    save = NodeCommand.objects.get(workload=workload, action="checkpoint")
    assert (save.node_id, save.args["kind"]) == (node.pk, "requested")
    assert advance(workload.recoveries.get().pk) is not None  # waits for the save
    record_saved(workload.pk, node.pk, {"step": 120, "location": "s3://ckpt/120"})
    record_acks([(node.pk, str(save.pk), True, "saved")])
    advance(workload.recoveries.get().pk)
    recovery = workload.recoveries.get()
    assert (recovery.outcome, recovery.resume_step, recovery.lost_s) == (
        RecoveryOutcome.SPARE,
        120,
        0,
    )
    assert set(workload.allocations.values_list("node_id", flat=True)) == {spare.pk}
    assert carry_out_node_moves() == []
    assert Node.objects.get(pk=node.pk).health == Health.DOWN  # drained: nothing left on it


def test_a_job_that_cannot_move_runs_on_until_the_drain_deadline(acme_llm, cluster):
    workload = make_workload(acme_llm, "no-spare-for-me", gpus=8)
    node = _run(workload)
    node.set_health(Health.DRAINING, "by the operator")
    assert carry_out_node_moves() == []
    assert _state(workload) == State.RUNNING
    Node.objects.filter(pk=node.pk).update(health_changed_at=timezone.now() - timedelta(hours=2))
    assert carry_out_node_moves() == [workload.pk]
    save = NodeCommand.objects.get(workload=workload, action="checkpoint")
    record_saved(workload.pk, node.pk, {"step": 300, "location": "s3://ckpt/300"})
    record_acks([(node.pk, str(save.pk), True, "saved")])
    advance(workload.recoveries.get().pk)
    assert _state(workload) == State.PENDING  # requeued at the head of its queue, saved
    assert workload.recoveries.get().resume_step == 300
    assert "drain deadline passed" in FaultEvent.objects.get(kind="drain").message


def test_a_node_marked_down_has_its_jobs_recovered_elsewhere(acme_llm, cluster):
    workload = make_workload(acme_llm, "on-a-node-going-down", gpus=8)
    node = _run(workload)
    node.set_health(Health.DOWN, "by the operator: a PSU is failing")
    assert carry_out_node_moves() == [workload.pk]
    fault = FaultEvent.objects.get(kind="node-down")
    assert fault.message == "by the operator: a PSU is failing"
    assert _state(workload) == State.RECOVERING
    assert workload.recoveries.get().lost_nodes == [node.pk]
    assert carry_out_node_moves() == []  # once
