"""Work handed to Celery workers once the current transaction commits. Tasks are named, not
imported: the task modules import the domain, never the other way round.

Each is a head start on a beat sweep that does the same work anyway, so a broker that cannot be
reached is logged and fails nothing: what was committed stands and its answer says so."""

from celery import current_app
from django.db import transaction

RUN_CYCLE = "portal.workloads.tasks.run_cycle"
ADVANCE_RECOVERY = "portal.workloads.tasks.advance_recovery"
ADVANCE_PREEMPTIONS = "portal.workloads.tasks.advance_preemptions"


def trigger_cycle() -> None:
    """Run a scheduling cycle once the current transaction commits."""
    transaction.on_commit(lambda: current_app.signature(RUN_CYCLE).delay(), robust=True)


def kick_recovery(recovery_id: int) -> None:
    """Have a worker advance the recovery once the current transaction commits."""
    transaction.on_commit(
        lambda: current_app.signature(ADVANCE_RECOVERY, (recovery_id,)).delay(), robust=True
    )


def kick_preemptions() -> None:
    """Have a worker move the preemptions on (a save they wait for was answered) on commit."""
    transaction.on_commit(lambda: current_app.signature(ADVANCE_PREEMPTIONS).delay(), robust=True)
