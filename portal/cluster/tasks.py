from celery import shared_task

from portal.cluster import summary


@shared_task(soft_time_limit=10, expires=5)
def publish_utilization() -> None:
    """Beat, every 2 s: the cluster's utilization to every dashboard."""
    summary.publish_utilization()
