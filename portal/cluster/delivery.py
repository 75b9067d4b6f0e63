"""Delivery of messages to node agents, through their server process's mailbox.

One channel per ASGI process (Channels' process-specific names share everything up to their
'!'), read by `portal.agents.consumers.read_mailbox`. A message for 1,000 agents of one process
is one channel-layer message, not 1,000: a layer reads its process's messages one round trip at
a time, which made pushing a restart to a 1,000-node job take seconds.
"""

import asyncio
from collections import defaultdict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from portal.cluster.models import Node

MAILBOX = "agents"
PER_DELIVERY = 500  # agents' messages in one channel-layer message


def mailbox(agent_channel: str) -> str:
    """The mailbox of the server process that holds the connection `agent_channel`."""
    return f"{agent_channel.partition('!')[0]}!{MAILBOX}"


def tell(messages: dict[int, dict]) -> None:
    """Send each node's agent its message (a consumer handler's `type` and fields), now: one
    channel-layer message per server process and 500 agents. Nodes without a connection are
    left out; they hear everything when they say hello."""
    channels = dict(
        Node.objects.filter(pk__in=messages, connected=True)
        .exclude(agent_channel="")
        .values_list("pk", "agent_channel")
    )
    tell_channels([(channels[n], messages[n]) for n in sorted(channels)])


def tell_channels(messages: list[tuple[str, dict]]) -> None:
    """Send each (agent connection, message) pair, batched per server process as `tell`."""
    batches = defaultdict(list)
    for channel, message in messages:
        batches[mailbox(channel)].append((channel, message))
    deliveries = [
        (box, {"type": "agents.deliver", "messages": batch[i : i + PER_DELIVERY]})
        for box, batch in batches.items()
        for i in range(0, len(batch), PER_DELIVERY)
    ]
    if deliveries:
        async_to_sync(_send)(deliveries)


async def _send(deliveries: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()
    await asyncio.gather(*(layer.send(box, delivery) for box, delivery in deliveries))
