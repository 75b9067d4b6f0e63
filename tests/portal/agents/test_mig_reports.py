"""MIG layouts in heartbeats, as the portal keeps them: over a real socket to a real server."""

import json

import pytest
from django.conf import settings
from websockets.sync.client import connect

from portal.cluster.models import Gpu
from portal.cluster.summary import node_live
from scheduler.agent import protocol
from scheduler.agent.simulated import SimulatedGpus
from tests.portal.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def beat(ws, gpus: list[dict]) -> None:
    """A heartbeat, then a round trip (a malformed frame's error) so it has been handled."""
    ws.send(protocol.encode("heartbeat", generation=0, gpus=gpus, workloads=[]))
    ws.send("{")
    while json.loads(ws.recv(timeout=10))["type"] != "error":
        pass  # a desired state sent meanwhile


def test_a_layout_is_kept_per_gpu_and_a_malformed_one_costs_only_itself(
    portal_server, clean_redis, cluster
):
    node = cluster[0]
    machine = SimulatedGpus(node.name, "H800", gpus=3, mig=True)
    gpus = [sample.to_message() for sample in machine.telemetry(busy={0})]
    layout = gpus[0]["mig"]
    gpus[1]["mig"] = {"enabled": True, "pending": True, "devices": "3g.40gb"}
    del gpus[2]["mig"]
    url = f"ws://127.0.0.1:{portal_server}/ws/agent/"
    with connect(url, additional_headers={"Authorization": f"Bearer {node.issue_token()}"}) as ws:
        inventory = machine.inventory().to_message()
        ws.send(protocol.encode("hello", agent_version="t", generation=0, workloads=[],
                                node=inventory))  # fmt: skip
        ws.recv(timeout=10)
        beat(ws, gpus)
        kept = dict(Gpu.objects.filter(node=node).values_list("index", "mig"))
        assert (kept[0], kept[1], kept[2]) == (layout, {}, {})
        assert [d["in_use"] for d in kept[0]["devices"]] == [True] * 4
        live = node_live(node.pk)["gpus"]  # the rest of the heartbeat was taken
        assert [g["index"] for g in live] == [0, 1, 2] and not any("mig" in g for g in live)
        log = (settings.DATA_DIR / "daphne.log").read_text()
        assert f"node {node.name}: rejected MIG layout: heartbeat.gpus[1].mig.devices" in log
        del gpus[0]["mig"]  # MIG turned off at a reset
        beat(ws, gpus)
        wait_until(lambda: Gpu.objects.get(node=node, index=0).mig == {}, 5, "the layout to go")
