"""What happens to a workload after submission: start, finish, cancel, stop, release its GPUs.

Agents report per node; these functions turn those reports into state transitions, under a row
lock on the workload so reports from a gang's nodes, the cycle and a user's cancel serialize.
"""

from collections import defaultdict

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from portal.cluster import streaks
from portal.cluster.commands import RESEND_WITHIN
from portal.core.live import publish_tenant
from portal.core.models import audit
from portal.core.triggers import trigger_cycle
from portal.workloads import allocations, checkpoints, preemption, recovery, words
from portal.workloads.checkpoints import Answer, work_lost
from portal.workloads.choices import RecoveryOutcome, RecoveryStep, State
from portal.workloads.desired import nodes_changed
from portal.workloads.models import Allocation, Workload, transition
from scheduler import interruptions
from scheduler.checkpointing import PolicyKind
from scheduler.interruptions import Cause


def submit(serializer, user) -> Workload:
    """Save a validated workload for the user's tenant and schedule it."""
    with transaction.atomic():
        workload = serializer.save(tenant=user.membership.tenant, submitted_by=user)
        submitted(workload, user)
    return workload


def submitted(workload: Workload, actor=None) -> None:
    """A new workload was saved (inside that transaction): audit it, show it, schedule it."""
    audit("workload.submitted", workload, actor=actor, tenant=workload.tenant)
    # Lists gain the row at once; version 0: before any event of it.
    event = {"id": workload.pk, "name": workload.name, "state": workload.state}
    publish_tenant(
        workload.tenant_id, "workload.state", {**event, "reason": "submitted", "version": 0}
    )
    trigger_cycle()


def _locked(workload_id: int, node_id: int) -> Workload | None:
    """The workload, locked, if it holds GPUs on `node_id`: a node speaks only for its own."""
    on_node = Allocation.objects.filter(workload=OuterRef("pk"), node_id=node_id)
    return Workload.objects.select_for_update().filter(Exists(on_node), pk=workload_id).first()


def _run_if_all_started(workload: Workload) -> None:
    if workload.state == State.RECOVERING:
        if not workload.allocations.filter(started=False).exists():
            recovery.restarted(workload)
        return
    if workload.state == State.ADMITTED:
        transition(workload, State.STARTING, reason=words.PROCESSES_STARTING)
    if workload.state == State.STARTING and not workload.allocations.filter(started=False).exists():
        nodes = workload.allocations.values("node").distinct().count()
        transition(workload, State.RUNNING, reason=words.RUNNING_ON.format(nodes=nodes))


def _current(workload: Workload | None, attempt: int) -> bool:
    """Whether a node's report is about the workload's current attempt (a report about the
    run a fault ended says nothing about the restart)."""
    return workload is not None and workload.attempt == attempt


def mark_started_many(reports: list[tuple[int, int, int]]) -> list[None]:
    """(workload, node, attempt) start reports: an agent runs its part of the workload; the
    gang is RUNNING once every node does (and a recovering one once every node runs the
    restarted attempt). A few queries per workload for any number of its nodes (the agents'
    server gathers them, `GroupCommit`), not three per node of a 1,000-node gang.

    The nodes' rows are marked without locking the workload, so reports gathered in other
    processes do not queue behind one lock; the batch that commits last sees every node started
    and makes the transition under the lock. A report the database lost halfway (its nodes
    marked, the transition not made) is whole again when the heartbeat repeats it."""
    nodes = defaultdict(set)
    for workload_id, node_id, attempt in reports:
        nodes[workload_id, attempt].add(node_id)
    workloads = Workload.objects.only("state", "attempt").in_bulk({w for w, _ in nodes})
    for (workload_id, attempt), node_ids in nodes.items():
        workload = workloads.get(workload_id)
        if not _startable(workload, attempt):
            continue
        held = Allocation.objects.filter(workload_id=workload_id, node_id__in=node_ids).update(
            started=True
        )
        left = Allocation.objects.filter(workload_id=workload_id, started=False).exists()
        if not held or (left and workload.state != State.ADMITTED):
            continue
        with transaction.atomic():
            workload = Workload.objects.select_for_update().filter(pk=workload_id).first()
            if _startable(workload, attempt):
                _run_if_all_started(workload)
    return [None] * len(reports)


def _ends(workload: Workload | None, attempt: int) -> bool:
    """Whether an exit report can end the workload: it is about the current attempt of a
    workload holding GPUs that is neither recovering nor preempting (they expect exits)."""
    return _current(workload, attempt) and workload.state in (
        State.ADMITTED,
        State.STARTING,
        State.RUNNING,
    )


def _restart_crashed(workload: Workload | None, attempt: int) -> bool:
    """Whether an exit is the restarted attempt's own: the workload recovers, and its new
    attempt was already pushed (the attempt is bumped only then), so a crash of it ends the
    job rather than waiting for start reports that will never come."""
    return (
        _current(workload, attempt)
        and workload.state == State.RECOVERING
        and workload.recoveries.filter(step=RecoveryStep.RESTARTING).exists()
    )


def _startable(workload: Workload | None, attempt: int) -> bool:
    """Whether a start report counts: about the current attempt of a workload being started.
    A recovering workload's attempt is bumped only when its restart is pushed: until then a
    report about its current attempt is its old run's, still running while it saves or waits
    for a spare, and must not end the recovery."""
    if not _current(workload, attempt):
        return False
    if workload.state == State.RECOVERING:
        return workload.recoveries.filter(step=RecoveryStep.RESTARTING).exists()
    return workload.state in (State.ADMITTED, State.STARTING)


def finish(workload_id: int, node_id: int, exit_code: int, attempt: int = 0) -> None:
    """The workload's processes on `node_id` exited. The first non-zero exit fails the gang;
    it succeeds once every node has exited 0 (ranks still saving or uploading are not cut off
    by the first one done). Exits while recovering are expected: the recovery restarts it; and
    while preempting: the preemption gives the GPUs back once every node's are gone."""
    # Looked at first without a lock: the exits of a 1,000-node gang's old attempt while it
    # recovers must not queue behind each other.
    peek = Workload.objects.filter(pk=workload_id).only("state", "attempt").first()
    if _current(peek, attempt) and peek.state == State.PREEMPTING:
        preemption.exited(workload_id, node_id, exit_code)
        return
    if not _ends(peek, attempt) and not (exit_code != 0 and _restart_crashed(peek, attempt)):
        return
    with transaction.atomic():
        workload = _locked(workload_id, node_id)
        if _current(workload, attempt) and workload.state == State.PREEMPTING:
            preemption.exited(workload_id, node_id, exit_code)  # preempted since the peek
            return
        if exit_code != 0 and _restart_crashed(workload, attempt):
            transaction.on_commit(lambda: streaks.job_ended(node_id, exit_code, workload.tenant_id))
            transition(workload, State.FAILED, reason=words.RESTART_EXITED.format(code=exit_code))
            nodes_changed(allocations.release(workload))
            return
        if not _ends(workload, attempt):
            return
        Allocation.objects.filter(workload=workload, node_id=node_id).update(
            started=True, exit_code=exit_code
        )
        transaction.on_commit(lambda: streaks.job_ended(node_id, exit_code, workload.tenant_id))
        if exit_code != 0:
            transition(
                workload,
                State.FAILED,
                reason=words.EXITED.format(code=exit_code),
                exit_code=exit_code,
            )
            release(workload)
            return
        _run_if_all_started(workload)
        if (
            workload.state == State.RUNNING
            and not workload.allocations.filter(exit_code__isnull=True).exists()
        ):
            transition(workload, State.SUCCEEDED, reason=words.EXITED.format(code=0), exit_code=0)
            release(workload)


def cancel(workload: Workload, actor=None, reason: str = words.CANCELLED_BY_USER) -> Workload:
    """Cancel a workload that has not finished; raises IllegalTransition when it has."""
    return _end(workload, State.CANCELLED, actor, reason)


def stop(workload: Workload, reason: str, actor=None) -> Workload:
    """Stop a service's replica that has not finished (scaled down, or its service stopped):
    ended as its service asked, not cancelled by a person. Raises IllegalTransition when it
    has finished."""
    return _end(workload, State.STOPPED, actor, reason)


def _end(workload: Workload, to: State, actor, reason: str) -> Workload:
    """End a workload at a person's or its service's word: free its GPUs, tell its nodes."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        transition(workload, to, reason=reason, actor=actor)
        release(workload)
        audit(f"workload.{to.value}", workload, actor=actor, tenant=workload.tenant, reason=reason)
    return workload


def shrink(workload: Workload, released, reason: str) -> set[int]:
    """Give back some GPUs of an elastic workload (`released`: (node id, GPU indices) pairs)
    and restart the rest as a new attempt in the new world (nodes, ranks, GPUs): its processes
    must learn their new world size, so a resize is a restart, recorded as a recovery.

    A running job whose policy saves first saves (`recovery.save_then_shrink`): it keeps every
    GPU until the save is in or its grace runs out, the engine counting the GPUs it gives back
    as already on their way. Otherwise the GPUs go back now and it restarts from its newest
    complete save, the work since booked as lost. Returns every node it touched."""
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        if workload.state not in (State.ADMITTED, State.STARTING, State.RUNNING):
            return set()  # it faulted or ended since the snapshot: the plan is stale for it
        policy = PolicyKind(workload.checkpoint_policy)
        if interruptions.save_first(Cause.SHRINK, policy, workload.state == State.RUNNING):
            recovery.save_then_shrink(workload, released, reason)
            return set()
        node_ids = set(workload.allocations.values_list("node_id", flat=True))
        allocations.give_back(workload, released)
        allocations.renumber(workload)
        gpus = workload.allocations.count()
        recovery.new_attempt(workload, f"shrunk to {gpus} GPUs: {reason}")
        now = timezone.now()
        recovery.resized(workload, reason, work_lost(workload, now), now)
        transition(workload, State.RECOVERING, reason=reason)
    return node_ids


# A grow restarts the job from its newest save: one at most this old, else it is asked for a
# save first and grows at a later cycle, from that one.
FRESH_SAVE_S = 5.0


def grow(workload: Workload, added, reason: str) -> set[int]:
    """Give a running elastic workload more GPUs (`added`: (node id, GPU indices) pairs) and
    restart it as a new attempt in its larger world from its newest complete save, recorded as
    a recovery that grew and is restarting. When that save would lose more than FRESH_SAVE_S
    of work, it is asked to save instead and grows once the save is in (the engine offers the
    grow again). Returns every node it touched (none when it did not grow)."""
    with transaction.atomic():
        workload, now = _running_and_saved(workload, f"before growing: {reason}")
        if workload is None:
            return set()
        node_ids = set(workload.allocations.values_list("node_id", flat=True))
        node_ids |= allocations.add(workload, added)
        recovery.new_attempt(workload, reason)
        recovery.resized(workload, reason, work_lost(workload, now), now, RecoveryOutcome.GROWN)
        transition(workload, State.RECOVERING, reason=reason)
    return node_ids


def move(
    workload: Workload,
    gpu_model_id: int,
    placements,
    reason: str,
    outcome: RecoveryOutcome = RecoveryOutcome.MOVED,
) -> set[int]:
    """Move a running workload to other GPUs (`placements`: (node id, GPU indices) pairs): of
    a faster model it accepts (MOVED), or of its own model elsewhere in its pod so that whole
    nodes free up there (DEFRAGMENTED). It gives back every GPU it holds and restarts there as
    a new attempt from its newest save, recorded as a recovery of that `outcome`. As a grow,
    it asks for a save first when that one would lose more than FRESH_SAVE_S, and moves once
    the save is in (the engine offers the move again). Returns every node it touched."""
    with transaction.atomic():
        workload, now = _running_and_saved(workload, f"before moving: {reason}")
        if workload is None:
            return set()
        lost_s = work_lost(workload, now)
        left = allocations.release(workload)  # booked as the model it ran on
        Workload.objects.filter(pk=workload.pk).update(gpu_model_id=gpu_model_id)
        workload.gpu_model_id = gpu_model_id
        node_ids = left | allocations.add(workload, placements)
        recovery.new_attempt(workload, reason)
        recovery.resized(workload, reason, lost_s, now, outcome, left)
        transition(workload, State.RECOVERING, reason=reason)
    return node_ids


def _running_and_saved(workload: Workload, why: str) -> tuple[Workload | None, object]:
    """The workload locked, and now, when it runs and its newest save loses at most
    FRESH_SAVE_S of work; else None, and a running one is asked for a save (`why`)."""
    workload = Workload.objects.select_for_update().get(pk=workload.pk)
    now = timezone.now()
    if workload.state != State.RUNNING:
        return None, now
    if work_lost(workload, now) > FRESH_SAVE_S:
        _save_before(workload, why)
        return None, now
    return workload, now


def _save_before(workload: Workload, why: str) -> None:
    since = timezone.now() - RESEND_WITHIN
    if checkpoints.answer(workload.pk, since) is not Answer.WAITING:
        # Once: the next cycles find it waiting for that save.
        checkpoints.ask(workload, "requested", why)


def expire_time_limits() -> list[int]:
    """Fail running workloads that ran past their time limit; return their ids."""
    now = timezone.now()
    expired = []
    for workload in Workload.objects.filter(state=State.RUNNING, time_limit_s__isnull=False):
        if (now - workload.started_at).total_seconds() <= workload.time_limit_s:
            continue
        with transaction.atomic():
            workload = Workload.objects.select_for_update().get(pk=workload.pk)
            if workload.state == State.RUNNING:
                transition(
                    workload,
                    State.FAILED,
                    reason=words.PAST_TIME_LIMIT.format(seconds=workload.time_limit_s),
                )
                release(workload)
                expired.append(workload.pk)
    return expired


def release(workload: Workload) -> None:
    """Free the workload's GPUs (it ended), tell its nodes and schedule again."""
    nodes_changed(allocations.release(workload))
