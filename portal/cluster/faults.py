"""Faults as facts of the fleet: what kind an agent's report is, and what it does to a node."""

from portal.cluster.choices import HEALTH_MOVES, Health, Severity
from portal.cluster.models import FaultEvent, Node
from scheduler import faults
from scheduler.words import phrase

FAULT = phrase("{code}: {title}")  # why a fault moved a node

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


def record(
    node: Node, kind: faults.FaultKind, message: str, gpu_index: int | None, hit
) -> FaultEvent:
    """Record a fault on a node (locked by the caller) and the workloads it hit, and take the
    node out of service as the catalogue says."""
    fault = FaultEvent.objects.create(
        node=node,
        kind=kind.code,
        code=kind.xid,
        gpu_index=gpu_index,
        severity=SEVERITIES[kind.severity],
        message=(message or kind.meaning)[:1000],
    )
    fault.workloads.set(hit)
    health = node_health_after(kind)
    if health is not None and health in HEALTH_MOVES[Health(node.health)]:
        node.set_health(health, FAULT.format(code=kind.code, title=kind.title))
    return fault
