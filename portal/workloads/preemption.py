"""Graceful preemption: a victim saves, then stops, and gives its GPUs back only when its
processes are gone.

    plan names a victim -> PREEMPTING, saving: its nodes are asked for a checkpoint (when its
        policy saves), within its grace (per queue, overridable per job)
    -> stopping: the acks came, one was refused, or the grace ran out; its nodes' desired state
        no longer lists it, so the agents stop its processes
    -> every node reported them gone (or a hard deadline passed, and the nodes that did not
        answer are cordoned as suspect): its GPUs are released, the work since its last save
        is booked as lost, and it is requeued (PENDING), to resume from that save

Its claimant waits meanwhile: the engine counts a preempting workload's GPUs as releasing and
holds them for the claimant, which starts in the cycle after they are free. Each step is one
transaction under the workload's lock; `advance` moves every preemption that can move, kicked
by acks and by beat every two seconds; exits move it at once (`exited`).
"""

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.cluster.choices import HEALTH_MOVES, Health
from portal.cluster.models import Node
from portal.workloads import allocations, checkpoints, words
from portal.workloads.checkpoints import Answer, work_lost
from portal.workloads.choices import State
from portal.workloads.desired import nodes_changed
from portal.workloads.models import Allocation, Workload, WorkloadEvent, transition
from scheduler import interruptions
from scheduler.checkpointing import PolicyKind
from scheduler.interruptions import Cause

log = logging.getLogger(__name__)

# After the stop is asked for, how long its processes may take to exit before the nodes that
# still run them are taken for suspect and the GPUs given back anyway.
STOP_GRACE_S = 30


def begin(
    workload: Workload, reason: str, deadline_s: int | None = None, save: bool = True
) -> set[int]:
    """The plan (or an operator) preempts `workload`, inside its transaction: it saves first
    when its policy saves, its processes run and `save` allows, else it is told to stop at
    once; within its grace, cut to `deadline_s` (the claimant's queue's reclaim deadline).
    Returns the nodes whose desired state changed, for the caller's one `nodes_changed`."""
    workload = Workload.objects.select_for_update().get(pk=workload.pk)
    policy = PolicyKind(workload.checkpoint_policy)
    saves = save and interruptions.save_first(
        Cause.PREEMPT, policy, running=workload.state == State.RUNNING
    )
    now = timezone.now()
    transition(workload, State.PREEMPTING, reason=reason, preempted_at=now)
    if not saves:
        return _stop(workload, now)
    grace = workload.preemption_grace_s
    grace = workload.queue.preemption_grace_s if grace is None else grace
    grace = interruptions.grace_s(Cause.PREEMPT, grace, 0, deadline_s)
    deadline = now + timedelta(seconds=grace)
    Workload.objects.filter(pk=workload.pk).update(preempt_deadline=deadline)
    checkpoints.ask(workload, saves, f"preempted: {reason}")
    return set()


def advance() -> list[int]:
    """Move on every preemption that can move now; the ids of those that moved."""
    moved = []
    for workload_id in Workload.objects.filter(state=State.PREEMPTING).values_list("pk", flat=True):
        with transaction.atomic():
            workload = Workload.objects.select_for_update().get(pk=workload_id)
            if workload.state == State.PREEMPTING and _step(workload):
                moved.append(workload_id)
    return moved


def _step(workload: Workload) -> bool:
    now = timezone.now()
    if workload.stop_requested_at is None:
        waiting = checkpoints.answer(workload.pk, workload.preempted_at) is Answer.WAITING
        if waiting and now < workload.preempt_deadline:
            return False  # a refusal, like the deadline, stops it at once
        nodes_changed(_stop(workload, now))
        return True
    if not _running(workload).exists():
        _release(workload)
        return True
    if now < workload.preempt_deadline:
        return False
    _suspect(workload)
    _release(workload)
    return True


def exited(workload_id: int, node_id: int, exit_code: int) -> None:
    """The workload's processes on `node_id` are gone (an agent's report): once every node's
    are, after the stop, its GPUs go back at once."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().filter(pk=workload_id).first()
        if workload is None or workload.state != State.PREEMPTING:
            return
        Allocation.objects.filter(workload=workload, node_id=node_id).update(exit_code=exit_code)
        if workload.stop_requested_at is not None:
            _step(workload)


def _running(workload: Workload):
    """The workload's GPUs whose processes started and have not been reported gone (a node
    that never started them has none to stop: its agent stops what it no longer lists before
    it starts anything else)."""
    return workload.allocations.filter(started=True, exit_code__isnull=True)


def _stop(workload: Workload, now) -> set[int]:
    """Take the workload out of its nodes' desired state, so their agents stop its processes;
    returns those nodes, for the caller's `nodes_changed`."""
    deadline = now + timedelta(seconds=STOP_GRACE_S)
    Workload.objects.filter(pk=workload.pk).update(stop_requested_at=now, preempt_deadline=deadline)
    workload.stop_requested_at, workload.preempt_deadline = now, deadline
    return set(workload.allocations.values_list("node_id", flat=True))


def _suspect(workload: Workload) -> None:
    """Cordon the nodes that never reported the workload's processes gone: they may still run
    them, so no new work goes there until an operator has looked."""
    silent = _running(workload).values_list("node_id", flat=True)
    for node in Node.objects.select_for_update().filter(pk__in=set(silent)):
        if Health.CORDONED in HEALTH_MOVES[Health(node.health)]:
            said = words.DID_NOT_STOP.format(workload=workload.pk, seconds=STOP_GRACE_S)
            node.set_health(Health.CORDONED, said)
    log.warning("preemption of workload %s: processes still up after the stop deadline", workload)


def _release(workload: Workload) -> None:
    """Give the GPUs back, book the work lost since the last save, and requeue."""
    lost = work_lost(workload, workload.preempted_at)
    if lost:
        WorkloadEvent.objects.filter(
            workload=workload, to_state=State.PREEMPTING, at__gte=workload.preempted_at
        ).update(lost_s=lost)
    nodes_changed(allocations.release(workload))
    transition(
        workload,
        State.PENDING,
        reason=(
            words.REQUEUED_LOST.format(seconds=f"{lost:.0f}") if lost else words.REQUEUED_FROM_SAVE
        ),
        admitted_at=None,
        started_at=None,
        preempted_at=None,
        stop_requested_at=None,
        preempt_deadline=None,
    )
