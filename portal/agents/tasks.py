from celery import shared_task

from portal.agents import intake


@shared_task(soft_time_limit=20, expires=10)
def mark_lost_nodes() -> list[int]:
    """Beat, every 5 s: nodes that stopped heartbeating get a heartbeat-loss fault."""
    return intake.mark_lost_nodes()
