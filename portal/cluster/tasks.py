from celery import shared_task

from portal.cluster.summary import cluster_summary, record_point
from portal.core.live import CLUSTER_GROUP, send_now


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
