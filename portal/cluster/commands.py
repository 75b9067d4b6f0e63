"""Commands to node agents: sent over the channel layer, remembered in the database until
acked, and sent again when the agent reconnects (agents run a command id at most once)."""

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.cluster.choices import CommandState
from portal.cluster.models import NodeCommand
from portal.core.live import node_group, send_many

log = logging.getLogger(__name__)

# Older unanswered commands are not resent: what they asked for has been decided otherwise.
RESEND_WITHIN = timedelta(minutes=10)


def send_command(node_id: int, action: str, workload_id: int | None = None,
                 **args) -> NodeCommand:
    """Record a command for the node's agent and send it once the transaction commits."""
    return send_commands([node_id], action, workload_id, **args)[0]


def send_commands(node_ids, action: str, workload_id: int | None = None,
                  **args) -> list[NodeCommand]:
    """The same command to each node's agent (each with its own id), sent on commit."""
    commands = NodeCommand.objects.bulk_create(
        NodeCommand(node_id=node_id, action=action, workload_id=workload_id, args=args)
        for node_id in node_ids)
    messages = [(node_group(c.node_id), {"type": "agent.command", **c.message()})
                for c in commands]
    transaction.on_commit(lambda: send_many(messages))
    return commands


def unanswered(node_id: int) -> list[dict]:
    """The `command` message fields of the node's recent commands still waiting for an ack."""
    since = timezone.now() - RESEND_WITHIN
    commands = NodeCommand.objects.filter(node_id=node_id, state=CommandState.SENT,
                                          created_at__gte=since)
    return [command.message() for command in commands]


def answer(node_id: int, command_id: str, ok: bool, detail: str) -> bool:
    """Record an agent's ack; the first one counts. False for an id this node was never sent
    or has answered already. One query for a success, which is what a 1,000-node save sends
    1,000 of; a refusal also wakes whoever waits on the command."""
    state = CommandState.DONE if ok else CommandState.FAILED
    claimed = NodeCommand.objects.filter(pk=command_id, node_id=node_id,
                                         state=CommandState.SENT).update(
        state=state, detail=detail[:500], answered_at=timezone.now())
    if not claimed:
        if not NodeCommand.objects.filter(pk=command_id, node_id=node_id).exists():
            log.warning("node %s acked unknown command %s", node_id, command_id)
        return False
    if not ok:
        from portal.workloads.recovery import command_refused

        command_refused(NodeCommand.objects.get(pk=command_id))
    return True
