"""Checkpoints: the one way to ask a job for a save and hear the answer (`ask`, `answer`,
`answered`), routine saves asked for at each job's interval, and the registry of what agents
report saved (the newest complete save to resume from, retention). A failed or partial save is
recorded but never becomes the one to resume from."""

import logging
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, Max, OuterRef
from django.utils import timezone

from portal.cluster.choices import CommandState
from portal.cluster.commands import RESEND_WITHIN, send_commands
from portal.cluster.models import NodeCommand
from portal.core.triggers import kick_preemptions, kick_recovery, trigger_cycle
from portal.workloads.advice import failure_rate
from portal.workloads.choices import (
    CheckpointKind,
    CheckpointPolicy,
    CheckpointStatus,
    RecoveryStep,
    State,
)
from portal.workloads.models import Allocation, Checkpoint, Recovery, Workload
from portal.workloads.reasons import Reader
from scheduler import checkpointing

log = logging.getLogger(__name__)

# How much of a save stalls training, by kind: an asynchronous save stalls only for its copy to
# host memory, which the agent reports as `stall_s`; the others stall for the whole save.
STALLS_FOR_ALL = {CheckpointKind.PERIODIC, CheckpointKind.TRIGGERED, CheckpointKind.REQUESTED}


# What a policy's routine saves are: a triggered policy's fallback saves are asynchronous.
ROUTINE = {
    CheckpointPolicy.PERIODIC: CheckpointKind.PERIODIC,
    CheckpointPolicy.ASYNC: CheckpointKind.ASYNC,
    CheckpointPolicy.TRIGGERED: CheckpointKind.ASYNC,
}


SAVE = "checkpoint"  # the agents' command


class Answer(StrEnum):
    """Where the saves a job was asked for since a moment stand."""

    NONE = "none"  # none was asked for
    WAITING = "waiting"  # some node has not answered, and none refused
    SAVED = "saved"  # every node saved
    REFUSED = "refused"  # a node refused or failed: the save will not be whole


def ask(workload: Workload, kind: str, reason: str, nodes=None) -> None:
    """Ask the job's nodes (or `nodes`) for a save of `kind`, inside the caller's transaction
    (sent on commit). Their acks are heard through `answered`, and read with `answer`. The
    reason reaches the job's own files (its save request), so it is read as its tenant reads
    it: other tenants' work and queues unnamed."""
    if nodes is None:
        nodes = set(workload.allocations.values_list("node_id", flat=True))
    reason = Reader(workload.tenant).read(reason)[:200]
    send_commands(nodes, SAVE, workload.pk, kind=kind, reason=reason)


def answer(workload_id: int, since) -> Answer:
    """Where the saves asked of the job since `since` stand."""
    states = set(
        NodeCommand.objects.filter(
            workload_id=workload_id, action=SAVE, created_at__gte=since
        ).values_list("state", flat=True)
    )
    if not states:
        return Answer.NONE
    if CommandState.FAILED in states:
        return Answer.REFUSED
    return Answer.WAITING if CommandState.SENT in states else Answer.SAVED


def answered(commands: list[NodeCommand]) -> None:
    """Agents answered saves (inside the acks' transaction): whatever waits for them hears it
    now, pushed rather than polled: a recovery saving before its restart, a preemption."""
    workloads = {c.workload_id for c in commands if c.action == SAVE and c.workload_id}
    if not workloads:
        return
    waiting = Recovery.objects.filter(workload_id__in=workloads, step=RecoveryStep.SAVING)
    for recovery_id in waiting.values_list("pk", flat=True):
        kick_recovery(recovery_id)
    if Workload.objects.filter(pk__in=workloads, state=State.PREEMPTING).exists():
        kick_preemptions()


def interval_s(workload: Workload, failures_per_gpu_hour: float) -> float | None:
    """Seconds between the job's routine saves: its own, else the advisor's Young/Daly interval
    for its size, its policy and the failure rate the cluster has seen; None when it has none."""
    if workload.checkpoint_interval_s:
        return float(workload.checkpoint_interval_s)
    if workload.checkpoint_policy not in ROUTINE:
        return None
    kind = checkpointing.PolicyKind(workload.checkpoint_policy)
    return checkpointing.interval_for(
        kind, workload.gpus, failures_per_gpu_hour=failures_per_gpu_hour
    )


def request_routine(now=None) -> list[int]:
    """Ask every running job whose routine save is due for one, on all its nodes: due when its
    interval has passed since its newest complete save (or its start) and no save it was asked
    for is still unanswered. Returns the ids of the jobs asked."""
    now = now or timezone.now()
    rate, _ = failure_rate()
    running = Workload.objects.filter(state=State.RUNNING).exclude(
        checkpoint_policy=CheckpointPolicy.NONE
    )
    saved = dict(
        Checkpoint.objects.filter(workload__in=running, status=CheckpointStatus.COMPLETE)
        .values("workload_id")
        .annotate(at=Max("created_at"))
        .values_list("workload_id", "at")
    )
    waiting = set(  # a save asked for and not yet answered (within the resend window)
        NodeCommand.objects.filter(
            workload__in=running,
            action=SAVE,
            state=CommandState.SENT,
            created_at__gte=now - RESEND_WITHIN,
        ).values_list("workload_id", flat=True)
    )
    last_asked = dict(
        NodeCommand.objects.filter(workload__in=running, action=SAVE)
        .values("workload_id")
        .annotate(at=Max("created_at"))
        .values_list("workload_id", "at")
    )
    asked = []
    for workload in running:
        every = interval_s(workload, rate)
        # From the newest save, or the last time one was asked for (a failed save is asked
        # for again at the next interval, not at once), or the start.
        moments = (saved.get(workload.pk), last_asked.get(workload.pk), workload.started_at)
        since = max(filter(None, moments), default=None)
        if every is None or since is None or workload.pk in waiting:
            continue
        if (now - since).total_seconds() < every:
            continue
        kind = ROUTINE.get(workload.checkpoint_policy, CheckpointKind.PERIODIC)
        with transaction.atomic():
            ask(workload, kind, f"every {every:.0f} s")
        asked.append(workload.pk)
    return asked


def work_lost(workload: Workload, at) -> float:
    """Seconds of running the workload redoes when it restarts, as of `at`, from its newest
    complete save: none when that save was made at `at` or later (a save asked for first)."""
    saved = (
        workload.checkpoints.filter(status=CheckpointStatus.COMPLETE)
        .order_by("-created_at", "-id")
        .values_list("created_at", flat=True)
        .first()
    )
    if saved is not None and saved >= at:
        return 0.0
    since = max(filter(None, (saved, workload.started_at)), default=None)
    return max(0.0, (at - since).total_seconds()) if since else 0.0


@transaction.atomic
def record_saved(workload_id: int, node_id: int, detail: dict) -> Checkpoint | None:
    """Register a save a node reports for a workload it runs. Every rank of a gang reports
    the same step: the first report makes the entry, a later failed one marks it failed."""
    on_node = Allocation.objects.filter(workload=OuterRef("pk"), node_id=node_id)
    workload = Workload.objects.filter(Exists(on_node), pk=workload_id).first()
    if workload is None:
        log.warning(
            "node %s reported a checkpoint of workload %s it does not run", node_id, workload_id
        )
        return None
    kind = detail.get("kind")
    kind = kind if kind in CheckpointKind.values else CheckpointKind.REQUESTED
    status = detail.get("status", CheckpointStatus.COMPLETE)
    status = status if status in CheckpointStatus.values else CheckpointStatus.FAILED
    duration = _number(detail.get("duration_s"))
    checkpoint, created = Checkpoint.objects.get_or_create(
        workload=workload,
        step=_count(detail.get("step")),
        defaults={
            "kind": kind,
            "status": status,
            "location": str(detail.get("location", ""))[:500],
            "size_bytes": _count(detail.get("size_bytes")),
            "duration_s": duration,
            "stall_s": duration if kind in STALLS_FOR_ALL else _number(detail.get("stall_s")),
        },
    )
    if not created and status != CheckpointStatus.COMPLETE:
        Checkpoint.objects.filter(pk=checkpoint.pk).update(status=status)
    if created and kind == CheckpointKind.REQUESTED and status == CheckpointStatus.COMPLETE:
        trigger_cycle()  # a grow may wait for it (`lifecycle.grow`)
    _prune(workload)
    return checkpoint


def _prune(workload: Workload) -> None:
    """Past retention (the newest CHECKPOINTS_KEPT complete saves are kept): the saves are
    marked pruned and the node whose rank 0 wrote them is asked to delete their files, which
    `deleted` records once it has."""
    kept = settings.WANKA["CHECKPOINTS_KEPT"]
    gone = checkpointing.to_prune(list(workload.checkpoints.all()), keep=kept)
    if not gone:
        return
    Checkpoint.objects.filter(pk__in=[c.pk for c in gone]).update(status=CheckpointStatus.PRUNED)
    master = workload.allocations.filter(node_rank=0).values_list("node_id", flat=True).first()
    if master is not None:
        locations = [c.location for c in gone]
        send_commands([master], "delete_saves", workload.pk, locations=locations)


def deleted(commands) -> int:
    """Pruned saves whose files the node has deleted, from its answered `delete_saves`
    commands; how many rows that marked."""
    marked = 0
    for workload_id, args in commands.values_list("workload_id", "args"):
        marked += Checkpoint.objects.filter(
            workload_id=workload_id,
            location__in=args["locations"],
            status=CheckpointStatus.PRUNED,
        ).update(status=CheckpointStatus.DELETED)
    return marked


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _number(value) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else 0.0
