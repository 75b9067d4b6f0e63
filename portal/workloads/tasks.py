import logging

from celery import shared_task

from portal.core.redis import client
from portal.workloads.cycle import scheduling_cycle

log = logging.getLogger(__name__)

AGAIN = "wanka:cycle:again"


@shared_task(soft_time_limit=60)
def run_cycle() -> None:
    """One scheduling cycle at a time. A trigger that arrives while a cycle runs is not lost:
    it sets a flag and the running cycle goes round once more."""
    redis = client()
    lock = redis.lock("wanka:cycle:lock", timeout=120)
    if not lock.acquire(blocking=False):
        redis.set(AGAIN, 1, ex=120)
        return
    try:
        while True:
            redis.delete(AGAIN)
            scheduling_cycle()
            if not redis.exists(AGAIN):
                break
    finally:
        lock.release()
    if redis.exists(AGAIN):  # a trigger between our last look and the release
        run_cycle.delay()
