"""What the project's WebSocket consumers share."""

import asyncio
import inspect
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

    `apply` takes a list of items and returns one result per item (an exception: that
    item's caller gets it raised); a plain function runs on a pool thread with its own
    database connection, a coroutine function (writes to Redis) on the event loop. Each caller
    awaits its own item's result. If a batch fails, its items are applied one at a time, so one
    bad item fails only its own caller; with `retry_alone` False every caller gets the error
    (for an `apply` whose failures are never one item's).
    """

    def __init__(self, apply, retry_alone: bool = True):
        if not inspect.iscoroutinefunction(apply):
            apply = DatabaseSyncToAsync(apply, thread_sensitive=False)
        self._apply = apply
        self._retry_alone = retry_alone
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
                except Exception as error:
                    for item, future in batch:
                        if self._retry_alone:
                            await self._one(item, future)
                        else:
                            _settle(future, error)
                else:
                    for (_, future), result in zip(batch, results, strict=True):
                        _settle(future, result)
        finally:
            del self._gathering[loop]

    async def _one(self, item, future):
        try:
            [result] = await self._apply([item])
        except Exception as error:
            result = error
        _settle(future, result)


def _settle(future, result) -> None:
    """Give a caller its result, raised if an exception, unless it has gone (a disconnect)."""
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
