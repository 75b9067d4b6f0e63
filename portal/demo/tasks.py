import random

from celery import shared_task

from portal.core.triggers import trigger_cycle
from portal.demo import installation


@shared_task(soft_time_limit=10)
def demo_traffic() -> None:
    """Standalone only: keep a trickle of demo jobs arriving."""
    if installation.submit_traffic(random.Random()):
        trigger_cycle()
