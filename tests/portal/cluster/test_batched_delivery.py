"""What a 1,000-node job brings at once: acks gathered into batches (group commit), and
messages to many agents sent as one channel-layer message per server process."""

import asyncio
import time
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from portal.cluster.choices import CommandState
from portal.cluster.commands import answer_many, send_commands
from portal.cluster.delivery import mailbox, tell
from portal.cluster.models import Node, NodeCommand
from portal.core.consumers import GroupCommit

pytestmark = pytest.mark.django_db(transaction=True)


def test_acks_in_one_batch_count_once_each_and_only_from_their_own_node(cluster, caplog):
    a, b, c = (node.pk for node in cluster[:3])
    ca, cb, cc = (str(command.pk) for command in send_commands([a, b, c], "checkpoint"))
    results = answer_many(
        [
            (a, ca, True, "saved step 7 on a"),
            (b, cb, False, "no space left"),
            (a, ca, False, "a repeat"),  # the first answer counts
            (a, cc, True, "not a's command"),
            (c, str(uuid.uuid4()), True, "never sent"),
            (c, "not-a-uuid", True, "malformed"),
        ]
    )
    assert [command is not None for command in results] == [True, True, False, False, False, False]
    commands = NodeCommand.objects.in_bulk()
    assert (commands[uuid.UUID(ca)].state, commands[uuid.UUID(ca)].detail) == (
        CommandState.DONE,
        "saved step 7 on a",
    )
    assert (commands[uuid.UUID(cb)].state, commands[uuid.UUID(cb)].detail) == (
        CommandState.FAILED,
        "no space left",
    )
    assert commands[uuid.UUID(cc)].state == CommandState.SENT
    assert commands[uuid.UUID(ca)].answered_at is not None
    unknown = [r.getMessage() for r in caplog.records if "unknown command" in r.getMessage()]
    assert len(unknown) == 3  # a's claim on c's command, the unsent one, the malformed one


def test_concurrent_callers_share_a_batch_and_a_bad_item_fails_only_its_caller():
    batches = []

    def apply(items):
        batches.append(list(items))
        time.sleep(0.05)  # a round trip to the database: the next batch gathers meanwhile
        if "bad" in items:
            raise ValueError("bad item")
        return [item.upper() for item in items]

    commit = GroupCommit(apply)

    async def callers():
        first = asyncio.ensure_future(commit("first"))
        await asyncio.sleep(0.01)  # the first batch is in flight now
        rest = [commit(item) for item in ("a", "bad", "b")]
        return await asyncio.gather(first, *rest, return_exceptions=True)

    first, a, bad, b = asyncio.run(callers())
    assert (first, a, b) == ("FIRST", "A", "B")
    assert isinstance(bad, ValueError)
    # The three later calls were one batch; when it failed, each was applied alone.
    assert batches == [["first"], ["a", "bad", "b"], ["a"], ["bad"], ["b"]]


def test_messages_to_many_agents_travel_as_one_delivery_per_process_and_batch(
    cluster, clean_redis, monkeypatch
):
    monkeypatch.setattr("portal.cluster.delivery.PER_DELIVERY", 5)
    layer = get_channel_layer()
    process = async_to_sync(layer.new_channel)().partition("!")[0]  # this process's prefix
    nodes = list(Node.objects.order_by("pk"))
    for i, node in enumerate(nodes):
        node.agent_channel = f"{process}!agent-{i}"
    Node.objects.bulk_update(nodes, ["agent_channel"])
    Node.objects.filter(pk=nodes[0].pk).update(connected=False, agent_channel="")
    tell({node.pk: {"type": "agent.sync", "n": node.pk} for node in nodes})

    async def deliveries(count):
        return [await layer.receive(mailbox(f"{process}!any")) for _ in range(count)]

    connected = len(nodes) - 1
    received = async_to_sync(deliveries)(-(-connected // 5))
    assert [len(d["messages"]) for d in received] == [5] * (connected // 5) + (
        [connected % 5] if connected % 5 else []
    )
    delivered = {channel: message["n"] for d in received for channel, message in d["messages"]}
    # Every connected agent's message, to its own connection; the disconnected node left out.
    assert delivered == {f"{process}!agent-{i}": node.pk for i, node in enumerate(nodes) if i > 0}
