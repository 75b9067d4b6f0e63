import logging

from celery import shared_task

from portal.core.redis import client
from portal.workloads import recovery
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


@shared_task(acks_late=True, soft_time_limit=30)
def advance_recovery(recovery_id: int) -> None:
    """Move a recovery on; while it waits for a save's acks, look again shortly.
    (acks_late: a worker that dies mid-step leaves the message to be delivered again.)"""
    if recovery.advance(recovery_id):
        advance_recovery.apply_async((recovery_id,), countdown=recovery.LOOK_AGAIN_S)


@shared_task(soft_time_limit=20, expires=5)
def resume_recoveries() -> list[int]:
    """Beat, every 5 s: pick up recoveries that no worker has moved for a while."""
    stale = recovery.stale()
    for recovery_id in stale:
        advance_recovery.delay(recovery_id)
    return stale
