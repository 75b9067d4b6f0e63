"""A workload's GPUs: booked by the cycle, added to (a grow), given back in part (a shrink),
released whole. Every change books the GPU-hours of what it frees and returns the nodes it
touched, for the caller's one `desired.nodes_changed` per transaction."""

from django.db.models import Q
from django.utils import timezone

from portal.core.triggers import trigger_cycle
from portal.workloads.models import Allocation, UsageRecord, Workload


def release(workload: Workload) -> set[int]:
    """Free all the workload's GPUs and book their GPU-hours; schedule again on commit.
    Returns the nodes it held."""
    allocations = workload.allocations.all()
    gpus = allocations.count()
    if not gpus:
        return set()
    node_ids = set(allocations.values_list("node_id", flat=True))
    book(workload, allocations)
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
    book(workload, gone)
    gone.delete()
    return node_ids


def add(workload: Workload, added) -> set[int]:
    """Book more GPUs to a running workload, `added` as (node id, GPU indices) pairs: on a node
    it has (its rank there), or on new nodes, ranked after its own. Returns those nodes."""
    ranks = dict(workload.allocations.values_list("node_id", "node_rank"))
    after = max(ranks.values(), default=-1) + 1
    rows = []
    for node_id, indices in added:
        if node_id not in ranks:
            ranks[node_id], after = after, after + 1
        rows += [
            Allocation(workload=workload, node_id=node_id, gpu_index=i, node_rank=ranks[node_id])
            for i in indices
        ]
    Allocation.objects.bulk_create(rows)
    return {node_id for node_id, _ in added}


def book(workload: Workload, gone) -> None:
    """Book the GPU-hours of the workload's allocations `gone`, each from the later of the
    workload's start (or admission) and its own booking (a GPU a grow added) until now."""
    now = timezone.now()
    since = workload.started_at or workload.admitted_at or now
    starts = [max(since, booked) for booked in gone.values_list("created_at", flat=True)]
    if not starts:
        return
    UsageRecord.objects.create(
        tenant_id=workload.tenant_id,
        workload=workload,
        gpu_model_id=workload.gpu_model_id,
        gpus=len(starts),
        started_at=min(starts),
        ended_at=now,
        gpu_hours=sum((now - start).total_seconds() for start in starts) / 3600,
    )


def renumber(workload: Workload) -> None:
    """Number the workload's nodes 0..n-1 again, in their old order, after some left."""
    ranks = sorted(set(workload.allocations.values_list("node_rank", flat=True)))
    for new, old in enumerate(ranks):
        if new != old:
            workload.allocations.filter(node_rank=old).update(node_rank=new)
