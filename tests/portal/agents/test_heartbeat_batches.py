"""Heartbeats' Redis writes: those that arrive together go in one pipeline, each still gets
its own replies, and a failure reaches every caller of its batch at once (real Redis)."""

import asyncio
import socket

import pytest
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from portal.agents import consumers
from portal.core.consumers import GroupCommit

KEY = "wanka:test:beats"


@pytest.fixture
def executes(monkeypatch):
    """The pipelines sent to Redis, as the number of commands in each."""
    sent = []
    execute = redis.asyncio.client.Pipeline.execute

    async def counted(self, *args, **kwargs):
        sent.append(len(self))
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.client.Pipeline, "execute", counted)
    return sent


def beat(i):
    def write(pipe):
        pipe.hset(KEY, i, f"beat {i}")
        pipe.srem(f"{KEY}:lost", i)  # the reply the consumer reads: was the node declared lost

    return write


def test_heartbeats_that_arrive_together_share_one_pipeline(clean_redis, executes):
    clean_redis.delete(KEY, f"{KEY}:lost", f"{KEY}:text")
    clean_redis.sadd(f"{KEY}:lost", 3, 7)
    clean_redis.set(f"{KEY}:text", "not a hash")

    def wrong(pipe):
        pipe.hset(f"{KEY}:text", "x", 1)  # a command Redis refuses

    def broken(pipe):
        pipe.hset(KEY, "broken", 1)
        raise KeyError("util")  # a heartbeat whose writes fail before they are sent

    async def arrive():
        return await asyncio.gather(
            *(consumers.BEATS(beat(i)) for i in range(10)),
            consumers.BEATS(wrong),
            consumers.BEATS(broken),
            return_exceptions=True,
        )

    *replies, refused, failed = asyncio.run(arrive())
    assert executes == [21]  # ten heartbeats of two commands and the refused one: one trip
    assert replies == [[1, 1 if i in (3, 7) else 0] for i in range(10)]
    assert isinstance(refused, ResponseError)
    assert isinstance(failed, KeyError) and not clean_redis.hexists(KEY, "broken")
    assert clean_redis.hget(KEY, 9) == "beat 9"
    # When it is quiet, a heartbeat goes at once, alone.
    assert asyncio.run(consumers.BEATS(beat(3))) == [0, 0]
    assert executes == [21, 2]


def test_with_redis_unreachable_every_caller_of_the_batch_gets_the_error(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]  # nothing listens once the socket is closed
    monkeypatch.setattr(consumers, "aclient", lambda: redis.asyncio.Redis(port=dead, retry=None))
    batches = []

    async def apply(writers):
        batches.append(len(writers))
        return await consumers.write_to_redis(writers)

    commit = GroupCommit(apply, retry_alone=False)

    async def arrive():
        return await asyncio.gather(*(commit(beat(i)) for i in range(5)), return_exceptions=True)

    results = asyncio.run(arrive())
    assert all(isinstance(r, RedisConnectionError) for r in results)
    assert batches == [5]  # not tried again one at a time
