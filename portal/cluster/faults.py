"""Faults reported by agents or noticed by the control plane, recorded and shown live."""

import logging

from portal.cluster.choices import Severity
from portal.cluster.models import FaultEvent, Node
from portal.core.live import CLUSTER_GROUP, publish, tenant_group

log = logging.getLogger(__name__)


def _int_or_none(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record_fault(node_id: int, detail: dict, kind: str = "xid",
                 severity: str = Severity.WARNING) -> FaultEvent:
    """Record a fault on a node, link the workloads running there, and tell browsers: operators
    see every fault, a tenant the ones that hit its workloads."""
    from portal.workloads.models import Workload

    severities = set(Severity.values)
    fault = FaultEvent.objects.create(
        node_id=node_id, kind=str(detail.get("kind", kind))[:32],
        gpu_index=_int_or_none(detail.get("gpu_index")), code=_int_or_none(detail.get("code")),
        severity=detail.get("severity") if detail.get("severity") in severities else severity,
        message=str(detail.get("message", ""))[:1000],
    )
    hit = list(Workload.objects.filter(allocations__node_id=node_id).distinct())
    fault.workloads.set(hit)
    node = Node.objects.only("name").get(pk=node_id)
    payload = {"id": fault.pk, "node": node.name, "kind": fault.kind, "code": fault.code,
               "severity": fault.severity, "message": fault.message}
    log.warning("fault on %s: %s", node.name, payload)
    publish(CLUSTER_GROUP, "fault", {**payload, "workloads": []})
    for tenant_id in {w.tenant_id for w in hit}:
        publish(tenant_group(tenant_id), "fault", {
            **payload, "workloads": [w.name for w in hit if w.tenant_id == tenant_id]})
    return fault
