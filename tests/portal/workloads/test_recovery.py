"""Recovery from faults, step by step: the triggered save, spares, shrink, requeue, ETTR.

Agents are played by direct calls to the functions their consumer calls (the socket path is
covered in tests/portal/test_fault_recovery.py)."""

from datetime import timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from portal.agents.intake import record_acks, record_fault
from portal.cluster.choices import CommandState, Health
from portal.cluster.models import Node, NodeCommand
from portal.workloads import lifecycle, parallel, recovery
from portal.workloads.checkpoints import record_saved
from portal.workloads.choices import RecoveryOutcome, RecoveryStep, State
from portal.workloads.cycle import build_snapshot, scheduling_cycle
from portal.workloads.models import Allocation, Checkpoint, Recovery, UsageRecord
from scheduler import faults
from tests.builders import make_workload

XID_79 = faults.lookup("xid-79")  # GPU fell off the bus: node lost, memory unreadable


def start_all(workload):
    for node_id in set(workload.allocations.values_list("node_id", flat=True)):
        lifecycle.mark_started_many([(workload.pk, node_id, workload.attempt)])
    workload.refresh_from_db()


def running_job(queue, gpus=16, **fields):
    """A job admitted by a real cycle and reported running by every node; with its nodes."""
    workload = make_workload(queue, "train", gpus=gpus, **fields)
    scheduling_cycle()
    workload.refresh_from_db()
    start_all(workload)
    assert workload.state == State.RUNNING
    nodes = list(
        workload.allocations.order_by("node_rank").values_list("node_id", flat=True).distinct()
    )
    return workload, nodes


def saved(workload, node_id, step, kind="periodic", ago_s=0.0, **detail):
    checkpoint = record_saved(
        workload.pk,
        node_id,
        {
            "step": step,
            "kind": kind,
            "location": f"/ckpt/{workload.pk}/{step}",
            "size_bytes": 10,
            "duration_s": 3.0,
            **detail,
        },
    )
    if ago_s:
        Checkpoint.objects.filter(pk=checkpoint.pk).update(
            created_at=timezone.now() - timedelta(seconds=ago_s)
        )
    return checkpoint


def spare_in_pod_of(node_id, *, connected=True):
    """Turn a free node of the same pod into a hot spare."""
    node = Node.objects.get(pk=node_id)
    spare = (
        Node.objects.filter(leaf__pod=node.leaf.pod, allocations__isnull=True)
        .exclude(pk=node_id)
        .first()
    )
    Node.objects.filter(pk=spare.pk).update(spare=True, connected=connected)
    return spare


@pytest.fixture
def triggered(acme_llm):
    return running_job(acme_llm, checkpoint_policy="triggered")


def test_triggered_save_then_restart_on_a_spare_of_the_same_pod(triggered):
    workload, (master, lost) = triggered
    spare = spare_in_pod_of(lost)
    saved(workload, master, step=100, ago_s=600)
    fault = record_fault(lost, XID_79, gpu_index=3)
    workload.refresh_from_db()
    assert workload.state == State.RECOVERING
    assert Node.objects.get(pk=lost).health == Health.DOWN
    rec = Recovery.objects.get(workload=workload)
    assert rec.step == RecoveryStep.SAVING and rec.fault == fault
    command = NodeCommand.objects.get(workload=workload)
    assert (command.node_id, command.action) == (master, "checkpoint")  # healthy ranks only
    assert recovery.advance(rec.pk) == rec.save_deadline  # waits for the save, until then
    # The old run, still running while it saves, says so again (a reconnect, a retried write):
    # that is no restart, and the recovery goes on.
    lifecycle.mark_started_many([(workload.pk, master, 0)])
    workload.refresh_from_db()
    rec.refresh_from_db()
    assert (workload.state, rec.step) == (State.RECOVERING, RecoveryStep.SAVING)

    saved(workload, master, step=130, kind="triggered")
    record_acks([(master, str(command.pk), True, "saved")])
    assert recovery.advance(rec.pk) is None
    rec.refresh_from_db()
    assert (rec.step, rec.outcome, rec.resume_step) == (
        RecoveryStep.RESTARTING,
        RecoveryOutcome.SPARE,
        130,
    )
    assert rec.lost_s == 0  # the save came after the fault
    workload.refresh_from_db()
    assert workload.attempt == 1
    placed = dict(workload.allocations.values_list("node_id").annotate(n=Count("id")))
    assert placed == {master: 8, spare.pk: 8}
    assert not Node.objects.get(pk=spare.pk).spare  # it left the pool
    assert Allocation.objects.get(workload=workload, node=spare, gpu_index=0).node_rank == 1

    lifecycle.mark_started_many([(workload.pk, master, 0)])  # a late report of the old run
    lifecycle.finish(workload.pk, master, -15, attempt=0)
    workload.refresh_from_db()
    assert workload.state == State.RECOVERING
    start_all(workload)
    assert workload.state == State.RUNNING
    rec.refresh_from_db()
    assert rec.step == RecoveryStep.DONE and rec.finished_at is not None


def test_a_triggered_save_that_times_out_falls_back_to_the_newest_checkpoint(triggered):
    workload, (master, lost) = triggered
    spare_in_pod_of(lost)
    saved(workload, master, step=100, ago_s=600)
    record_fault(lost, XID_79)
    rec = Recovery.objects.get(workload=workload)
    Recovery.objects.filter(pk=rec.pk).update(save_deadline=timezone.now())
    recovery.advance(rec.pk)
    rec.refresh_from_db()
    assert rec.resume_step == 100 and "timed out" in rec.detail
    assert 599 <= rec.lost_s <= 610  # the ten minutes since step 100 are redone


def test_a_refused_triggered_save_falls_back_at_once(triggered):
    workload, (master, lost) = triggered
    spare_in_pod_of(lost)
    saved(workload, master, step=100, ago_s=60)
    record_fault(lost, XID_79)
    command = NodeCommand.objects.get(workload=workload)
    record_acks([(master, str(command.pk), False, "checkpoint: no space left")])
    rec = Recovery.objects.get(workload=workload)
    recovery.advance(rec.pk)
    rec.refresh_from_db()
    assert rec.step == RecoveryStep.RESTARTING and rec.resume_step == 100
    assert "failed" in rec.detail
    assert command.__class__.objects.get(pk=command.pk).state == CommandState.FAILED


def test_without_a_triggered_policy_it_resumes_from_the_newest_checkpoint(acme_llm):
    workload, (master, lost) = running_job(acme_llm, checkpoint_policy="async")
    spare_in_pod_of(lost)
    saved(workload, master, step=40, ago_s=300)
    record_fault(lost, XID_79)
    assert not NodeCommand.objects.exists()
    rec = Recovery.objects.get(workload=workload)
    assert rec.step == RecoveryStep.REPLACING
    recovery.advance(rec.pk)
    rec.refresh_from_db()
    assert (rec.outcome, rec.resume_step) == (RecoveryOutcome.SPARE, 40)


def test_no_spare_an_elastic_job_shrinks_onto_its_healthy_nodes(acme_llm):
    workload, (master, lost) = running_job(acme_llm, min_gpus=8, max_gpus=16)
    record_fault(lost, XID_79)
    recovery.advance(Recovery.objects.get(workload=workload).pk)
    rec = Recovery.objects.get(workload=workload)
    assert rec.outcome == RecoveryOutcome.SHRUNK
    assert set(workload.allocations.values_list("node_id", "node_rank")) == {(master, 0)}
    assert UsageRecord.objects.get(workload=workload).gpus == 8  # the lost node's GPU-hours


def test_no_spare_and_not_elastic_it_is_requeued_at_the_head_of_its_queue(acme_llm):
    workload, (master, lost) = running_job(acme_llm)
    an_hour_ago = timezone.now() - timedelta(hours=1)
    earlier = make_workload(acme_llm, "waiting-longer", gpus=56, submitted_at=an_hour_ago)
    record_fault(lost, XID_79)
    recovery.advance(Recovery.objects.get(workload=workload).pk)
    workload.refresh_from_db()
    assert workload.state == State.PENDING and workload.head_of_queue
    assert not workload.allocations.exists()
    assert Recovery.objects.get(workload=workload).outcome == RecoveryOutcome.REQUEUED
    first = min(build_snapshot().workloads, key=lambda w: w.submitted_at)
    assert first.id == workload.pk and first.id != earlier.pk
    scheduling_cycle()
    workload.refresh_from_db()
    assert workload.state == State.ADMITTED and not workload.head_of_queue
    earlier.refresh_from_db()
    assert earlier.state == State.PENDING  # 16 + 56 would pass the queue's 64
    assert lost not in set(workload.allocations.values_list("node_id", flat=True))


def test_a_fault_that_only_kills_the_process_restarts_in_place(acme_llm):
    workload, nodes = running_job(acme_llm)
    record_fault(nodes[1], faults.lookup("xid-13"))
    assert Node.objects.get(pk=nodes[1]).health == Health.READY
    recovery.advance(Recovery.objects.get(workload=workload).pk)
    workload.refresh_from_db()
    assert Recovery.objects.get(workload=workload).outcome == RecoveryOutcome.IN_PLACE
    assert sorted(set(workload.allocations.values_list("node_id", flat=True))) == sorted(nodes)
    assert workload.attempt == 1 and not workload.allocations.filter(started=True).exists()


def test_a_job_cancelled_while_recovering_ends_its_recovery(acme_llm):
    workload, (_, lost) = running_job(acme_llm)
    record_fault(lost, XID_79)
    lifecycle.cancel(workload)
    recovery.advance(Recovery.objects.get(workload=workload).pk)
    rec = Recovery.objects.get(workload=workload)
    assert (rec.step, rec.outcome) == (RecoveryStep.DONE, RecoveryOutcome.ENDED)
    assert not Allocation.objects.exists()


def test_a_step_runs_once_when_two_workers_race(acme_llm):
    workload, (master, lost) = running_job(acme_llm)
    spare_in_pod_of(lost)
    record_fault(lost, XID_79)
    rec = Recovery.objects.get(workload=workload)
    stale_copy = Recovery.objects.get(pk=rec.pk)
    recovery.advance(rec.pk)
    recovery._replacing(stale_copy)  # the slower worker, with what it read before
    workload.refresh_from_db()
    assert workload.attempt == 1 and workload.allocations.count() == 16


def test_a_recovering_job_is_never_a_preemption_victim(acme_llm):
    workload, (_, lost) = running_job(acme_llm, priority=0)
    record_fault(lost, XID_79)
    mine = next(w for w in build_snapshot().workloads if w.id == workload.pk)
    assert mine.priority > 10**6


@pytest.mark.parametrize("code", sorted(faults.CATALOGUE), ids=lambda code: code)
def test_each_fault_kind_does_what_the_catalogue_says(acme_llm, code):
    kind = faults.lookup(code)
    workload, nodes = running_job(acme_llm, gpus=8)
    record_fault(nodes[0], kind)
    workload.refresh_from_db()
    node = Node.objects.get(pk=nodes[0])
    if kind.action >= faults.Action.REBOOT_NODE or code == "heartbeat-loss":
        assert node.health == Health.DOWN
    elif kind.action == faults.Action.DRAIN_NODE:
        assert node.health == Health.DRAINING
    else:
        assert node.health == (Health.CORDONED if kind.cordon else Health.READY)
    assert (workload.state == State.RECOVERING) == kind.kills_job
    if kind.kills_job:
        rec = Recovery.objects.get(workload=workload)
        assert rec.lost_nodes == ([nodes[0]] if faults.leaves_node(kind) else [])


def test_the_checkpoint_registry_keeps_the_newest_and_never_resumes_from_a_failed_one(
    acme_llm, settings
):
    settings.WANKA = {**settings.WANKA, "CHECKPOINTS_KEPT": 2}
    workload, (master, _) = running_job(acme_llm)
    for step in (10, 20, 30):
        saved(workload, master, step=step)
    saved(workload, master, step=40, status="failed")
    statuses = dict(workload.checkpoints.values_list("step", "status"))
    assert statuses == {10: "pruned", 20: "complete", 30: "complete", 40: "failed"}
    rec_point = recovery._resume_point(
        workload, Recovery(workload=workload, started_at=timezone.now())
    )
    assert rec_point["resume_step"] == 30


def test_a_restart_that_crashes_before_every_node_runs_it_fails_the_job(acme_llm):

    workload, (master, lost) = running_job(acme_llm)
    spare_in_pod_of(lost)
    record_fault(lost, faults.lookup("xid-79"))
    recovery.advance(workload.recoveries.get().pk)
    workload.refresh_from_db()
    assert workload.recoveries.get().step == RecoveryStep.RESTARTING and workload.attempt == 1
    lifecycle.finish(workload.pk, master, 1, attempt=1)  # the new attempt dies at once
    workload.refresh_from_db()
    assert workload.state == State.FAILED and not workload.allocations.exists()
    assert "its restart exited with code 1" in workload.events.last().reason


@pytest.mark.parametrize(
    ("distributed_optimizer", "step"),
    [(False, RecoveryStep.SAVING), (True, RecoveryStep.REPLACING)],
    ids=["replicas hold whole copies: the healthy ones save", "sharded state: no save to try"],
)
def test_the_parallel_plan_decides_whether_a_triggered_save_can_be_made(
    acme_llm, distributed_optimizer, step
):
    """gpt3-1.3b on 16 GPUs is 16 one-GPU replicas, 8 on each node: a lost node leaves 8
    whole ones, unless the optimizer state is sharded across all 16. (A triggered job is
    planned with whole replicas when they fit, as here.)"""
    workload, (_, lost) = running_job(
        acme_llm,
        checkpoint_policy="triggered",
        model_spec=parallel.spec("gpt3-1.3b"),
        global_batch=512,
    )
    record = workload.parallel_plans.get()
    plan = record.plan
    assert (plan["tp"], plan["pp"], plan["dp"], plan["distributed_optimizer"]) == (1, 1, 16, False)
    record.plan["distributed_optimizer"] = distributed_optimizer
    record.save()
    record_fault(lost, XID_79, gpu_index=3)
    assert Recovery.objects.get(workload=workload).step == step


def test_a_lost_node_holding_a_stage_of_every_replica_leaves_nothing_to_save(acme_llm):
    """TP 2 x PP 8 x DP 4 on 8 nodes: ranks run TP, then DP, then PP, so each node holds one
    pipeline stage of all four replicas, and losing it leaves no whole replica."""
    workload, (_, lost, *_) = running_job(
        acme_llm, gpus=64, checkpoint_policy="triggered",
        model_spec=parallel.spec("gpt3-13b"), global_batch=512,
    )  # fmt: skip
    record = workload.parallel_plans.get()
    record.plan.update(tp=2, pp=8, dp=4, distributed_optimizer=False)
    record.save()
    record_fault(lost, XID_79, gpu_index=3)
    assert Recovery.objects.get(workload=workload).step == RecoveryStep.REPLACING


def test_a_node_lost_while_the_job_restarts_starts_a_recovery_without_it(acme_llm):
    """XID 79 on one node: the job restarts on a spare. Before it runs again, its other node
    dies too (heartbeat loss): the restart is given up and it recovers again, on another spare,
    instead of waiting for ever on a node that will never start it."""
    workload, (master, lost) = running_job(acme_llm)
    first_spare = spare_in_pod_of(lost)
    record_fault(lost, XID_79)
    recovery.advance(workload.recoveries.get().pk)
    assert workload.recoveries.get().step == RecoveryStep.RESTARTING
    pod = Node.objects.get(pk=master).leaf.pod
    free = Node.objects.filter(leaf__pod=pod, allocations__isnull=True, health=Health.READY)
    second_spare = free.exclude(pk=lost).first()
    Node.objects.filter(pk=second_spare.pk).update(spare=True, connected=True)
    record_fault(master, faults.lookup("heartbeat-loss"))
    old, new = workload.recoveries.order_by("id")
    old.refresh_from_db()
    assert old.step == RecoveryStep.DONE and old.detail.startswith("given up: heartbeat-loss")
    assert (new.step, new.lost_nodes) == (RecoveryStep.REPLACING, [master])
    recovery.advance(new.pk)
    workload.refresh_from_db()
    nodes = set(workload.allocations.values_list("node_id", flat=True))
    assert nodes == {first_spare.pk, second_spare.pk} and workload.attempt == 2
    start_all(workload)
    assert workload.state == State.RUNNING
    assert not workload.recoveries.exclude(step=RecoveryStep.DONE).exists()


def test_a_node_lost_while_the_job_saves_joins_the_lost_ones(acme_llm):
    workload, (master, lost, third) = running_job(acme_llm, gpus=24, checkpoint_policy="triggered")
    record_fault(lost, XID_79)
    current = workload.recoveries.get()
    assert current.step == RecoveryStep.SAVING
    third = next(
        n for n in workload.allocations.values_list("node_id", flat=True) if n not in (master, lost)
    )
    record_fault(third, faults.lookup("heartbeat-loss"))
    current.refresh_from_db()
    assert sorted(current.lost_nodes) == sorted([lost, third]) and workload.recoveries.count() == 1


def test_a_step_rolled_back_to_break_a_deadlock_is_tried_again_at_once(acme_llm, monkeypatch):
    """PostgreSQL aborts one of two deadlocked transactions and asks for a retry: the task
    tries the step again at once (here run eagerly) rather than leaving the job to wait for
    `resume_recoveries`. (The deadlock is raised by hand: two real ones cannot be timed here.)"""
    from django.db import OperationalError
    from psycopg.errors import DeadlockDetected

    from portal.workloads.tasks import advance_recovery

    workload, (master, lost) = running_job(acme_llm)
    spare = spare_in_pod_of(lost)
    record_fault(lost, XID_79)
    rec = Recovery.objects.get(workload=workload)
    calls, advance = [], recovery.advance

    def deadlocked_once(recovery_id):
        calls.append(recovery_id)
        if len(calls) == 1:
            raise OperationalError("deadlock detected") from DeadlockDetected()
        return advance(recovery_id)

    monkeypatch.setattr(recovery, "advance", deadlocked_once)
    advance_recovery.apply(args=(rec.pk,))
    assert len(calls) >= 2
    workload.refresh_from_db()
    assert workload.attempt == 1
    assert set(workload.allocations.values_list("node_id", flat=True)) == {master, spare.pk}
