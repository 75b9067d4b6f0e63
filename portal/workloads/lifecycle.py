"""What happens to a workload after admission: start, finish, cancel, and releasing its GPUs."""

from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from portal.cluster.agents import sync_nodes
from portal.cluster.models import Node
from portal.workloads.choices import HOLDING, State
from portal.workloads.models import Allocation, UsageRecord, Workload, transition


def trigger_cycle() -> None:
    """Run a scheduling cycle once the current transaction commits."""
    from portal.workloads.tasks import run_cycle

    transaction.on_commit(run_cycle.delay)


def _locked(workload_id: int, node_id: int) -> Workload | None:
    """The workload, locked, if it holds GPUs on `node_id`: a node speaks only for its own."""
    on_node = Allocation.objects.filter(workload=OuterRef("pk"), node_id=node_id)
    return Workload.objects.select_for_update().filter(Exists(on_node), pk=workload_id).first()


def mark_started(workload_id: int, node_id: int) -> None:
    """An agent runs its part of the workload; the gang is RUNNING once every node does."""
    with transaction.atomic():
        workload = _locked(workload_id, node_id)
        if workload is None or workload.state not in (State.ADMITTED, State.STARTING):
            return
        Allocation.objects.filter(workload=workload, node_id=node_id).update(started=True)
        if workload.state == State.ADMITTED:
            transition(workload, State.STARTING, reason="processes starting")
        if not workload.allocations.filter(started=False).exists():
            nodes = workload.allocations.values("node").distinct().count()
            transition(workload, State.RUNNING, reason=f"running on {nodes} node(s)")


def finish(workload_id: int, node_id: int, exit_code: int) -> None:
    """The workload's processes on `node_id` exited: success on code 0, failure otherwise."""
    with transaction.atomic():
        workload = _locked(workload_id, node_id)
        if workload is None or workload.state not in HOLDING:
            return
        to = State.SUCCEEDED if exit_code == 0 else State.FAILED
        transition(workload, to, reason=f"exited with code {exit_code}", exit_code=exit_code)
        release(workload)


def cancel(workload: Workload, actor=None) -> None:
    with transaction.atomic():
        transition(workload, State.CANCELLED, reason="cancelled by user", actor=actor)
        release(workload)


def release(workload: Workload) -> None:
    """Free the workload's GPUs, book their GPU-hours, tell its nodes, and schedule again."""
    allocations = workload.allocations.all()
    gpus = allocations.count()
    if not gpus:
        return
    node_ids = set(allocations.values_list("node_id", flat=True))
    now = timezone.now()
    since = workload.started_at or workload.admitted_at or now
    UsageRecord.objects.create(
        tenant_id=workload.tenant_id, workload=workload, gpu_model_id=workload.gpu_model_id,
        gpus=gpus, started_at=since, ended_at=now,
        gpu_hours=gpus * (now - since).total_seconds() / 3600,
    )
    allocations.delete()
    Node.objects.filter(id__in=node_ids).update(generation=F("generation") + 1)
    transaction.on_commit(lambda: sync_nodes(node_ids))
    trigger_cycle()
