from celery import shared_task

from portal.whatif import runs


@shared_task(acks_late=True, soft_time_limit=3600, time_limit=3700)
def run_whatif(run_id: int) -> None:
    """Run a what-if simulation; its progress and results are on its row."""
    runs.execute(run_id)


@shared_task(soft_time_limit=20, expires=30)
def resume_whatifs() -> list[int]:
    """Beat, every 30 s: run again the what-ifs whose worker died mid-run."""
    stale = runs.requeue_stale()
    for run_id in stale:
        run_whatif.delay(run_id)
    return stale
