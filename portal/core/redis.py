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
    """A client for the running event loop (an asyncio client cannot cross loops). Its pool
    makes a burst of callers wait for one of its connections instead of failing."""
    loop = id(asyncio.get_running_loop())
    if loop not in _async_clients:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            settings.REDIS_URL, decode_responses=True, max_connections=200, timeout=30
        )
        _async_clients[loop] = redis.asyncio.Redis(connection_pool=pool)
    return _async_clients[loop]
