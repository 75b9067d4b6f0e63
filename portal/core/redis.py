"""Redis clients for what is not SQL: latest telemetry, utilization history, the cycle lock."""

import asyncio
from functools import cache

import redis
import redis.asyncio
from django.conf import settings


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)


_async_clients: dict[int, redis.asyncio.Redis] = {}


def aclient() -> redis.asyncio.Redis:
    """A client for the running event loop (an asyncio client cannot cross loops)."""
    loop = id(asyncio.get_running_loop())
    if loop not in _async_clients:
        _async_clients[loop] = redis.asyncio.Redis.from_url(
            settings.REDIS_URL, decode_responses=True
        )
    return _async_clients[loop]
