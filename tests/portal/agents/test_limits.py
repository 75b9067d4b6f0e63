"""Bounds on what agents send, over real sockets to a real ASGI server: a flooding connection
has the excess dropped and logged and the server stays responsive; one node's faults are
recorded once per repeat and at most so many a minute, and browsers hear each once."""

import json
import time
import urllib.request
from contextlib import contextmanager

import pytest
from django.test import Client
from websockets.sync.client import connect

from portal.agents.limits import FAULTS_PER_MINUTE, MESSAGES_PER_S, Throttle
from portal.cluster.models import FaultEvent
from portal.tenancy.models import ApiToken
from scheduler.agent import protocol
from tests.portal.agents.test_consumer import say_hello
from tests.portal.live_client import LiveClient
from tests.portal.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_url(portal_server, clean_redis):
    return f"ws://127.0.0.1:{portal_server}/ws/agent/"


@contextmanager
def _agent(url, node):
    """A connection that said hello as the node's agent."""
    with connect(url, additional_headers={"Authorization": f"Bearer {node.issue_token()}"}) as ws:
        say_hello(ws, node)
        yield ws


def _round_trip(ws, timeout=30) -> None:
    """Wait until the server answers a malformed message: it has handled all before it. Sent
    again each second, as an agent would: while the server still works through a flood, the
    throttle drops it like the rest."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        ws.send("{")
        try:
            assert json.loads(ws.recv(timeout=1))["type"] == "error"
            return
        except TimeoutError:
            continue
    raise AssertionError(f"the server did not answer in {timeout} s")


def _server_log():
    from django.conf import settings

    return (settings.DATA_DIR / "daphne.log").read_text()


def _fault(code, gpu):
    xid = int(code.removeprefix("xid-"))
    detail = {"code": code, "xid": xid, "gpu_index": gpu, "message": "from a test"}
    return protocol.encode("event", kind="fault", workload_id=None, exit_code=None, detail=detail)


def test_a_throttle_admits_its_burst_then_its_rate_and_reports_once_a_second():
    throttle = Throttle(now=0.0, rate=10, burst=20)
    assert sum(throttle.admit(0.0) for _ in range(100)) == 20
    assert throttle.report(0.0) == 80 and throttle.report(0.5) == 0
    assert sum(throttle.admit(1.0) for _ in range(100)) == 10
    assert throttle.report(1.0) == 90


def test_a_flooding_agent_is_throttled_and_logged_and_the_server_stays_responsive(
    agent_url, portal_server, cluster, bob
):
    node = cluster[0]
    _, token = ApiToken.issue(bob, "probe")
    gpus = [
        {"index": i, "util": 50, "memory_used_mb": 1000, "temperature_c": 60, "power_w": 300}
        for i in range(8)
    ]
    heartbeat = protocol.encode("heartbeat", generation=0, gpus=gpus, workloads=[])
    with _agent(agent_url, node) as ws:
        for _ in range(20_000):
            ws.send(heartbeat)
        flooded = time.monotonic()
        request = urllib.request.Request(
            f"http://127.0.0.1:{portal_server}/api/v1/me/",
            headers={"Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
        api_s = time.monotonic() - flooded
        _round_trip(ws)  # the flood worked off, the agent is heard again
    assert api_s < 2.0, f"an API call took {api_s:.2f} s during the flood"
    wait_until(
        lambda: f"node {node.name}: over {MESSAGES_PER_S} messages a second" in _server_log(),
        10,
        "the drops in the log",
    )


@pytest.fixture
def operators_browser(portal_server, operator):
    browser = Client()
    browser.force_login(operator)
    live = LiveClient(portal_server, browser)
    yield live
    live.close()


def test_the_same_fault_reported_again_is_recorded_and_announced_once(
    agent_url, cluster, operators_browser
):
    node = cluster[0]
    logged = len(_server_log())
    with _agent(agent_url, node) as ws:
        for _ in range(150):
            ws.send(_fault("xid-79", 3))
        ws.send(_fault("xid-79", 4))  # another GPU: another fault
        _round_trip(ws)
    assert list(FaultEvent.objects.values_list("gpu_index", flat=True).order_by("gpu_index")) == [
        3,
        4,
    ]
    operators_browser.wait_for("fault", lambda p: p["node"] == node.name)
    time.sleep(0.5)
    assert len(operators_browser.of("fault")) == 2
    wait_until(
        lambda: f"node {node.name}: fault xid-79 on GPU 3 repeated (100 times" in _server_log(),
        10,
        "the repeats in the log",
    )
    repeats = [line for line in _server_log()[logged:].splitlines() if "repeated (" in line]
    assert [line.split("repeated (")[1].split()[0] for line in repeats] == ["1", "10", "100"]


def test_beyond_the_rate_a_nodes_faults_are_dropped_with_a_warning(agent_url, cluster):
    node, other = cluster[0], cluster[1]
    with _agent(agent_url, node) as ws:
        for code in ("xid-13", "xid-31", "xid-43", "xid-79"):
            for gpu in range(8):
                ws.send(_fault(code, gpu))
        _round_trip(ws)
    with _agent(agent_url, other) as ws:
        ws.send(_fault("xid-13", 0))  # another node has a rate of its own
        _round_trip(ws)
    assert FaultEvent.objects.filter(node=node).count() == FAULTS_PER_MINUTE
    assert FaultEvent.objects.filter(node=other).count() == 1
    wait_until(
        lambda: (
            f"over {FAULTS_PER_MINUTE} faults that call for action in a minute "
            f"({FAULTS_PER_MINUTE + 12})" in _server_log()
        ),
        10,
        "the drops in the log",
    )


def test_a_flood_of_faults_that_only_inform_never_hides_one_that_calls_for_action(
    agent_url, cluster
):
    node = cluster[0]
    with _agent(agent_url, node) as ws:
        for code in ("xid-45", "xid-92"):  # informational: no action
            for gpu in range(12):
                ws.send(_fault(code, gpu))
        ws.send(_fault("xid-48", 0))  # a double-bit ECC error: the GPU's jobs are lost
        _round_trip(ws)
    kinds = list(FaultEvent.objects.filter(node=node).values_list("kind", flat=True))
    assert len(kinds) == FAULTS_PER_MINUTE + 1
    assert "xid-48" in kinds
    assert f"over {FAULTS_PER_MINUTE} faults that only inform in a minute" in _server_log()
