"""Live events to browsers, fanned out per process: an event is one Redis PUBLISH, whatever the
number of browsers; each ASGI process holds one subscription and hands the event to its own
sockets of the event's group.

A channel-layer group costs a message per member: a push to 2,000 browsers was 2,000 queue
writes in Redis and 2,000 reads back (`bench.fanout` measures both ways). Pub/sub is fire and
forget, as groups are past their capacity: a page asks where things stand whenever its socket
opens (`static/js/live.js`), so an event missed while a process reconnects costs nothing that
lasts. The channel is named after the Redis database, since pub/sub ignores databases and
two installations may share one server.
"""

import asyncio
import json
import logging
from collections import defaultdict

from redis import RedisError

from portal.core.redis import aclient, client

log = logging.getLogger(__name__)

RETRY_S = 1.0  # after the subscription broke, before subscribing again


def channel() -> str:
    return f"wanka:{client().connection_pool.connection_kwargs.get('db', 0)}:live"


def publish(group: str, message: dict) -> None:
    """Send `message` (a consumer handler's `type` and fields) to every socket in `group`."""
    client().publish(channel(), json.dumps({"group": group, "message": message}))


class Hub:
    """One event loop's sockets by group, and the subscription that feeds them."""

    def __init__(self) -> None:
        self.members: defaultdict[str, set] = defaultdict(set)
        self._listening: asyncio.Task | None = None
        self._subscribed = asyncio.Event()

    async def join(self, group: str, consumer) -> None:
        """Add the socket to the group; return once the process is subscribed, so that an
        event published after the socket opens reaches it."""
        self.members[group].add(consumer)
        if self._listening is None or self._listening.done():
            self._listening = asyncio.get_running_loop().create_task(self._listen())
        await asyncio.wait_for(self._subscribed.wait(), timeout=10)

    def leave(self, group: str, consumer) -> None:
        sockets = self.members.get(group)
        if sockets is not None:
            sockets.discard(consumer)
            if not sockets:
                del self.members[group]

    async def deliver(self, group: str, message: dict) -> None:
        """Hand `message` to each socket of the group, one after the other (a send only
        queues the frame on its connection)."""
        for consumer in list(self.members.get(group, ())):
            try:
                await consumer.dispatch(message)
            except Exception:  # one socket's failure is its own
                log.exception("live: a socket of %s failed an event", group)

    async def _listen(self) -> None:
        while self.members:
            try:
                async with aclient().pubsub() as subscription:
                    await subscription.subscribe(channel())
                    self._subscribed.set()
                    async for raw in subscription.listen():
                        if raw["type"] == "message":
                            event = json.loads(raw["data"])
                            await self.deliver(event["group"], event["message"])
                        if not self.members:
                            return
            except (RedisError, OSError):
                log.warning("live: the subscription broke; subscribing again", exc_info=True)
                await asyncio.sleep(RETRY_S)
            finally:
                self._subscribed.clear()


_hubs: dict[int, Hub] = {}


def hub() -> Hub:
    """The running event loop's hub (one per ASGI process)."""
    loop = id(asyncio.get_running_loop())
    if loop not in _hubs:
        _hubs[loop] = Hub()
    return _hubs[loop]
