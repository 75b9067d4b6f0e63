"""Redis clients for what is not SQL: latest telemetry, utilization history, the cycle lock."""

import asyncio
from functools import cache

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.retry
from django.conf import settings
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError

# A pooled connection whose server went away (a restart) fails the next command sent on it,
# and a pool given to a client gets none of the client's retries: after a Redis restart every
# connection of the pool failed one caller each, a heartbeat write among them. Retried, the
# dead connection is replaced at once; a server that is really down still fails within a
# second (0.1 + 0.2 + 0.4 s between the tries).
RETRIES = 3
RETRY_ON = (ConnectionError, TimeoutError)


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=0.5, base=0.05)


@cache
def client() -> redis.Redis:
    """The process's client. It is handed its pool, so that it never closes that pool: two
    threads asking for the first client at once each make one (`cache` takes no lock), and a
    client that owns its pool closes it when dropped, with the connections the other
    thread's callers were using (requests failed so in the first second of a server)."""
    pool = redis.ConnectionPool.from_url(
        settings.REDIS_URL,
        decode_responses=True,
        retry=redis.retry.Retry(_backoff(), RETRIES, RETRY_ON),
        retry_on_error=list(RETRY_ON),
    )
    return redis.Redis(connection_pool=pool)


_async_clients: dict[int, redis.asyncio.Redis] = {}


def aclient() -> redis.asyncio.Redis:
    """A client for the running event loop (an asyncio client cannot cross loops). Its pool
    makes a burst of callers wait for one of its connections instead of failing."""
    loop = id(asyncio.get_running_loop())
    if loop not in _async_clients:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            decode_responses=True,
            max_connections=200,
            timeout=30,
            retry=redis.asyncio.retry.Retry(_backoff(), RETRIES, RETRY_ON),
            retry_on_error=list(RETRY_ON),
        )
        _async_clients[loop] = redis.asyncio.Redis(connection_pool=pool)
    return _async_clients[loop]
