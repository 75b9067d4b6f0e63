from celery import shared_task

from portal.agents import intake, progress


@shared_task(soft_time_limit=20, expires=10)
def mark_lost_nodes() -> list[int]:
    """Beat, every 5 s: nodes that stopped heartbeating get a heartbeat-loss fault."""
    return intake.mark_lost_nodes()


@shared_task(soft_time_limit=20, expires=10)
def detect_stalls() -> list[str]:
    """Beat, every 10 s: hung jobs and straggling nodes, from heartbeats' step counters."""
    return progress.detect()


@shared_task(soft_time_limit=20, expires=5)
def move_off_nodes() -> list[int]:
    """Beat, every 5 s: drains and marks-down carried to the jobs on those nodes."""
    return intake.carry_out_node_moves()
