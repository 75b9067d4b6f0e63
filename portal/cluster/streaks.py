"""Nodes on which job after job fails: FAILURES jobs in a row ending non-zero on one node within
WINDOW_S, none ending well in between and of at least TENANTS tenants, cordon it with the
reason, so that nothing more is placed there until an operator has looked (a broken GPU back
in service fails every job fast, whoever's). One tenant's jobs failing, however many, are its
own code's failures as far as anyone can tell: they never take a shared node away."""

import logging
import time

from django.db import transaction

from portal.cluster.choices import HEALTH_MOVES, Health
from portal.cluster.models import Node
from scheduler.words import phrase

log = logging.getLogger(__name__)

FAILURES = 3
TENANTS = 2
WINDOW_S = 600
FAILED_IN_A_ROW = phrase(
    "{jobs} jobs of {tenants} or more tenants in a row failed on it within {minutes} minutes "
    "(the last exited with code {code})"
)


def job_ended(node_id: int, exit_code: int, tenant_id: int) -> None:
    """A job of `tenant_id` exited on the node (call once that is committed): an exit 0 ends the
    node's streak of failures; one that failed the job joins it, and the FAILURES-th within
    WINDOW_S, of TENANTS tenants or more, cordons the node."""
    if exit_code == 0:
        Node.objects.filter(pk=node_id).exclude(recent_failures=[]).update(recent_failures=[])
        return
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        now = time.time()
        recent = [(at, tenant) for at, tenant in node.recent_failures if at > now - WINDOW_S]
        failures = [*recent, (now, tenant_id)][-FAILURES:]
        cordon = (
            len(failures) >= FAILURES
            and len({tenant for _, tenant in failures}) >= TENANTS
            and Health.CORDONED in HEALTH_MOVES[Health(node.health)]
        )
        node.recent_failures = [] if cordon else [list(f) for f in failures]
        node.save(update_fields=["recent_failures"])
        if cordon:
            reason = FAILED_IN_A_ROW.format(
                jobs=len(failures), tenants=TENANTS, minutes=WINDOW_S // 60, code=exit_code
            )
            node.set_health(Health.CORDONED, reason)
            log.warning("node %s cordoned: %s", node.name, reason)
