"""What the project's WebSocket consumers share."""

import asyncio
import weakref

from channels.consumer import get_handler_name
from channels.db import DatabaseSyncToAsync


class DirectDispatch:
    """Dispatch each message straight to its handler.

    Channels' own dispatch first closes old database connections on the one shared
    sync thread, for every message of every connection: with thousands of agents heartbeating,
    every message queued behind every other on that thread. These consumers make their
    database calls through `DatabaseSyncToAsync`, which closes its own thread's old connections
    before and after each call, so the hop buys nothing.
    """

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class GroupCommit:
    """Writes that many connections of one process make at once, done together (group commit):
    while one batch is in the database the next one gathers, so the 1,000 acks of a 1,000-node
    save cost a few round trips instead of 1,000.

    `apply` takes a list of items and returns one result per item; it runs on a pool thread
    with its own connection. Each caller awaits its own item's result. If a batch fails, its
    items are applied one at a time, so one bad item fails only its own caller.
    """

    def __init__(self, apply):
        self._apply = DatabaseSyncToAsync(apply, thread_sensitive=False)
        self._gathering = weakref.WeakKeyDictionary()  # event loop -> [(item, future)]

    async def __call__(self, item):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        gathering = self._gathering.get(loop)
        if gathering is None:  # no batch in flight on this loop: start one
            self._gathering[loop] = gathering = []
            loop.create_task(self._drain(loop))
        gathering.append((item, future))
        return await future

    async def _drain(self, loop):
        try:
            while batch := self._gathering[loop]:
                self._gathering[loop] = []
                try:
                    results = await self._apply([item for item, _ in batch])
                except Exception:
                    for item, future in batch:
                        await self._one(item, future)
                else:
                    for (_, future), result in zip(batch, results, strict=True):
                        if not future.done():  # its caller may have gone (a disconnect)
                            future.set_result(result)
        finally:
            del self._gathering[loop]

    async def _one(self, item, future):
        try:
            [result] = await self._apply([item])
        except Exception as error:
            if not future.done():
                future.set_exception(error)
        else:
            if not future.done():
                future.set_result(result)
