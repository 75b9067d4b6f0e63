"""Automatic recovery of a workload a fault killed, as a state machine on a `Recovery` row.

    fault -> [saving: the healthy ranks save from memory, acks awaited until a deadline]
          -> replacing: lost nodes swapped for hot spares of the same pod (else data center),
             else the job shrinks if elastic, else it is requeued at the head of its queue
          -> restarting: every node runs the new attempt from the newest complete checkpoint
          -> done

Each step is one transaction that moves the row on with a conditional update, so a step runs
once even when two workers race, and a worker killed anywhere leaves the row where the next one
(`advance`, kicked by acks and by the `resume_recoveries` sweeper) picks it up. No GPU is leaked
or booked twice: allocations change only inside those transactions, under the workload's lock.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.cluster.models import Node
from portal.core.live import OPS_GROUP, publish, publish_tenant
from portal.core.triggers import kick_recovery
from portal.workloads import allocations, checkpoints, parallel, words
from portal.workloads.checkpoints import Answer
from portal.workloads.choices import (
    CheckpointStatus,
    RecoveryOutcome,
    RecoveryStep,
    State,
)
from portal.workloads.desired import nodes_changed
from portal.workloads.models import Allocation, Recovery, Workload, note, transition
from portal.workloads.reasons import readable
from scheduler import checkpointing, faults, interruptions
from scheduler.checkpointing import PolicyKind
from scheduler.interruptions import Cause
from scheduler.words import AND_SO

log = logging.getLogger(__name__)

# Recoverable states: a workload holding GPUs that is not already stopping or recovering.
RECOVERABLE = (State.ADMITTED, State.STARTING, State.RUNNING)
# A recovery no worker has touched for this long is picked up again by the sweeper.
STALE_AFTER = timedelta(seconds=10)


def start(
    workload: Workload, fault, kind: faults.FaultKind, leave_node: bool = False
) -> Recovery | None:
    """Begin recovering `workload` from `fault` (inside the fault's transaction). The job
    leaves the fault's node when the catalogue says so, or when `leave_node` (a straggler
    whose queue replaces them)."""
    workload = Workload.objects.select_for_update().get(pk=workload.pk)
    if workload.state == State.RECOVERING:
        return _hit_while_recovering(workload, fault, kind, leave_node)
    if workload.state not in RECOVERABLE:
        return None
    nodes = list(workload.allocations.values_list("node_id", flat=True).distinct())
    lost = [fault.node_id] if leave_node or faults.leaves_node(kind) else []
    said = words.FAULT_ON.format(code=kind.code, node=fault.node, title=kind.title)
    transition(workload, State.RECOVERING, reason=said)
    cause = Cause.DRAIN if kind.code == "drain" else Cause.FAULT
    savers = interruptions.savers(nodes, lost, None if cause is Cause.DRAIN else kind)
    save = savers and interruptions.save_first(
        cause,
        PolicyKind(workload.checkpoint_policy),
        running=True,
        fault=kind,
        nodes=len(nodes),
        **_replicas(workload, len(nodes)),
    )
    if save:
        grace = interruptions.grace_s(
            cause, _preemption_grace_s(workload), settings.WANKA["TRIGGERED_SAVE_TIMEOUT_S"]
        )
        recovery = Recovery.objects.create(
            workload=workload,
            fault=fault,
            step=RecoveryStep.SAVING,
            lost_nodes=lost,
            save_deadline=timezone.now() + timedelta(seconds=grace),
        )
        checkpoints.ask(workload, save, f"fault {fault.pk}", savers)
    else:
        recovery = Recovery.objects.create(
            workload=workload, fault=fault, lost_nodes=lost, step=RecoveryStep.REPLACING
        )
    _announce(recovery)
    kick_recovery(recovery.pk)
    return recovery


def _preemption_grace_s(workload: Workload) -> int:
    grace = workload.preemption_grace_s
    return workload.queue.preemption_grace_s if grace is None else grace


def save_then_shrink(workload: Workload, released, reason: str) -> Recovery:
    """A shrink that saves first (inside the plan's transaction, the workload locked): every
    node is asked for a save within the job's preemption grace; once the save is in (or
    refused, or late) the GPUs `released` go back and the rest restart from the newest save."""
    grace = interruptions.grace_s(Cause.SHRINK, _preemption_grace_s(workload), 0)
    transition(workload, State.RECOVERING, reason=reason)
    recovery = Recovery.objects.create(
        workload=workload,
        step=RecoveryStep.SAVING,
        detail=reason[:500],
        release=[[node_id, list(indices)] for node_id, indices in released],
        save_deadline=timezone.now() + timedelta(seconds=grace),
    )
    checkpoints.ask(workload, "requested", f"resize: {reason}")
    _announce(recovery)
    kick_recovery(recovery.pk)
    return recovery


def _hit_while_recovering(
    workload: Workload, fault, kind: faults.FaultKind, leave_node: bool
) -> Recovery | None:
    """A node of a job already recovering is lost: while it saves or before its nodes are
    replaced, the node joins the lost ones; once its restart is pushed, that restart is given
    up (the node will never run it) and the job recovers again without the node. A fault that
    only kills processes changes nothing: the restart starts them again."""
    if not (leave_node or faults.leaves_node(kind)):
        return None
    current = workload.recoveries.exclude(step=RecoveryStep.DONE).order_by("-id").first()
    if current is None:
        return None
    if current.step != RecoveryStep.RESTARTING:
        if fault.node_id not in current.lost_nodes:
            current.lost_nodes = [*current.lost_nodes, fault.node_id]
            current.save(update_fields=["lost_nodes"])
        return current
    given_up = words.GIVEN_UP.format(code=kind.code, node=fault.node)
    _move(current, RecoveryStep.DONE, detail=given_up[:500])
    note(workload, words.HIT_WHILE_RESTARTING.format(code=kind.code, node=fault.node))
    recovery = Recovery.objects.create(
        workload=workload, fault=fault, lost_nodes=[fault.node_id], step=RecoveryStep.REPLACING
    )
    _announce(recovery)
    kick_recovery(recovery.pk)
    return recovery


def _replicas(workload: Workload, nodes: int) -> dict:
    """How the job's state is held, from its parallel plan; without one, one full replica per
    node is assumed. In the plan's rank order (TP innermost, then DP, then PP) a node holds one
    pipeline stage of as many replicas as its GPUs hold TP groups, so a lost node takes that
    many replicas, or all of them when one stage of every replica fits on it."""
    record = workload.parallel_plans.last()
    if record is None or not record.plan:
        return {"data_parallel": nodes}
    plan = record.plan
    touched = min(plan["dp"], max(1, record.gpus // nodes // plan["tp"]))
    return {
        "data_parallel": plan["dp"],
        "replicas_per_node": touched,
        "sharded": plan["distributed_optimizer"],
    }


def advance(recovery_id: int):
    """Take the recovery as far as it can go now. When it waits for a save, the moment its
    grace ends (the answers wake it sooner, `checkpoints.answered`); else None."""
    while True:
        recovery = Recovery.objects.select_related("workload", "fault").get(pk=recovery_id)
        step = _STEPS.get(recovery.step)
        if step is None:
            return None
        outcome = step(recovery)
        if outcome is _WAIT:
            Recovery.objects.filter(pk=recovery_id).update(updated_at=timezone.now())
            return recovery.save_deadline
        if outcome is _IDLE:
            return None


_WAIT, _IDLE, _MOVED = object(), object(), object()


def _move(recovery: Recovery, to: RecoveryStep, **fields) -> bool:
    """Claim the move from the recovery's current step; False when another worker did it."""
    if to == RecoveryStep.DONE:
        fields.setdefault("finished_at", timezone.now())
    moved = bool(
        Recovery.objects.filter(pk=recovery.pk, step=recovery.step).update(
            step=to, updated_at=timezone.now(), **fields
        )
    )
    if moved:
        for name, value in fields.items():
            setattr(recovery, name, value)
        recovery.step = to
        _announce(recovery)
    return moved


def _announce(recovery: Recovery) -> None:
    """Tell the job's tenant and the operators where the recovery stands."""
    workload = recovery.workload
    payload = {
        "id": recovery.pk,
        "workload_id": workload.pk,
        "workload": workload.name,
        "step": recovery.step,
        "outcome": recovery.outcome,
        "detail": recovery.detail,
        "resume_step": recovery.resume_step,
    }
    mine = {**payload, "detail": readable(recovery.detail, workload)}
    publish_tenant(workload.tenant_id, "recovery", mine)
    publish(OPS_GROUP, "recovery", payload)


def _saving(recovery: Recovery):
    """Wait for the save, then resume from it, or from the newest complete checkpoint when a
    rank refused or the grace ran out."""
    answer = checkpoints.answer(recovery.workload_id, recovery.started_at)
    expired = timezone.now() >= recovery.save_deadline
    if answer is Answer.WAITING and not expired:
        return _WAIT
    resize = bool(recovery.release)
    if answer is Answer.SAVED:
        why = words.SAVED_BEFORE_RESIZE if resize else words.SAVED_FROM_MEMORY
    elif answer is Answer.REFUSED:
        why = words.SAVE_FAILED if resize else words.TRIGGERED_FAILED
    else:
        waited = (recovery.save_deadline - recovery.started_at).total_seconds()
        late = words.SAVE_LATE if resize else words.TRIGGERED_LATE
        why = late.format(seconds=f"{waited:.0f}")
    if resize:
        why = AND_SO.format(reason=recovery.detail, then=why)  # keep why it shrinks
    with transaction.atomic():
        _move(recovery, RecoveryStep.REPLACING, detail=why[:500])
    return _MOVED


def _replacing(recovery: Recovery):
    """Swap the lost nodes for spares (or shrink, or requeue) and push the restart: one
    transaction under the workload's lock."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=recovery.workload_id)
        if Recovery.objects.filter(pk=recovery.pk, step=RecoveryStep.REPLACING).count() == 0:
            return _MOVED  # another worker did this step
        resume = _resume_point(workload, recovery)
        if workload.state != State.RECOVERING:
            _move(recovery, RecoveryStep.DONE, outcome=RecoveryOutcome.ENDED, **resume)
            return _MOVED
        recovery.refresh_from_db(fields=["lost_nodes"])  # a node lost since it was read
        touched = set(workload.allocations.values_list("node_id", flat=True))
        if recovery.release:  # a shrink that saved first gives its GPUs back now
            allocations.give_back(workload, recovery.release)
            allocations.renumber(workload)
        lost = Allocation.objects.filter(workload=workload, node_id__in=recovery.lost_nodes)
        lost_nodes = sorted(set(lost.values_list("node_id", flat=True)))
        spares = _spares_for(workload, lost_nodes)
        outcome = RecoveryOutcome(
            interruptions.where(
                lost.count(), workload.allocations.count(), workload.min_gpus, spares is not None
            )
        )
        if outcome == RecoveryOutcome.IN_PLACE and recovery.release:
            outcome = RecoveryOutcome.SHRUNK
        elif outcome == RecoveryOutcome.SPARE:
            _move_to_spares(workload, spares)
        elif outcome == RecoveryOutcome.SHRUNK:
            allocations.book(workload, lost)
            lost.delete()
            allocations.renumber(workload)
        elif outcome == RecoveryOutcome.REQUEUED:
            nodes_changed(allocations.release(workload))
            transition(
                workload,
                State.PENDING,
                reason=words.REQUEUED_AFTER_FAULT,
                admitted_at=None,
                started_at=None,
                head_of_queue=True,
            )
            _move(recovery, RecoveryStep.DONE, outcome=RecoveryOutcome.REQUEUED, **resume)
            return _MOVED
        touched |= set(workload.allocations.values_list("node_id", flat=True))
        gpus = workload.allocations.count()
        why = None
        if recovery.release:
            why = words.SHRUNK_TO.format(gpus=gpus, why=recovery.detail)
        elif outcome == RecoveryOutcome.SHRUNK:
            why = words.RECOVERED_ONTO.format(gpus=gpus)
        new_attempt(workload, why)
        nodes_changed(touched)
        note(workload, _restart_note(outcome, resume))
        _move(
            recovery,
            RecoveryStep.RESTARTING,
            outcome=outcome,
            restart_pushed_at=timezone.now(),
            **resume,
        )
    return _MOVED


def _restart_note(outcome: RecoveryOutcome, resume: dict) -> str:
    said = words.OUTCOMES[RecoveryOutcome(outcome)]
    if resume["resume_step"] is None:
        return words.FROM_START.format(outcome=said)
    return words.FROM_STEP.format(outcome=said, step=resume["resume_step"])


def _restarting(recovery: Recovery):
    """Nothing to do but notice the end: `restarted` closes the recovery when every node runs
    the new attempt; this catches a workload that ended meanwhile."""
    state = Workload.objects.filter(pk=recovery.workload_id).values_list("state", flat=True)[0]
    if state != State.RECOVERING:
        _move(recovery, RecoveryStep.DONE)
        return _MOVED
    return _IDLE


_STEPS = {
    RecoveryStep.SAVING: _saving,
    RecoveryStep.REPLACING: _replacing,
    RecoveryStep.RESTARTING: _restarting,
}


def new_attempt(workload: Workload, replan_why: str | None = None) -> None:
    """Restart the workload (locked by the caller) as a new attempt on the GPUs it now holds:
    every node's agent stops the old run and starts the new one from the newest save. A new
    world (`replan_why` says why it changed) gets a new parallel plan."""
    workload.allocations.update(started=False, exit_code=None)
    Workload.objects.filter(pk=workload.pk).update(attempt=F("attempt") + 1)
    if replan_why:
        gpus = workload.allocations.count()
        parallel.replan(workload, gpus, workload.attempt + 1, replan_why)


def resized(
    workload: Workload, reason: str, lost_s: float, now, outcome=RecoveryOutcome.SHRUNK, left=()
) -> Recovery:
    """A shrink or a grow restarts the workload (inside its transaction): a recovery already
    restarting, so that it closes like any other once every node runs the new attempt. `left`:
    the nodes a move leaves (what a pod's defragmentation counts its moves by)."""
    latest = checkpointing.latest_complete(
        workload.checkpoints.filter(status=CheckpointStatus.COMPLETE)
    )
    return Recovery.objects.create(
        workload=workload,
        step=RecoveryStep.RESTARTING,
        outcome=outcome,
        detail=reason[:500],
        lost_nodes=sorted(left),
        resume_step=latest.step if latest else None,
        resume_location=latest.location if latest else "",
        lost_s=lost_s,
        restart_pushed_at=now,
    )


def restarted(workload: Workload) -> None:
    """Every node runs the new attempt (inside mark_started_many's transaction): back to RUNNING."""
    recovery = Recovery.objects.filter(workload=workload, step=RecoveryStep.RESTARTING).first()
    transition(workload, State.RUNNING, reason=words.RECOVERED)
    if recovery is not None:
        _move(recovery, RecoveryStep.DONE)


def _resume_point(workload: Workload, recovery: Recovery) -> dict:
    """Where the workload restarts from, and the work it loses: the time from that save to
    the fault (nothing when the save came after the fault, as a triggered one does), or the
    time it stood still before the fault when that is longer (a hang's, set by its
    detector)."""
    latest = checkpointing.latest_complete(
        workload.checkpoints.filter(status=CheckpointStatus.COMPLETE)
    )
    fault_at = recovery.fault.occurred_at if recovery.fault else recovery.started_at
    since = latest.created_at if latest else workload.started_at
    lost_s = max(0.0, (fault_at - since).total_seconds()) if since else 0.0
    return {
        "resume_step": latest.step if latest else None,
        "resume_location": latest.location if latest else "",
        "lost_s": max(lost_s, recovery.lost_s),
    }


def _spares_for(workload: Workload, lost_nodes: list[int]) -> list[tuple[Node, Node]] | None:
    """A hot spare for each lost node, in the same pod, else the same data center, as
    (lost node, spare) pairs; None unless every lost node has one."""
    pairs: list[tuple[Node, Node]] = []
    for node in Node.objects.filter(id__in=lost_nodes).select_related("leaf__pod"):
        spare = _spare_near(workload, node, exclude=[s.pk for _, s in pairs])
        if spare is None:
            return None
        pairs.append((node, spare))
    return pairs


def _move_to_spares(workload: Workload, pairs: list[tuple[Node, Node]]) -> None:
    """Move the workload's part on each lost node to its spare; the spares leave the pool."""
    for node, spare in pairs:
        moved = Allocation.objects.filter(workload=workload, node=node)
        rows = list(moved.values_list("node_rank", "gpu_index", "slices"))
        allocations.book(workload, moved)  # its GPU-hours there; the spare's start now
        moved.delete()
        allocations.create(
            [
                Allocation(
                    workload=workload, node=spare, node_rank=rank, gpu_index=index, slices=slices
                )
                for rank, index, slices in rows
            ]
        )
    Node.objects.filter(id__in=[spare.pk for _, spare in pairs]).update(spare=False)


def can_move(workload: Workload, node: Node) -> bool:
    """Whether the workload's part on `node` could move off it now without requeueing the
    job: a hot spare near it, or an elastic job that would keep its minimum without it."""
    held = workload.allocations.count()
    lost = held - workload.allocations.exclude(node=node).count()
    spare = _spare_near(workload, node, exclude=[]) is not None
    outcome = interruptions.where(lost, held, workload.min_gpus, spare)
    return outcome != interruptions.Restart.REQUEUED


def _spare_near(workload: Workload, node: Node, exclude: list[int]) -> Node | None:
    spares = (
        Node.objects.select_for_update()
        .ready_spares()
        .filter(gpu_model_id=workload.gpu_model_id, gpu_count__gte=node.gpu_count)
        .exclude(pk__in=exclude)
        .order_by("name")
    )
    pod = node.leaf.pod
    return (
        spares.filter(leaf__pod=pod).first()
        or spares.filter(leaf__pod__datacenter_id=pod.datacenter_id).first()
    )


def stale() -> list[int]:
    """Recoveries no worker is moving: their worker died, or its task was lost. One waiting
    for a save within its grace is not: the answers or its grace's end wake it."""
    now = timezone.now()
    moving = [RecoveryStep.SAVING, RecoveryStep.REPLACING, RecoveryStep.RESTARTING]
    return list(
        Recovery.objects.filter(step__in=moving, updated_at__lt=now - STALE_AFTER)
        .exclude(step=RecoveryStep.SAVING, save_deadline__gt=now)  # it waits for its save
        .values_list("pk", flat=True)
    )
