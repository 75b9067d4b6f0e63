"""Faults reported by agents or noticed by the control plane: recorded, acted on, shown live."""

import logging

from django.db import transaction

from portal.cluster.choices import HEALTH_MOVES, Health, Severity
from portal.cluster.models import FaultEvent, Node
from portal.core.live import CLUSTER_GROUP, OPS_GROUP, publish, tenant_group
from scheduler import faults

log = logging.getLogger(__name__)

SEVERITIES = {
    faults.Severity.INFO: Severity.INFO,
    faults.Severity.WARNING: Severity.WARNING,
    faults.Severity.CRITICAL: Severity.CRITICAL,
}


def classify(detail: dict) -> faults.FaultKind:
    """The catalogue's kind for an agent's fault event: by its code, else by its XID number."""
    try:
        return faults.lookup(str(detail.get("code", "")))
    except KeyError:
        xid = detail.get("xid")
        if isinstance(xid, int) and not isinstance(xid, bool) and 0 <= xid < 2**31:
            return faults.for_xid(xid)
        raise


def node_health_after(kind: faults.FaultKind) -> Health | None:
    """Where a fault of this kind sends a node: down when it needs a reboot or repair or is
    gone, draining when it must be drained, cordoned when it must take no new work."""
    if kind.action >= faults.Action.REBOOT_NODE or kind.code == "heartbeat-loss":
        return Health.DOWN
    if kind.action == faults.Action.DRAIN_NODE:
        return Health.DRAINING
    return Health.CORDONED if kind.cordon else None


@transaction.atomic
def record_fault(
    node_id: int, kind: faults.FaultKind, message: str = "", gpu_index: int | None = None
) -> FaultEvent:
    """Record a fault on a node, take the node out of service as the catalogue says, start the
    recovery of every job it kills, and tell browsers: operators see every fault, a tenant the
    ones that hit its workloads."""
    from portal.workloads import recovery
    from portal.workloads.models import Workload

    node = Node.objects.select_for_update().get(pk=node_id)
    fault = FaultEvent.objects.create(
        node=node,
        kind=kind.code,
        code=kind.xid,
        gpu_index=gpu_index,
        severity=SEVERITIES[kind.severity],
        message=(message or kind.meaning)[:1000],
    )
    hit = list(Workload.objects.filter(allocations__node_id=node_id).distinct())
    fault.workloads.set(hit)
    health = node_health_after(kind)
    if health is not None and health in HEALTH_MOVES[Health(node.health)]:
        node.set_health(health, f"{kind.code}: {kind.title}")
    if kind.kills_job:
        for workload in hit:
            recovery.start(workload, fault, kind)
    payload = {
        "id": fault.pk,
        "node": node.name,
        "kind": fault.kind,
        "code": fault.code,
        "title": kind.title,
        "severity": fault.severity,
        "message": fault.message,
        "node_health": node.health,
    }
    log.warning(
        "fault on %s: %s (%s), %d job(s) hit; node %s",
        node.name,
        kind.code,
        kind.title,
        len(hit),
        node.health,
    )
    publish(CLUSTER_GROUP, "fault", {**payload, "workloads": [], "jobs_hit": len(hit)})
    publish(
        OPS_GROUP, "fault", {**payload, "workloads": [w.name for w in hit], "jobs_hit": len(hit)}
    )
    for tenant_id in {w.tenant_id for w in hit}:
        publish(
            tenant_group(tenant_id),
            "fault",
            {
                **payload,
                "workloads": [w.name for w in hit if w.tenant_id == tenant_id],
                "jobs_hit": len(hit),
            },
        )
    return fault
