"""A workload's GPUs: booked by the cycle, added to (a grow), given back in part (a shrink),
released whole. Every change books the GPU-hours of what it frees and returns the nodes it
touched, for the caller's one `desired.nodes_changed` per transaction."""

from collections import Counter

from django.db import IntegrityError
from django.db.models import Q
from django.utils import timezone

from portal.cluster.models import Node
from portal.core.triggers import trigger_cycle
from portal.workloads.models import Allocation, UsageRecord, Workload
from portal.workloads.usage import CHARGED
from scheduler.engine.model import SLICES


def create(rows: list[Allocation]) -> None:
    """Write new bookings. A whole GPU booked twice fails the unique constraint; a GPU whose
    shares would pass eight eighths, or that would hold shares beside a whole booking, fails
    here: every booking transaction locks the rows of the nodes it books on (in id order),
    then writes, then checks the GPUs of those nodes that hold shares, so two transactions
    booking one GPU see each other's rows. Raises IntegrityError (the transaction rolls back)."""
    node_ids = sorted({row.node_id for row in rows})
    if not node_ids:
        return
    list(Node.objects.select_for_update().filter(id__in=node_ids).order_by("id").values("id"))
    Allocation.objects.bulk_create(rows)
    shared = Allocation.objects.filter(node_id__in=node_ids, slices__gt=0).values("node_id")
    over = past_whole(Allocation.objects.filter(node_id__in=shared))
    if over:
        raise IntegrityError(f"GPUs booked past their whole (node, index): {over}")


def slices_of(workload: Workload) -> int:
    """What a booking of the workload holds of its GPU, in eighths: a share's eighths, a MIG
    instance's memory slots (of eight), or 0 for the whole GPU. A GPU's MIG instances never
    hold more than its eight memory slots, so `past_whole` guards them as it guards shares."""
    return workload.mig_profile.slots if workload.mig else workload.slices


def past_whole(allocations) -> list[tuple]:
    """The (node id, GPU index) of the GPUs among `allocations` booked past their whole:
    shares over eight eighths, or shares beside a whole booking."""
    whole, eighths = set(), Counter()
    for node_id, index, slices in allocations.values_list("node_id", "gpu_index", "slices"):
        if slices:
            eighths[node_id, index] += slices
        else:
            whole.add((node_id, index))
    return sorted(gpu for gpu, n in eighths.items() if n > SLICES or gpu in whole)


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
            Allocation(
                workload=workload,
                node_id=node_id,
                gpu_index=i,
                node_rank=ranks[node_id],
                slices=slices_of(workload),
            )
            for i in indices
        ]
    create(rows)
    return {node_id for node_id, _ in added}


def book(workload: Workload, gone) -> None:
    """Book the GPU-hours of the workload's allocations `gone`, each from the later of the
    workload's start (or admission) and its own booking (a GPU a grow added) until now."""
    now = timezone.now()
    since = workload.started_at or workload.admitted_at or now
    starts = [
        (max(since, booked), share)
        for booked, share in gone.annotate(share=CHARGED).values_list("created_at", "share")
    ]
    if not starts:
        return
    UsageRecord.objects.create(
        tenant_id=workload.tenant_id,
        workload=workload,
        gpu_model_id=workload.gpu_model_id,
        gpus=sum(share for _, share in starts),
        started_at=min(start for start, _ in starts),
        ended_at=now,
        # A share, or a MIG instance, is charged as its share of the GPU's hours.
        gpu_hours=sum((now - start).total_seconds() * share for start, share in starts) / 3600,
    )


def renumber(workload: Workload) -> None:
    """Number the workload's nodes 0..n-1 again, in their old order, after some left."""
    ranks = sorted(set(workload.allocations.values_list("node_rank", flat=True)))
    for new, old in enumerate(ranks):
        if new != old:
            workload.allocations.filter(node_rank=old).update(node_rank=new)
