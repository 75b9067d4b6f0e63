"""Commands to node agents: sent over the channel layer, remembered in the database until
acked, and sent again when the agent reconnects (agents run a command id at most once)."""

import logging
import uuid
from collections import defaultdict
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.cluster.choices import CommandState
from portal.cluster.delivery import tell
from portal.cluster.models import NodeCommand

log = logging.getLogger(__name__)

# Older unanswered commands are not resent: what they asked for has been decided otherwise.
RESEND_WITHIN = timedelta(minutes=10)


def send_command(node_id: int, action: str, workload_id: int | None = None, **args) -> NodeCommand:
    """Record a command for the node's agent and send it once the transaction commits."""
    return send_commands([node_id], action, workload_id, **args)[0]


def send_commands(
    node_ids, action: str, workload_id: int | None = None, **args
) -> list[NodeCommand]:
    """The same command to each node's agent (each with its own id), sent on commit."""
    commands = NodeCommand.objects.bulk_create(
        NodeCommand(node_id=node_id, action=action, workload_id=workload_id, args=args)
        for node_id in node_ids
    )
    messages = {c.node_id: {"type": "agent.command", **c.message()} for c in commands}
    transaction.on_commit(lambda: tell(messages))
    return commands


def unanswered(node_id: int) -> list[dict]:
    """The `command` message fields of the node's recent commands still waiting for an ack."""
    since = timezone.now() - RESEND_WITHIN
    commands = NodeCommand.objects.filter(
        node_id=node_id, state=CommandState.SENT, created_at__gte=since
    )
    return [command.message() for command in commands]


def answer(node_id: int, command_id: str, ok: bool, detail: str) -> NodeCommand | None:
    """Record an agent's ack; the first one counts. The command it answered, or None for an id
    this node was never sent or has answered already."""
    return answer_many([(node_id, command_id, ok, detail)])[0]


def answer_many(acks: list[tuple[int, str, bool, str]]) -> list[NodeCommand | None]:
    """Record (node, command id, ok, detail) acks, as `answer` does each: one query, plus one
    update per distinct answer, for any number of them, which is what a 1,000-node save brings
    at once (the agents' server gathers them, `GroupCommit`)."""
    ids = {command_id: _uuid(command_id) for _, command_id, _, _ in acks}
    claimed, answers, results = {}, defaultdict(list), []
    with transaction.atomic():
        waiting = (
            NodeCommand.objects.select_for_update()
            .only("node_id", "action", "workload_id")
            .filter(pk__in=[i for i in ids.values() if i], state=CommandState.SENT)
            .in_bulk()
        )
        for node_id, command_id, ok, detail in acks:
            command = waiting.get(ids[command_id])
            counts = (
                command is not None and command.node_id == node_id and command.pk not in claimed
            )
            if counts:
                command.state = CommandState.DONE if ok else CommandState.FAILED
                command.detail = detail[:500]
                claimed[command.pk] = command
                answers[command.state, detail[:500]].append(command.pk)
            results.append(command if counts else None)
        now = timezone.now()
        for (state, detail), pks in answers.items():
            NodeCommand.objects.filter(pk__in=pks).update(
                state=state, detail=detail, answered_at=now
            )
    _warn_unknown([ack for ack, command in zip(acks, results, strict=True) if not command], ids)
    return results


def _uuid(command_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(command_id)
    except ValueError:
        return None


def _warn_unknown(acks, ids) -> None:
    """Log the acks of ids never sent to the node (an answered one's repeat is no news)."""
    if not acks:
        return
    sent = set(
        NodeCommand.objects.filter(pk__in=[ids[a[1]] for a in acks if ids[a[1]]]).values_list(
            "pk", "node_id"
        )
    )
    for node_id, command_id, _, _ in acks:
        if (ids[command_id], node_id) not in sent:
            log.warning("node %s acked unknown command %s", node_id, command_id)
