"""A workload's GPUs: booked by the cycle, given back in part (a shrink), released whole. Every
change books the GPU-hours of what it frees and returns the nodes it touched, for the caller's
one `desired.nodes_changed` per transaction."""

from django.db.models import Q
from django.utils import timezone

from portal.workloads.models import UsageRecord, Workload
from portal.workloads.triggers import trigger_cycle


def release(workload: Workload) -> set[int]:
    """Free all the workload's GPUs and book their GPU-hours; schedule again on commit.
    Returns the nodes it held."""
    allocations = workload.allocations.all()
    gpus = allocations.count()
    if not gpus:
        return set()
    node_ids = set(allocations.values_list("node_id", flat=True))
    book(workload, gpus)
    allocations.delete()
    trigger_cycle()
    return node_ids


def give_back(workload: Workload, released) -> set[int]:
    """Free some GPUs of the workload, `released` as (node id, GPU indices) pairs, and book
    their GPU-hours; the rest go on. Returns the nodes they were on."""
    gpus = Q(pk__in=[])
    for node_id, indices in released:
        gpus |= Q(node_id=node_id, gpu_index__in=indices)
    gone = workload.allocations.filter(gpus)
    node_ids = set(gone.values_list("node_id", flat=True))
    book(workload, gone.count())
    gone.delete()
    return node_ids


def book(workload: Workload, gpus: int) -> None:
    """Book `gpus` GPUs of the workload from its start (or admission) until now."""
    if not gpus:
        return
    now = timezone.now()
    since = workload.started_at or workload.admitted_at or now
    UsageRecord.objects.create(
        tenant_id=workload.tenant_id,
        workload=workload,
        gpu_model_id=workload.gpu_model_id,
        gpus=gpus,
        started_at=since,
        ended_at=now,
        gpu_hours=gpus * (now - since).total_seconds() / 3600,
    )


def renumber(workload: Workload) -> None:
    """Number the workload's nodes 0..n-1 again, in their old order, after some left."""
    ranks = sorted(set(workload.allocations.values_list("node_rank", flat=True)))
    for new, old in enumerate(ranks):
        if new != old:
            workload.allocations.filter(node_rank=old).update(node_rank=new)
