import random

from celery import shared_task

from portal.core import demo
from portal.workloads.lifecycle import trigger_cycle


@shared_task(soft_time_limit=10)
def demo_traffic() -> None:
    """Standalone only: keep a trickle of demo jobs arriving."""
    if demo.submit_traffic(random.Random()):
        trigger_cycle()
