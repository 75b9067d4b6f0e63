"""The checkpoint registry: what agents report saved, the newest complete save to resume from,
and retention. A failed or partial save is recorded but never becomes the one to resume from."""

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef

from portal.workloads.choices import CheckpointKind, CheckpointStatus
from portal.workloads.models import Allocation, Checkpoint, Workload
from scheduler import checkpointing

log = logging.getLogger(__name__)

# How much of a save stalls training, by kind: an asynchronous save stalls only for its copy to
# host memory, which the agent reports as `stall_s`; the others stall for the whole save.
STALLS_FOR_ALL = {CheckpointKind.PERIODIC, CheckpointKind.TRIGGERED, CheckpointKind.REQUESTED}


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
    _prune(workload)
    return checkpoint


def _prune(workload: Workload) -> None:
    kept = settings.WANKA["CHECKPOINTS_KEPT"]
    gone = checkpointing.to_prune(list(workload.checkpoints.all()), keep=kept)
    Checkpoint.objects.filter(pk__in=[c.pk for c in gone]).update(status=CheckpointStatus.PRUNED)


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _number(value) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else 0.0
