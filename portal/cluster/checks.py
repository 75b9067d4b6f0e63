"""A repaired node returns to service only once its agent has passed a health check: its GPUs
answer and compute (NVML, and a short allocation and kernel on each where PyTorch is
installed), and no process that no workload started holds one (what a crashed agent left, or
anything else on the machine). Until then it stays repairing and nothing is booked there, so
the GPUs of a node lost with its work still running are never given to another job before its
agent has confirmed them free."""

import logging

from django.db import transaction

from portal.cluster.choices import CommandState, Health
from portal.cluster.commands import send_command
from portal.cluster.models import Node, NodeCommand
from portal.core.errors import Conflict
from portal.core.models import audit
from scheduler.words import phrase

log = logging.getLogger(__name__)

ACTION = "health_check"
ASKED = phrase("health check asked of its agent")
PASSED_CHECK = phrase("passed its health check: {detail}")
FAILED_CHECK = phrase("failed its health check: {detail}")
DRAINED = phrase("drained: it holds no more work")


def move(node: Node, to: Health, reason: str, actor=None) -> None:
    """Move the node (locked by the caller) along its lifecycle as an operator asks; a
    repaired node asked back to ready is sent a health check instead, and returns to service
    when its agent passes it (`answered`)."""
    if to == Health.READY and node.health == Health.REPAIRING:
        ask(node, reason, actor)
    else:
        node.set_health(to, reason, actor)


def ask(node: Node, reason: str = "", actor=None) -> NodeCommand:
    """Send the node's agent a health check; Conflict when no agent is connected to run it."""
    if not node.connected:
        raise Conflict(
            f"{node}'s agent is not connected: a repaired node returns to service once its "
            "agent has passed a health check"
        )
    audit("node.check", node, actor=actor, reason=reason)
    node.health_reason = ASKED
    node.save(update_fields=["health_reason"])
    return send_command(node.pk, ACTION)


def answered(commands: list[NodeCommand]) -> None:
    """Act on answered health checks: a pass returns a node still repairing to service (and
    to the hot spares where its pod is short), a failure sends it back down with the reason."""
    for command in commands:
        with transaction.atomic():
            node = Node.objects.select_for_update().get(pk=command.node_id)
            if node.health != Health.REPAIRING:
                continue  # an operator moved it meanwhile
            if command.state == CommandState.DONE:
                said = PASSED_CHECK.format(detail=command.detail)
                node.set_health(Health.READY, said, checked=True)
            else:
                node.set_health(Health.DOWN, FAILED_CHECK.format(detail=command.detail))
                log.warning("node %s failed its health check: %s", node.name, command.detail)
