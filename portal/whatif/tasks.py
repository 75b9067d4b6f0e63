from celery import shared_task

from portal.whatif.runs import execute


@shared_task(acks_late=True, soft_time_limit=3600, time_limit=3700)
def run_whatif(run_id: int) -> None:
    """Run a what-if simulation; its progress and results are on its row."""
    execute(run_id)
