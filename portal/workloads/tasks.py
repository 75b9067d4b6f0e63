from celery import shared_task
from django.db import OperationalError
from django.utils import timezone
from psycopg.errors import DeadlockDetected

from portal.workloads import (
    budgets,
    charts,
    checkpoints,
    desired,
    eta,
    logs,
    preemption,
    recovery,
)
from portal.workloads.cycle import run_cycles


@shared_task(soft_time_limit=60)
def run_cycle() -> None:
    """Run scheduling cycles until no trigger is left (see `cycle.run_cycles`)."""
    if run_cycles():
        run_cycle.delay()


@shared_task(bind=True, acks_late=True, soft_time_limit=30, max_retries=5)
def advance_recovery(self, recovery_id: int) -> None:
    """Move a recovery on. One that waits for a save is woken by the answers, or by this
    task again when its grace ends. (acks_late: a worker that dies mid-step leaves the message
    to be delivered again.) A step PostgreSQL rolled back to break a deadlock is tried again
    at once, rather than left for `resume_recoveries` while the job waits."""
    try:
        grace_ends = recovery.advance(recovery_id)
    except OperationalError as error:
        if not isinstance(error.__cause__, DeadlockDetected):
            raise
        raise self.retry(exc=error, countdown=0.1 * (self.request.retries + 1)) from None
    if grace_ends is not None:
        wait = (grace_ends - timezone.now()).total_seconds()
        advance_recovery.apply_async((recovery_id,), countdown=max(0.0, wait) + 0.05)


@shared_task(soft_time_limit=20, expires=5)
def resume_recoveries() -> list[int]:
    """Beat, every 5 s: pick up recoveries that no worker has moved for a while."""
    stale = recovery.stale()
    for recovery_id in stale:
        advance_recovery.delay(recovery_id)
    return stale


@shared_task(soft_time_limit=20, expires=5)
def advance_preemptions() -> list[int]:
    """Beat, every 2 s, and on the acks of their saves: move preempted workloads on."""
    return preemption.advance()


@shared_task(soft_time_limit=20, expires=10)
def request_checkpoints() -> list[int]:
    """Beat, every 10 s: ask running jobs for the routine saves that are due."""
    return checkpoints.request_routine()


@shared_task(soft_time_limit=60, expires=300)
def trim_logs() -> int:
    """Beat, every 10 minutes: drop output past its age or its workload's size limit."""
    return logs.trim()


@shared_task(soft_time_limit=50, expires=60)
def warn_budgets() -> int:
    """Beat, every minute: warn tenants of budget thresholds crossed (`budgets.warn`)."""
    return len(budgets.warn())


@shared_task(soft_time_limit=25, expires=30)
def refresh_estimates() -> int | None:
    """Beat, every 30 s: estimated starts of pending work (`eta.refresh`), one refresh at a
    time; None when another was still running."""
    return eta.refresh_once()


@shared_task(soft_time_limit=20, expires=10)
def resync_agents() -> list[int]:
    """Beat, every 10 s: agents still behind their nodes' desired state hear it again."""
    return desired.resync_behind()


@shared_task(soft_time_limit=20, expires=20)
def refresh_day_charts() -> list[str]:
    """Beat, every 30 s: the cluster's dashboard charts, kept for every web process (the
    day's each time, the week's and month's when they are about to expire)."""
    return charts.refresh_cluster()
