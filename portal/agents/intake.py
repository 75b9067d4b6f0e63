"""What agents report that the control plane acts on: faults (recorded with the fleet, handed
to recovery, announced), acks of commands, and nodes gone silent."""

import logging
import time
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.cluster import checks, commands
from portal.cluster import faults as fleet_faults
from portal.cluster.choices import CommandState, Health
from portal.cluster.models import FaultEvent, Node, NodeCommand
from portal.cluster.summary import LAST_SEEN, SEEN_SINCE, deaf_since
from portal.core.live import OPS_GROUP, publish, publish_tenant
from portal.core.redis import client
from portal.workloads import checkpoints, recovery
from portal.workloads.models import Workload
from scheduler import faults

log = logging.getLogger(__name__)

MISSED_HEARTBEATS = 3
# Redis set: nodes declared lost while their agent may still be connected; a heartbeat of an
# open connection removes its node and takes it back (`AgentConsumer.on_heartbeat`).
LOST = "wanka:lost"


@transaction.atomic
def record_fault(
    node_id: int,
    kind: faults.FaultKind,
    message: str = "",
    gpu_index: int | None = None,
    workload: Workload | None = None,
) -> FaultEvent:
    """Record a fault on a node, take the node out of service as the catalogue says, start the
    recovery of every job it kills, and tell browsers: operators see every fault, a tenant the
    ones that hit its workloads. A job's own symptom (a hang, a straggler) names `workload`:
    it hits that job only, not the others sharing the node."""
    node = Node.objects.select_for_update().get(pk=node_id)
    on_node = Workload.objects.filter(allocations__node_id=node_id).distinct()
    hit = list(on_node.filter(pk=workload.pk) if workload is not None else on_node)
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

    # Feeds of faults show only those that hit the reader's tenant (its own group) or, for
    # operators, all; the node's health reaches everyone with the next utilization roll-up.
    def jobs(hit):
        return {"workloads": [w.name for w in hit], "workload_ids": [w.pk for w in hit]}

    publish(OPS_GROUP, "fault", {**payload, **jobs(hit)})
    for tenant_id in {w.tenant_id for w in hit}:
        # Its own jobs only, named and counted: not how many of others' the fault hit.
        mine = [w for w in hit if w.tenant_id == tenant_id]
        publish_tenant(tenant_id, "fault", {**payload, **jobs(mine), "jobs_hit": len(mine)})


def record_acks(acks: list[tuple[int, str, bool, str]]) -> list[bool]:
    """(node, command id, ok, detail) acks, written down at once (`commands.answer_many`): an
    answered save wakes what waits for it (`checkpoints.answered`), a deletion of pruned saves
    is recorded, a health check returns its node to service or sends it down. Whether each ack
    counted."""
    answered = commands.answer_many(acks)
    checkpoints.answered([command for command in answered if command])
    deletes = [c.pk for c in answered if c and c.action == "delete_saves"]
    if deletes:
        checkpoints.deleted(NodeCommand.objects.filter(pk__in=deletes, state=CommandState.DONE))
    checks.answered([c for c in answered if c and c.action == checks.ACTION])
    return [command is not None for command in answered]


def mark_lost_nodes() -> list[int]:
    """Nodes silent for 3 heartbeats are no longer scheduled, and a heartbeat-loss fault says
    so and recovers their jobs: connected nodes that stopped beating, and nodes whose agent
    disconnected and did not come back within the same grace while they hold running work.
    Silence the control plane could not have heard is not silence: nobody is judged until
    Redis has kept heartbeats (it may have restarted empty) for the whole window, and the web
    tier has been up (it may have been down, every agent cut off) for the window and the agents'
    reconnect backoff. Returns the ids of the nodes lost."""
    window = MISSED_HEARTBEATS * settings.WANKA["HEARTBEAT_S"]
    now = time.time()
    cutoff = now - window
    redis = client()
    redis.set(SEEN_SINCE, now, nx=True)
    beats = {int(n): t for n, t in redis.zrangebyscore(LAST_SEEN, cutoff, "+inf", withscores=True)}
    _still_beating(beats)
    _record_last_seen(beats)
    reconnect = settings.WANKA["RECONNECT_S"]
    heard_since = max(float(redis.get(SEEN_SINCE)), deaf_since(redis, now) + reconnect)
    if heard_since > cutoff:
        return []
    fresh = set(beats)
    holding = Q(allocations__workload__state__in=recovery.RECOVERABLE)
    candidates = Node.objects.filter(Q(connected=True) | holding).distinct()
    lost = [
        node_id
        for node_id, last_seen in candidates.values_list("id", "last_seen_at")
        if node_id not in fresh and (last_seen is None or last_seen.timestamp() < cutoff)
    ]
    return [node_id for node_id in lost if _declare_lost(node_id, window)]


# How far behind its heartbeats a node's `last_seen_at` may fall before it is written again:
# one write a minute per node, in bulk, rather than one per heartbeat.
LAST_SEEN_EVERY_S = 60


def _record_last_seen(beats: dict[int, float]) -> None:
    """Carry recent heartbeats (node id -> time) to the nodes' `last_seen_at`."""
    known = dict(Node.objects.filter(pk__in=beats).values_list("pk", "last_seen_at"))
    behind = [
        Node(pk=node_id, last_seen_at=datetime.fromtimestamp(at, UTC))
        for node_id, at in beats.items()
        if node_id in known
        and (known[node_id] is None or at - known[node_id].timestamp() >= LAST_SEEN_EVERY_S)
    ]
    Node.objects.bulk_update(behind, ["last_seen_at"], batch_size=1000)


def _still_beating(beats: dict[int, float]) -> None:
    """Nodes disconnected in the database whose agent heartbeated since (declared lost while
    its connection stayed open) go back in `LOST`, for their next heartbeat to take them back:
    the set lives in Redis, which may have restarted empty or failed the write."""
    disconnected = Node.objects.filter(pk__in=beats, connected=False)
    beating = [
        node_id
        for node_id, last_seen in disconnected.values_list("pk", "last_seen_at")
        if last_seen is None or beats[node_id] > last_seen.timestamp()
    ]
    if beating:
        client().sadd(LOST, *beating)


def _declare_lost(node_id: int, window: float) -> bool:
    """Take the node off and record its heartbeat-loss fault, unless another worker did or it
    was heard from since the scan. Once that commits, the node is in `LOST`: if its
    connection is still open, its next heartbeat takes it back."""
    cutoff = time.time() - window
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        beat = client().zscore(LAST_SEEN, node_id) or 0
        if max(beat, node.last_seen_at.timestamp() if node.last_seen_at else 0) >= cutoff:
            return False
        live_work = Workload.objects.filter(
            allocations__node_id=node_id, state__in=recovery.RECOVERABLE
        ).exists()
        if not node.connected and not live_work:
            return False
        # After the commit: a heartbeat that took the node back before it would be undone.
        transaction.on_commit(lambda: client().sadd(LOST, node_id), robust=True)
        Node.objects.filter(pk=node_id).update(connected=False, agent_channel="")
        record_fault(node_id, faults.lookup("heartbeat-loss"), f"no heartbeat for {window:.0f} s")
    return True


def carry_out_node_moves() -> list[int]:
    """What operators asked of nodes, carried to their jobs (beat, every 5 s): a node marked
    down has its live jobs recovered elsewhere; a draining node's jobs move to spares as soon
    as they can (saving first), the others when the drain deadline passes, and the node goes
    down once it holds no work. Returns the ids of the jobs set moving."""
    moved = []
    live = Q(allocations__workload__state__in=recovery.RECOVERABLE)
    for node_id in (
        Node.objects.filter(live, health=Health.DOWN).distinct().values_list("pk", flat=True)
    ):
        with transaction.atomic():
            node = Node.objects.select_for_update().get(pk=node_id)
            if node.health != Health.DOWN:
                continue  # returned to service since the scan
            fault = record_fault(node_id, faults.lookup("node-down"), node.health_reason)
            moved += list(fault.recoveries.values_list("workload_id", flat=True))
    for node_id in Node.objects.filter(health=Health.DRAINING).values_list("pk", flat=True):
        moved += _drain(node_id)
    return moved


def _drain(node_id: int) -> list[int]:
    """Move the draining node's jobs that can move now (one onto a spare a pass, so that two
    never count on the same spare: the next pass sees it taken), all of them once the drain
    deadline has passed; take the node down once it is empty."""
    kind = faults.lookup("drain")
    moved = []
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        if node.health != Health.DRAINING:
            return []  # returned to service since the scan
        if not node.allocations.exists():
            node.set_health(Health.DOWN, checks.DRAINED)
            return []
        age = (timezone.now() - node.health_changed_at).total_seconds()
        overdue = age >= settings.WANKA["DRAIN_DEADLINE_S"]
        for workload in Workload.objects.filter(
            allocations__node=node, state__in=recovery.RECOVERABLE
        ).distinct():
            if overdue or (not moved and recovery.can_move(workload, node)):
                why = "the drain deadline passed" if overdue else "it moves to a spare"
                fault = record_fault(node.pk, kind, why, workload=workload)
                recovery.start(workload, fault, kind, leave_node=True)
                moved.append(workload.pk)
    return moved
