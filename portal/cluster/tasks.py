import time

from celery import shared_task
from django.conf import settings
from django.db import transaction

from portal.cluster.faults import record_fault
from portal.cluster.models import Node
from portal.cluster.summary import LAST_SEEN, cluster_summary, record_point
from portal.core.live import CLUSTER_GROUP, send_now
from portal.core.redis import client
from scheduler import faults

MISSED_HEARTBEATS = 3


@shared_task(soft_time_limit=10, expires=5)
def publish_utilization() -> None:
    """Roll up the latest telemetry and push it to every dashboard (beat: every 2 s)."""
    summary = cluster_summary()
    point = record_point(summary)
    send_now(
        CLUSTER_GROUP,
        {
            "type": "live.event",
            "event": "utilization",
            "payload": {"point": point, "summary": summary},
        },
    )


@shared_task(soft_time_limit=20, expires=10)
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
