from celery import shared_task

from portal.services import autoscaling


@shared_task(soft_time_limit=10, expires=2)
def autoscale() -> dict[int, int]:
    """Beat, every 2 s: scale every active service (`autoscaling.tick`)."""
    return autoscaling.tick()
