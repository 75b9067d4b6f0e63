"""The server end of the agent protocol, over real sockets to a real ASGI server."""

import asyncio
import json
import threading

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from portal.cluster.models import FaultEvent, Gpu, Node
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import UsageRecord
from scheduler.agent import protocol
from scheduler.agent.fleet import NodeSpec, build_agent
from tests.builders import api_client, make_workload
from tests.portal.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_url(portal_server, clean_redis):
    return f"ws://127.0.0.1:{portal_server}/ws/agent/"


class AgentThread:
    """The real simulated agent, on an event loop of its own."""

    def __init__(self, url, node: Node):
        spec = NodeSpec(hostname=node.name, token=node.issue_token(), gpu_model="H800")
        self.agent = build_agent(spec, url, heartbeat_s=0.1)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self.agent.run(),), daemon=True
        )
        self.thread.start()

    def stop(self):
        # run() returns once stopped, which ends the thread's run_until_complete.
        asyncio.run_coroutine_threadsafe(self.agent.stop(), self.loop)
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def test_a_node_whose_jobs_carry_much_still_hears_its_whole_desired_state(
    agent_url, acme_llm, cluster
):
    """Five 1-GPU jobs on one node, each near the bound on an assignment (250 kB of
    environment): their node's desired state is 1.26 MB, and its agent starts them all."""
    Node.objects.update(connected=False)
    node = cluster[0]
    Node.objects.exclude(pk=node.pk).update(health="cordoned")  # all five land on this node
    agent = AgentThread(agent_url, node)
    try:
        wait_until(lambda: _refreshed(node).connected, 15, "the node to register")
        jobs = [
            make_workload(acme_llm, f"big-{i}", gpus=1, env={"BLOB": "x" * 250_000})
            for i in range(5)
        ]
        scheduling_cycle()
        running = lambda: all(_refreshed(j).state == State.RUNNING for j in jobs)  # noqa: E731
        wait_until(running, 20, "all five to run")
        assert {j.allocations.get().node_id for j in jobs} == {node.pk}
    finally:
        agent.stop()


def _refreshed(obj):
    obj.refresh_from_db()
    return obj


def test_an_agent_registers_runs_its_workload_and_reports_it_finished(
    agent_url, acme_llm, cluster, bob
):
    Node.objects.update(connected=False)
    node = cluster[0]
    agent = AgentThread(agent_url, node)
    try:
        wait_until(lambda: _refreshed(node).connected, 15, "the node to register")
        assert node.agent_version
        assert Gpu.objects.filter(node=node).count() == 8
        workload = make_workload(acme_llm, "single-node", gpus=8, simulated_duration_s=1.0)
        plan = scheduling_cycle()
        assert [a.workload_id for a in plan.admissions] == [workload.pk]
        wait_until(lambda: _refreshed(workload).state == State.RUNNING, 15, "running")
        wait_until(lambda: _refreshed(workload).state == State.SUCCEEDED, 15, "succeeded")
        assert workload.exit_code == 0
        assert not workload.allocations.exists()
        usage = UsageRecord.objects.get(workload=workload)
        assert usage.gpus == 8 and usage.gpu_hours > 0
        states = list(workload.events.values_list("to_state", flat=True))
        assert states == [State.ADMITTED, State.STARTING, State.RUNNING, State.SUCCEEDED]
        # The node's API page shows what its agent reports live: the generation it reached
        # and each GPU's latest telemetry.
        api = api_client(bob)

        def live():
            return api.get(f"/api/v1/nodes/{node.pk}/").json()

        wait_until(
            lambda: live()["live"].get("reported_generation") == _refreshed(node).generation,
            10,
            "the agent to report the latest generation",
        )
        body = live()
        assert body["generation"] == node.generation
        assert [gpu["index"] for gpu in body["live"]["gpus"]] == list(range(8))
        assert {"util", "memory_used_mb", "temperature_c"} <= set(body["live"]["gpus"][0])
        assert "live" not in api.get("/api/v1/nodes/").json()["results"][0]
    finally:
        agent.stop()
    wait_until(lambda: not _refreshed(node).connected, 10, "the node to show disconnected")


def test_malformed_messages_are_rejected_with_a_reason_and_logged(
    agent_url, portal_server, cluster
):
    node = cluster[0]
    token = node.issue_token()
    with connect(agent_url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=10))["type"] == "error"
        ws.send(
            json.dumps(
                {
                    "type": "heartbeat",
                    "v": 1,
                    "id": "x",
                    "generation": 0,
                    "gpus": [{"index": 0, "util": "busy"}],
                    "workloads": [],
                }
            )
        )
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error" and error["field"].startswith("heartbeat.gpus[0]")
        ws.send(json.dumps({"type": "hello", "v": 99, "id": "y"}))
        assert "version" in json.loads(ws.recv(timeout=10))["reason"]
        # The connection is still sound: a good hello is answered with the desired state.
        ws.send(
            protocol.encode(
                "hello",
                agent_version="test",
                generation=0,
                workloads=[],
                node={"hostname": node.name, "gpu_model": "H800", "gpus": []},
            )
        )
        reply = protocol.parse(ws.recv(timeout=10), "server")
        assert reply["type"] == "desired_state" and reply["assignments"] == []
        assert _refreshed(node).connected
    assert f"node {node.name}: rejected message" in _server_log()


def _server_log():
    from django.conf import settings

    return (settings.DATA_DIR / "daphne.log").read_text()


def test_unknown_tokens_are_refused(agent_url, cluster):
    with pytest.raises(InvalidStatus) as refused:
        connect(agent_url, additional_headers={"Authorization": "Bearer wn_forged"})
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus):
        connect(agent_url)


def test_a_node_cannot_speak_for_another(agent_url, acme_llm, cluster):
    """Node A reporting node B's workload as exited changes nothing: identity is the token."""
    a, b = cluster[0], cluster[4]
    Node.objects.exclude(pk=b.pk).update(connected=False)
    workload = make_workload(acme_llm, "on-b", gpus=8)
    scheduling_cycle()
    assert set(workload.allocations.values_list("node_id", flat=True)) == {b.pk}
    token = a.issue_token()
    with connect(agent_url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        say_hello(ws, a)
        ws.send(
            protocol.encode(
                "event", kind="workload_exited", workload_id=workload.pk, exit_code=0, detail={}
            )
        )
        ws.send("{")  # a round trip: the event before it has been handled
        assert json.loads(ws.recv(timeout=10))["type"] == "error"
    assert _refreshed(workload).state == State.ADMITTED
    assert workload.allocations.count() == 8


def say_hello(ws, node, session=None, **inventory):
    """Say hello as the node's agent (no GPUs, unless `inventory` says otherwise), with the
    session it was last given if any; its answer (the desired state)."""
    ws.send(
        protocol.encode(
            "hello",
            agent_version="t",
            generation=0,
            workloads=[],
            node={"hostname": node.name, "gpu_model": "H800", "gpus": [], **inventory},
            **({"session": session} if session else {}),
        )
    )
    return protocol.parse(ws.recv(timeout=10), "server")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hostname": "another-machine"}, "node.hostname"),
        ({"gpu_model": "A100-FAKE"}, "node.gpu_model"),
        ({"gpus": [8]}, "node.gpus"),
        ({"gpus": [0, 0]}, "node.gpus"),
    ],
    ids=["another hostname", "another model", "a GPU beyond the count", "a GPU twice"],
)  # fmt: skip
def test_a_hello_that_is_not_the_enrolled_node_is_refused_and_changes_nothing(
    agent_url, cluster, change, field
):
    from websockets.exceptions import ConnectionClosed

    node = cluster[0]
    enrolled = {"datacenter": node.leaf.pod.datacenter.name, "driver_version": "550.90"}
    Node.objects.filter(pk=node.pk).update(connected=False, facts=enrolled)
    hello = {"hostname": node.name, "gpu_model": "H800", **change}
    hello["gpus"] = [
        {"index": i, "uuid": f"GPU-{i}", "memory_mb": 1} for i in hello.get("gpus", [])
    ]
    hello["facts"] = _facts(node, **hello.get("facts", {}))
    auth = {"Authorization": f"Bearer {node.issue_token()}"}
    with connect(agent_url, additional_headers=auth) as ws:
        ws.send(protocol.encode("hello", agent_version="t", generation=0, workloads=[], node=hello))
        ws.send(XID_79)  # as an agent sends what it kept right after its hello
        refusal = protocol.parse(ws.recv(timeout=10), "server")
        assert refusal["type"] == "error" and refusal["field"] == field
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4003
    node = _refreshed(node)
    assert not node.connected and node.facts == enrolled and not node.gpus.exists()
    assert not FaultEvent.objects.filter(node=node).exists()
    assert f"node {node.name}: hello refused, connection closed: {field}:" in _server_log()


def test_a_hello_updates_the_facts_but_not_the_nodes_place_and_may_lack_a_gpu(agent_url, cluster):
    node = cluster[0]
    leaf = node.leaf
    place = {"datacenter": leaf.pod.datacenter.name, "pod": leaf.pod.name, "leaf": leaf.name}
    Node.objects.filter(pk=node.pk).update(facts={**place, "gpu_count": 8, "driver_version": "1"})
    gpus = [{"index": i, "uuid": f"GPU-{i}", "memory_mb": 81559} for i in range(7)]  # one is lost
    # Its labels say another pod (an operator moved the node since) and no data center.
    facts = _facts(node, datacenter=None, pod="p-old", leaf=leaf.name, driver_version="2")
    with connect(
        agent_url, additional_headers={"Authorization": f"Bearer {node.issue_token()}"}
    ) as ws:
        assert say_hello(ws, node, gpus=gpus, facts=facts)["type"] == "desired_state"
        node = _refreshed(node)
        assert node.connected and node.gpus.count() == 7  # while connected
    assert node.facts["gpu_count"] == 8 and node.facts["driver_version"] == "2"
    assert {key: node.facts[key] for key in place} == place
    assert f"node {node.name}: its agent says pod p-old, the node is in {leaf.pod.name}: kept" in (
        _server_log()
    )


def _facts(node, **change):
    """A simulated node's facts, as its agent's hello carries them (no place in the fabric)."""
    from scheduler.agent.simulated import SimulatedGpus

    return {**SimulatedGpus(node.name, "H800").inventory().facts.to_message(), **change}


def test_a_late_disconnect_of_an_old_connection_leaves_the_node_connected(agent_url, cluster):
    node = cluster[0]
    auth = {"Authorization": f"Bearer {node.issue_token()}"}
    old = connect(agent_url, additional_headers=auth).__enter__()
    say_hello(old, node)
    with connect(agent_url, additional_headers=auth) as new:
        say_hello(new, node)
        old.__exit__(None, None, None)  # the old socket's close arrives after the new hello
        new.send(protocol.encode("heartbeat", generation=0, gpus=[], workloads=[]))
        new.send("{")  # a round trip, so the server has handled the old close by now
        assert json.loads(new.recv(timeout=10))["type"] == "error"
        assert _refreshed(node).connected
    wait_until(lambda: not _refreshed(node).connected, 10, "the node to show disconnected")


def test_a_second_agent_with_a_beating_nodes_token_is_refused_and_speaks_for_nothing(
    agent_url, acme_llm, cluster
):
    """A copy of a node's token (a job read it) opens a second connection while the node's
    agent beats: its hello is refused (4008) and logged, and the first connection still speaks
    for the node. What an agent says of a workload it was never given changes nothing."""
    from websockets.exceptions import ConnectionClosed

    other = make_workload(acme_llm, "neighbour", gpus=8)
    scheduling_cycle()
    node = Node.objects.exclude(allocations__workload=other).first()
    auth = {"Authorization": f"Bearer {node.issue_token()}"}
    with connect(agent_url, additional_headers=auth) as agent:
        say_hello(agent, node)
        agent.send(protocol.encode("heartbeat", generation=0, gpus=[], workloads=[]))
        wait_until(lambda: _beat(node), 10, "the first heartbeat")
        channel = _refreshed(node).agent_channel
        with connect(agent_url, additional_headers=auth) as thief:
            refusal = say_hello(thief, node)
            assert (refusal["type"], refusal["field"]) == ("error", "node")
            with pytest.raises(ConnectionClosed) as closed:
                thief.recv(timeout=10)
        assert closed.value.rcvd.code == protocol.CLOSE_TAKEN
        assert _refreshed(node).agent_channel == channel
        exited = {"workload_id": other.pk, "state": "exited", "exit_code": 1, "step": 0}
        agent.send(protocol.encode("heartbeat", generation=0, gpus=[], workloads=[exited]))
        agent.send("{")  # a round trip: the heartbeat has been handled
        while json.loads(agent.recv(timeout=10))["type"] != "error":
            pass  # a desired state sent meanwhile
    assert _refreshed(other).state != State.FAILED
    log = _server_log()
    assert f"node {node.name}: hello refused, connection closed: node:" in log
    assert f"node {node.name}: rejected a report of workload {other.pk}, not its own" in log


def test_an_agent_whose_old_connection_the_server_still_holds_is_taken_back_by_its_session(
    agent_url, cluster
):
    """The web process of an agent's connection dies unseen (kill -9): the node still looks
    connected and beating. The agent, on a new connection, proves it is the same one with the
    session its last hello was answered with, and is taken at once; the session is then a new
    one, so an old one said again (a copy) is refused, as is a hello without any."""
    from websockets.exceptions import ConnectionClosed

    node = cluster[0]
    auth = {"Authorization": f"Bearer {node.issue_token()}"}
    with connect(agent_url, additional_headers=auth) as ghost:  # held open: as if dead, unseen
        first = say_hello(ghost, node)["session"]
        ghost.send(protocol.encode("heartbeat", generation=0, gpus=[], workloads=[]))
        wait_until(lambda: _beat(node), 10, "the first heartbeat")
        with connect(agent_url, additional_headers=auth) as back:
            answer = say_hello(back, node, session=first)
            assert answer["type"] == "desired_state" and answer["session"] != first
            assert _refreshed(node).agent_channel != ""
            for session in (first, None):
                with connect(agent_url, additional_headers=auth) as copy:
                    assert say_hello(copy, node, session=session)["type"] == "error"
                    with pytest.raises(ConnectionClosed) as closed:
                        copy.recv(timeout=10)
                    assert closed.value.rcvd.code == protocol.CLOSE_TAKEN
    assert f"node {node.name}: its agent is back on a new connection (session proven)" in (
        _server_log()
    )


def _beat(node) -> bool:
    from portal.cluster.summary import LAST_SEEN
    from portal.core.redis import client

    return client().zscore(LAST_SEEN, node.pk) is not None


XID_79 = protocol.encode(
    "event",
    kind="fault",
    workload_id=None,
    exit_code=None,
    detail={"code": "xid-79", "xid": 79, "gpu_index": 3, "message": "GPU has fallen off the bus"},
)


def test_a_fault_from_an_agent_is_recorded(agent_url, acme_llm, cluster):
    node = cluster[0]
    with connect(
        agent_url, additional_headers={"Authorization": f"Bearer {node.issue_token()}"}
    ) as ws:
        ws.send(XID_79)  # before a hello: refused
        refused = protocol.parse(ws.recv(timeout=10), "server")
        assert (refused["type"], refused["field"], refused["reason"]) == (
            "error",
            "type",
            "Say hello first.",
        )
        say_hello(ws, node)
        ws.send(XID_79)
        fault = wait_until(lambda: FaultEvent.objects.filter(node=node).first(), 10, "a fault")
    assert (fault.code, fault.gpu_index, fault.kind) == (79, 3, "xid-79")
    assert _refreshed(node).health == "down"  # XID 79 needs a reboot


def test_a_node_declared_lost_while_its_agent_still_beats_is_connected_again(agent_url, cluster):
    """The lost-node check took the node off (its agent was silent, say, while hung), but the
    connection stayed open and the agent beats again: a node heartbeating is connected."""
    from portal.agents.intake import _declare_lost

    Node.objects.update(connected=False)
    node = cluster[0]
    agent = AgentThread(agent_url, node)
    try:
        wait_until(lambda: _refreshed(node).connected, 15, "the node to register")
        # Judged silent: a window that ends in the future makes every heartbeat look too old.
        assert _declare_lost(node.pk, window=-60)
        assert FaultEvent.objects.filter(node=node, kind="heartbeat-loss").exists()
        wait_until(lambda: _refreshed(node).connected, 10, "the heartbeats to take it back")
        assert node.agent_channel
    finally:
        agent.stop()


@pytest.fixture
def no_deliveries(monkeypatch):
    """Nothing this process sends reaches a server process's mailbox: as when its reader
    failed after a Redis restart, or an overloaded mailbox let the messages expire."""
    from portal.cluster import delivery

    async def lost(deliveries):
        pass

    monkeypatch.setattr(delivery, "_send", lost)


def _reported_generation(node):
    from portal.cluster.summary import REPORTED
    from portal.core.redis import client

    return int(client().hget(REPORTED, node.pk) or -1)


def test_a_node_declared_lost_is_taken_back_by_its_heartbeats_without_any_message(
    agent_url, cluster, no_deliveries
):
    """No word that the node was declared lost reaches its connection: its heartbeats take it
    back anyway, and it hears what it should run now (what changed while it was off was sent
    to nobody)."""
    from django.db import transaction
    from django.db.models import F

    from portal.agents.intake import _declare_lost

    Node.objects.update(connected=False)
    node = cluster[0]
    agent = AgentThread(agent_url, node)
    try:
        wait_until(lambda: _refreshed(node).connected, 15, "the node to register")
        with transaction.atomic():
            assert _declare_lost(node.pk, window=-60)
            Node.objects.filter(pk=node.pk).update(generation=F("generation") + 1)
        wait_until(lambda: _refreshed(node).connected, 10, "the heartbeats to take it back")
        assert node.agent_channel
        wait_until(
            lambda: _reported_generation(node) == _refreshed(node).generation,
            10,
            "the agent to reach the desired state of while it was off",
        )
    finally:
        agent.stop()


def test_an_admission_whose_word_never_reached_the_agent_is_sent_again_by_the_sweep(
    agent_url, acme_llm, cluster, monkeypatch, no_deliveries
):
    """The worker that admitted the job committed and died before it told the agent (here its
    message is lost): the job would stay admitted for good. The sweep sees the agent still
    behind the same generation on its second look and sends the state again; the job runs."""
    from portal.workloads.desired import resync_behind

    Node.objects.update(connected=False)
    node = cluster[0]
    agent = AgentThread(agent_url, node)
    try:
        wait_until(lambda: _refreshed(node).connected, 15, "the node to register")
        workload = make_workload(acme_llm, "told-nobody", gpus=8, simulated_duration_s=60)
        scheduling_cycle()
        assert workload.allocations.filter(node=node).exists()
        wait_until(lambda: _reported_generation(node) >= 0, 5, "a heartbeat")
        assert resync_behind() == []  # behind for the first time: its state may be on its way
        monkeypatch.undo()  # the channel layer delivers again
        assert _refreshed(workload).state == State.ADMITTED
        assert resync_behind() == [node.pk]
        wait_until(lambda: _refreshed(workload).state == State.RUNNING, 10, "the job to run")
        wait_until(
            lambda: _reported_generation(node) == _refreshed(node).generation, 5, "caught up"
        )
        assert resync_behind() == []
    finally:
        agent.stop()


def test_a_node_off_in_the_database_while_its_agent_beats_is_taken_back_by_the_lost_check(
    agent_url, cluster, no_deliveries
):
    """Declared lost while its connection stayed open, and Redis forgot it (a restart): the
    lost-node check sees a node off in the database whose agent beats, and its next heartbeat
    takes it back."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.agents.intake import LOST, mark_lost_nodes
    from portal.cluster.summary import SEEN_SINCE
    from portal.core.redis import client

    Node.objects.update(connected=False)
    node = cluster[0]
    agent = AgentThread(agent_url, node)
    try:
        wait_until(lambda: _refreshed(node).connected, 15, "the node to register")
        client().delete(LOST)
        client().set(SEEN_SINCE, 0)  # Redis has kept heartbeats for long enough to judge
        lost_at = timezone.now() - timedelta(minutes=1)
        Node.objects.filter(pk=node.pk).update(
            connected=False, agent_channel="", last_seen_at=lost_at
        )
        mark_lost_nodes()
        wait_until(lambda: _refreshed(node).connected, 10, "the heartbeats to take it back")
    finally:
        agent.stop()


def test_a_frame_over_the_bound_closes_the_connection_at_once_and_is_logged(
    agent_url, portal_server, cluster
):
    from websockets.exceptions import ConnectionClosed

    from portal.agents.consumers import CLOSE_TOO_BIG, MAX_FRAME_BYTES

    node = cluster[0]
    token = node.issue_token()
    with connect(
        agent_url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None
    ) as ws:
        ws.send("x" * (MAX_FRAME_BYTES + 1))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=2)
        assert closed.value.rcvd.code == CLOSE_TOO_BIG
    wait_until(
        lambda: f"node {node.name}: frame of {MAX_FRAME_BYTES + 1} bytes" in _server_log(),
        5,
        "the rejection in the log",
    )


def test_output_is_kept_only_from_the_node_the_workload_was_given_to(agent_url, acme_llm, cluster):
    a, b = cluster[0], cluster[4]
    Node.objects.exclude(pk=b.pk).update(connected=False)
    workload = make_workload(acme_llm, "on-b", gpus=8)
    scheduling_cycle()
    lines = {"workload_id": workload.pk, "attempt": 0, "offset": 0, "lines": ["forged"]}
    for node in (a, b):
        token = node.issue_token()
        with connect(agent_url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            say_hello(ws, node)  # its desired state: b's lists the workload, a's does not
            ws.send(protocol.encode("logs", **{**lines, "lines": [f"from {node.name}"]}))
            ws.send(protocol.encode("logs", **{**lines, "lines": [f"again {node.name}"]}))
            say_hello(ws, node)  # a round trip: what came before it has been handled
    kept = list(workload.log_chunks.values_list("node__name", "text"))
    assert kept == [(b.name, f"from {b.name}")]  # a resent offset is kept once
