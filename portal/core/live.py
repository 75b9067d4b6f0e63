"""The one-way live path: domain event -> on commit -> channel layer group -> browser.

Group names come from the helpers below, one per scope, so senders and consumers agree.
"""

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

CLUSTER_GROUP = "cluster"  # everyone signed in: nothing that names a tenant's workload
OPS_GROUP = "ops"  # operators (staff): everything


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def node_group(node_id: int) -> str:
    return f"node.{node_id}"


def send_now(group: str, message: dict) -> None:
    async_to_sync(get_channel_layer().group_send)(group, message)


def send_many(messages: list[tuple[str, dict]]) -> None:
    """Send each (group, message) pair, all concurrently: a recovery of a 1,000-node job
    speaks to 1,000 agents at once."""
    if messages:
        async_to_sync(_send_many)(messages)


# At most this many sends in flight: outside an ASGI server each call runs on a fresh event
# loop, where every concurrent send would open a Redis connection of its own.
SENDS_IN_FLIGHT = 32


async def _send_many(messages: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()
    gate = asyncio.Semaphore(SENDS_IN_FLIGHT)

    async def send(group: str, message: dict) -> None:
        async with gate:
            await layer.group_send(group, message)

    await asyncio.gather(*(send(group, message) for group, message in messages))


def publish(group: str, event: str, payload: dict) -> None:
    """Send `event` to browsers in `group` once the current transaction commits."""
    message = {"type": "live.event", "event": event, "payload": payload}
    transaction.on_commit(lambda: send_now(group, message))


def publish_tenant(tenant_id: int, event: str, payload: dict) -> None:
    publish(tenant_group(tenant_id), event, payload)
