"""What agents report that the control plane acts on: faults (recorded with the fleet, handed
to recovery, announced), acks of commands, and nodes gone silent."""

import logging
import time

from django.conf import settings
from django.db import transaction

from portal.cluster import commands
from portal.cluster import faults as fleet_faults
from portal.cluster.choices import CommandState
from portal.cluster.models import FaultEvent, Node
from portal.cluster.summary import LAST_SEEN
from portal.core.live import CLUSTER_GROUP, OPS_GROUP, publish, tenant_group
from portal.core.redis import client
from portal.workloads import recovery
from portal.workloads.models import Workload
from scheduler import faults

log = logging.getLogger(__name__)

MISSED_HEARTBEATS = 3


@transaction.atomic
def record_fault(
    node_id: int, kind: faults.FaultKind, message: str = "", gpu_index: int | None = None
) -> FaultEvent:
    """Record a fault on a node, take the node out of service as the catalogue says, start the
    recovery of every job it kills, and tell browsers: operators see every fault, a tenant the
    ones that hit its workloads."""
    node = Node.objects.select_for_update().get(pk=node_id)
    hit = list(Workload.objects.filter(allocations__node_id=node_id).distinct())
    fault = fleet_faults.record(node, kind, message, gpu_index, hit)
    if kind.kills_job:
        for workload in hit:
            recovery.start(workload, fault, kind)
    log.warning(
        "fault on %s: %s (%s), %d job(s) hit; node %s",
        node.name,
        kind.code,
        kind.title,
        len(hit),
        node.health,
    )
    _announce(fault, kind, hit)
    return fault


def _announce(fault: FaultEvent, kind: faults.FaultKind, hit: list[Workload]) -> None:
    payload = {
        "id": fault.pk,
        "node": fault.node.name,
        "kind": fault.kind,
        "code": fault.code,
        "title": kind.title,
        "severity": fault.severity,
        "message": fault.message,
        "node_health": fault.node.health,
        "jobs_hit": len(hit),
    }
    publish(CLUSTER_GROUP, "fault", {**payload, "workloads": []})
    publish(OPS_GROUP, "fault", {**payload, "workloads": [w.name for w in hit]})
    for tenant_id in {w.tenant_id for w in hit}:
        names = [w.name for w in hit if w.tenant_id == tenant_id]
        publish(tenant_group(tenant_id), "fault", {**payload, "workloads": names})


def record_acks(acks: list[tuple[int, str, bool, str]]) -> list[bool]:
    """(node, command id, ok, detail) acks, written down at once (`commands.answer_many`); a
    refused save wakes the recovery waiting for it. Whether each ack counted."""
    answered = commands.answer_many(acks)
    recovery.commands_refused(
        [command for command in answered if command and command.state == CommandState.FAILED]
    )
    return [command is not None for command in answered]


def mark_lost_nodes() -> list[int]:
    """Nodes that missed 3 heartbeats in a row are no longer scheduled, and a heartbeat-loss
    fault says so. Returns their ids."""
    window = MISSED_HEARTBEATS * settings.WANKA["HEARTBEAT_S"]
    cutoff = time.time() - window
    fresh = {int(node_id) for node_id in client().zrangebyscore(LAST_SEEN, cutoff, "+inf")}
    lost = [
        node_id
        for node_id, last_seen in Node.objects.filter(connected=True).values_list(
            "id", "last_seen_at"
        )
        if node_id not in fresh and (last_seen is None or last_seen.timestamp() < cutoff)
    ]
    for node_id in lost:
        with transaction.atomic():
            if Node.objects.filter(pk=node_id, connected=True).update(
                connected=False, agent_channel=""
            ):
                record_fault(
                    node_id, faults.lookup("heartbeat-loss"), f"no heartbeat for {window:.0f} s"
                )
    return lost
