"""One scheduling cycle: snapshot the database, ask the engine for a plan, apply it.

Runs inside the `run_cycle` Celery task, one at a time under a Redis lock.
"""

import logging
import time
from collections import defaultdict

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.cluster.agents import sync_nodes
from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.quotas.models import Queue
from portal.workloads.choices import HOLDING, State, Topology
from portal.workloads.lifecycle import expire_time_limits
from portal.workloads.models import Allocation, IllegalTransition, Workload, transition
from scheduler import engine

log = logging.getLogger(__name__)

LEVELS = {
    Topology.NODE: engine.TopologyLevel.NODE,
    Topology.LEAF: engine.TopologyLevel.LEAF,
    Topology.POD: engine.TopologyLevel.POD,
    Topology.DATACENTER: engine.TopologyLevel.DATACENTER,
    Topology.ANY: engine.TopologyLevel.ANY,
}


def build_snapshot() -> engine.Snapshot:
    """The engine's view of the cluster: a handful of queries, whatever the cluster's size."""
    busy = defaultdict(set)
    placements = defaultdict(lambda: defaultdict(list))
    for workload_id, node_id, index in Allocation.objects.order_by(
        "workload_id", "node_rank", "gpu_index"
    ).values_list("workload_id", "node_id", "gpu_index"):
        busy[node_id].add(index)
        placements[workload_id][node_id].append(index)
    columns = ("id", "name", "gpu_model__name", "gpu_count", "health", "connected",
               "leaf__name", "leaf__pod__name", "leaf__pod__datacenter__name",
               "leaf__pod__datacenter__region__name")
    # Tuples, not model instances: at 12,500 nodes the difference is most of the load time.
    nodes = tuple(
        engine.Node(
            id=node_id, name=name, gpu_model=model, gpus=gpus, region=region, datacenter=dc,
            pod=f"{dc}/{pod}", leaf=f"{dc}/{pod}/{leaf}",
            free=tuple(i for i in range(gpus) if i not in busy[node_id]),
            schedulable=health == Health.READY and connected,
        )
        for node_id, name, model, gpus, health, connected, leaf, pod, dc, region
        in Node.objects.values_list(*columns)
    )
    queues = tuple(
        engine.Queue(
            id=q.id, name=q.name, region=q.region.name,
            cohort=q.cohort.name if q.cohort else None,
            priority=q.priority, weight=q.weight,
            quotas=tuple(
                engine.Quota(gpu_model=quota.gpu_model.name, nominal=quota.nominal,
                             guarantee=quota.guarantee, borrowing_limit=quota.borrowing_limit,
                             lending_limit=quota.lending_limit)
                for quota in q.quotas.all()
            ),
        )
        for q in Queue.objects.select_related("cohort", "region").prefetch_related(
            "quotas__gpu_model"
        )
    )
    columns = ("id", "queue_id", "gpu_model__name", "gpus", "submitted_at", "priority",
               "topology", "topology_required")
    workloads = tuple(
        engine.Workload(
            id=workload_id, queue_id=queue_id, gpu_model=model, gpus=gpus,
            submitted_at=submitted_at.timestamp(), priority=priority,
            topology=LEVELS[topology], topology_required=required,
            placements=tuple(
                engine.Placement(node_id, tuple(sorted(indices)))
                for node_id, indices in placements[workload_id].items()
            ),
        )
        for workload_id, queue_id, model, gpus, submitted_at, priority, topology, required
        in Workload.objects.filter(state__in=[State.PENDING, *HOLDING]).order_by("id")
        .values_list(*columns)
    )
    return engine.Snapshot(nodes=nodes, queues=queues, workloads=workloads)


def apply(plan: engine.Plan) -> set[int]:
    """Write the plan in one transaction; return the ids of nodes whose desired state changed.

    A workload cancelled since the snapshot is skipped. A GPU booked twice (which the engine
    never plans) fails the unique constraint and rolls the whole plan back.
    """
    ids = [a.workload_id for a in plan.admissions] + [p.workload_id for p in plan.pending]
    workloads = Workload.objects.in_bulk(ids)
    touched: set[int] = set()
    with transaction.atomic():
        bookings = []
        for admission in plan.admissions:
            nodes = len(admission.placements)
            try:
                transition(workloads[admission.workload_id], State.ADMITTED,
                           reason=f"placed on {nodes} node{'s' if nodes > 1 else ''}",
                           pending_reason="", queue_position=None)
            except IllegalTransition:
                continue
            for rank, placement in enumerate(admission.placements):
                touched.add(placement.node_id)
                bookings += [Allocation(workload_id=admission.workload_id, node_rank=rank,
                                        node_id=placement.node_id, gpu_index=index)
                             for index in placement.gpu_indices]
        Allocation.objects.bulk_create(bookings)
        changed = []
        for pending in plan.pending:
            workload = workloads[pending.workload_id]
            if (workload.pending_reason, workload.queue_position) != (pending.reason,
                                                                      pending.position):
                workload.pending_reason, workload.queue_position = pending.reason, pending.position
                changed.append(workload)
        Workload.objects.bulk_update(changed, ["pending_reason", "queue_position"])
        Node.objects.filter(id__in=touched).update(generation=F("generation") + 1)
    return touched


def scheduling_cycle() -> engine.Plan:
    """Expire time limits, snapshot, plan, apply, then tell the agents of the nodes that
    changed."""
    expire_time_limits()
    started = time.perf_counter()
    snapshot = build_snapshot()
    planned = time.perf_counter()
    plan = engine.plan(snapshot, now=timezone.now().timestamp())
    applied = time.perf_counter()
    touched = apply(plan)
    transaction.on_commit(lambda: sync_nodes(touched))
    log.info("cycle: %d admitted, %d pending; snapshot %.0f ms, plan %.0f ms, apply %.0f ms",
             len(plan.admissions), len(plan.pending), (planned - started) * 1e3,
             (applied - planned) * 1e3, (time.perf_counter() - applied) * 1e3)
    return plan
