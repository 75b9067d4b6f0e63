"""The agents' server keeps each node's GPU history from its heartbeats: a point a minute, not
one a heartbeat (a real agent on a real socket, beating every 0.1 s)."""

import json
import time

import pytest

from portal.cluster.gpu_history import MINUTES
from portal.cluster.models import Node
from portal.cluster.summary import TELEMETRY
from tests.portal.agents.test_consumer import AgentThread
from tests.portal.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_burst_of_heartbeats_makes_one_point_a_minute(portal_server, cluster, clean_redis):
    Node.objects.update(connected=False)
    node = cluster[0]
    key = f"{MINUTES}{node.pk}"
    agent = AgentThread(f"ws://127.0.0.1:{portal_server}/ws/agent/", node)
    try:
        wait_until(lambda: clean_redis.llen(key) >= 1, 15, "the node's first point")
        first = json.loads(clean_redis.hget(TELEMETRY, node.pk))["ts"]
        time.sleep(1.5)  # some 15 more heartbeats
        assert json.loads(clean_redis.hget(TELEMETRY, node.pk))["ts"] - first > 1
        points = [json.loads(p) for p in clean_redis.lrange(key, 0, -1)]
        assert len(points) <= 2  # one per minute begun meanwhile
        ts, rows = points[0]
        assert [row[0] for row in rows] == list(range(8))  # every GPU of the node
        assert all(0 <= util <= 100 and isinstance(memory, int) for _, util, memory, *_ in rows)
        assert abs(ts - first) < 60
    finally:
        agent.stop()
