"""The agent against a real WebSocket server: hello, converging, telemetry, commands, reconnects."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from scheduler.agent.agent import AGENT_VERSION, Agent
from scheduler.agent.protocol import CLOSE_REFUSED
from scheduler.agent.simulated import SimulatedBackend

# 100 simulated seconds per second: a 30 s workload ends after 0.3 s.
SPEED = 100.0
GPUS = 4
MEMORY_MB = 81559


def assignment(workload_id: int, gpus: list[int], duration_s: float | None) -> dict[str, Any]:
    """One desired_state assignment for a single-node workload."""
    return {
        "workload_id": workload_id,
        "gpu_indices": gpus,
        "command": "torchrun train.py",
        "env": {"NCCL_DEBUG": "WARN"},
        "simulated_duration_s": duration_s,
        "nnodes": 1,
        "node_rank": 0,
        "master_addr": "node-a",
        "master_port": 29500,
    }


def make_agent(url: str, hostname: str = "node-a", token: str = "tok-a") -> Agent:
    """An agent on a 4-GPU simulated node, heartbeating every 50 ms, quick to reconnect."""
    backend = SimulatedBackend(hostname, "H100-SXM-80GB", GPUS, MEMORY_MB, speed=SPEED, seed=7)
    return Agent(url, token, backend, heartbeat_s=0.05, backoff_base_s=0.02, backoff_cap_s=0.1)


@asynccontextmanager
async def running_agent(server: Any) -> AsyncIterator[tuple[Agent, Any, dict[str, Any]]]:
    """Start an agent, wait for its connection and hello; stop it on the way out."""
    agent = make_agent(server.url)
    task = asyncio.create_task(agent.run())
    try:
        peer = await server.next_connection()
        hello = await peer.expect("hello")
        yield agent, peer, hello
    finally:
        await agent.stop()
        await task


def run(scenario: Coroutine[Any, Any, None]) -> None:
    """Drive one scenario to the end in a fresh event loop, within a deadline."""

    async def bounded() -> None:
        async with asyncio.timeout(10):
            await scenario

    asyncio.run(bounded())


def by_id(message: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A heartbeat's or hello's workloads, keyed by workload id."""
    return {w["workload_id"]: w for w in message["workloads"]}


def at_generation(generation: int) -> Any:
    """A filter for heartbeats that report `generation`."""
    return lambda message: message["generation"] == generation


def event(kind: str, workload_id: int) -> Any:
    """A filter for events of `kind` about `workload_id`."""
    return lambda m: m["kind"] == kind and m["workload_id"] == workload_id


def test_hello_carries_the_bearer_token_and_the_inventory(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (_, peer, hello):
            assert peer.headers["Authorization"] == "Bearer tok-a"
            assert hello["v"] == 1 and len(hello["id"]) == 32
            assert hello["agent_version"] == AGENT_VERSION
            assert hello["generation"] == 0
            assert hello["workloads"] == []
            node = hello["node"]
            assert (node["hostname"], node["gpu_model"]) == ("node-a", "H100-SXM-80GB")
            assert [g["index"] for g in node["gpus"]] == [0, 1, 2, 3]
            assert {g["memory_mb"] for g in node["gpus"]} == {MEMORY_MB}
            assert len({g["uuid"] for g in node["gpus"]}) == GPUS

    run(scenario())


def test_a_desired_state_starts_workloads_and_heartbeats_show_their_load(
    agent_server: Any,
) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (agent, peer, _):
            await peer.send(
                "desired_state", generation=1, assignments=[assignment(7, [0, 1], None)]
            )
            started = await peer.expect("event", event("workload_started", 7))
            assert started["detail"] == {"gpu_indices": [0, 1], "attempt": 0}
            first = by_id(await peer.expect("heartbeat", at_generation(1)))[7]["step"]
            beat = await peer.expect("heartbeat", lambda m: by_id(m)[7]["step"] > first)
            util = {g["index"]: g["util"] for g in beat["gpus"]}
            assert util[0] >= 80 and util[1] >= 80, util
            assert util[2] < 1 and util[3] < 1, util
            memory = {g["index"]: g["memory_used_mb"] for g in beat["gpus"]}
            assert memory[0] > 0.8 * MEMORY_MB and memory[2] < 100
            workload = by_id(beat)[7]
            assert (workload["state"], workload["exit_code"]) == ("running", None)
            assert agent.generation == 1

    run(scenario())


def test_a_workload_exits_0_after_its_duration_and_is_not_restarted_while_listed(
    agent_server: Any,
) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (_, peer, _):
            listed = [assignment(8, [2], 30.0)]
            await peer.send("desired_state", generation=1, assignments=listed)
            await peer.expect("event", event("workload_started", 8))
            exited = await peer.expect("event", event("workload_exited", 8))
            assert (exited["exit_code"], exited["detail"]) == (0, {"step": 30, "attempt": 0})
            beat = await peer.expect("heartbeat")
            assert by_id(beat)[8] == {
                "workload_id": 8,
                "state": "exited",
                "exit_code": 0,
                "step": 30,
                "attempt": 0,
            }
            assert beat["gpus"][2]["util"] < 1

            await peer.send("desired_state", generation=2, assignments=listed)
            beat = await peer.expect("heartbeat", at_generation(2))
            assert by_id(beat)[8]["state"] == "exited"
            starts = [
                m for m in peer.received if m["type"] == "event" and m["kind"] == "workload_started"
            ]
            assert len(starts) == 1

            await peer.send("desired_state", generation=3, assignments=[])
            beat = await peer.expect("heartbeat", at_generation(3))
            assert beat["workloads"] == []

    run(scenario())


def test_a_running_workload_no_longer_listed_is_stopped_with_minus_15(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (_, peer, _):
            await peer.send("desired_state", generation=1, assignments=[assignment(7, [0], None)])
            await peer.expect("event", event("workload_started", 7))

            await peer.send("desired_state", generation=2, assignments=[])
            exited = await peer.expect("event", event("workload_exited", 7))
            assert exited["exit_code"] == -15
            beat = await peer.expect("heartbeat", at_generation(2))
            assert (by_id(beat)[7]["state"], by_id(beat)[7]["exit_code"]) == ("exited", -15)
            assert all(g["util"] < 1 for g in beat["gpus"])

            # Listed again later: a fresh run, not the stopped one.
            await peer.send("desired_state", generation=3, assignments=[assignment(7, [0], None)])
            await peer.expect("event", event("workload_started", 7))
            beat = await peer.expect("heartbeat", at_generation(3))
            assert by_id(beat)[7]["state"] == "running"

    run(scenario())


GARBAGE = [
    "this is not JSON",
    b"\xff\xfe binary junk",
    "[1, 2, 3]",
    "9" * 5000,
    '{"type": "reboot", "v": 1, "id": "x1"}',
    '{"type": "desired_state", "v": 2, "id": "x2", "generation": 1, "assignments": []}',
    '{"type": "desired_state", "v": 1, "id": "x3", "generation": "one", "assignments": []}',
    '{"type": "command", "v": 1, "id": "x4", "command_id": "c", "action": "explode",'
    ' "workload_id": null, "args": {}}',
]


def test_garbage_from_the_server_is_logged_and_the_agent_carries_on(
    agent_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (agent, peer, _):
            for frame in GARBAGE:
                await peer.send_raw(frame)
            await peer.send("error", reason="hello.node.gpus: expected a list", field="hello.node")
            await peer.send("desired_state", generation=4, assignments=[assignment(1, [0], None)])
            await peer.expect("event", event("workload_started", 1))
            await peer.expect("heartbeat", at_generation(4))
            assert agent.connected

    caplog.set_level(logging.WARNING, logger="scheduler.agent")
    run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("ignored a malformed server message" in w for w in warnings) == len(GARBAGE)
    assert any("refused a message: hello.node: hello.node.gpus" in w for w in warnings)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_commands_are_acked_and_a_repeated_command_is_not_run_twice(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (_, peer, _):
            await peer.send("desired_state", generation=1, assignments=[assignment(7, [0], None)])
            await peer.expect("event", event("workload_started", 7))

            checkpoint = {"action": "checkpoint", "workload_id": 7, "args": {}}
            await peer.send("command", command_id="c1", **checkpoint)
            saved = await peer.expect("event", event("checkpoint_saved", 7))
            assert saved["detail"]["location"].endswith(f"step-{saved['detail']['step']}")
            first = await peer.expect("ack", lambda m: m["command_id"] == "c1")
            await peer.send("command", command_id="c1", **checkpoint)
            again = await peer.expect("ack", lambda m: m["command_id"] == "c1")
            assert first["ok"] and (again["ok"], again["detail"]) == (True, first["detail"])
            saves = [
                m for m in peer.received if m["type"] == "event" and m["kind"] == "checkpoint_saved"
            ]
            assert len(saves) == 1

            await peer.send(
                "command", command_id="c3", action="checkpoint", workload_id=99, args={}
            )
            missing = await peer.expect("ack", lambda m: m["command_id"] == "c3")
            assert not missing["ok"] and "99" in missing["detail"]

    run(scenario())


def test_after_the_server_drops_it_the_agent_reconnects_and_reports_what_happened_meanwhile(
    agent_server: Any,
) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (agent, peer, _):
            listed = [assignment(9, [0], None), assignment(10, [1], 30.0)]
            await peer.send("desired_state", generation=1, assignments=listed)
            await peer.expect("heartbeat", at_generation(1))

            # Drop the connection and stay down while workload 10 finishes.
            server.refuse = True
            await peer.close()
            await asyncio.sleep(0.5)
            assert server.refused >= 1 and not agent.connected
            server.refuse = False

            again = await server.next_connection()
            assert again.headers["Authorization"] == "Bearer tok-a"
            hello = await again.expect("hello")
            assert hello["generation"] == 1
            assert by_id(hello)[9]["state"] == "running"
            assert by_id(hello)[10] == {
                "workload_id": 10,
                "state": "exited",
                "exit_code": 0,
                "step": 30,
                "attempt": 0,
            }

    run(scenario())


def test_a_reconnecting_agent_proves_itself_with_the_session_its_last_hello_was_given(
    agent_server: Any,
) -> None:
    """The server answers a hello with a session; the agent, in memory, says it again at its next
    hello, so a server still holding its old connection knows the new one is the same agent."""

    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (agent, peer, first):
            assert "session" not in first  # a fresh process has none
            await peer.send("desired_state", generation=1, assignments=[], session="s-1")
            await peer.expect("heartbeat", at_generation(1))
            await peer.close()
            again = await server.next_connection()
            assert (await again.expect("hello"))["session"] == "s-1"

    run(scenario())


def test_stop_and_cancel_end_an_agent_that_cannot_reach_its_server(closed_port: int) -> None:
    async def scenario() -> None:
        url = f"ws://127.0.0.1:{closed_port}/ws/agent/"
        stopped, cancelled = make_agent(url), make_agent(url, hostname="node-b")
        tasks = [asyncio.create_task(agent.run()) for agent in (stopped, cancelled)]
        await asyncio.sleep(0.2)  # a few refused attempts
        await stopped.stop()
        assert tasks[0].done() and tasks[0].exception() is None
        tasks[1].cancel()
        with pytest.raises(asyncio.CancelledError):
            await tasks[1]
        await cancelled.stop()  # returns at once once run() has ended

        never_ran = make_agent(url, hostname="node-c")
        await never_ran.stop()
        await never_ran.run()  # a stopped agent does not start

    run(scenario())


def test_a_new_attempt_of_a_listed_workload_stops_the_old_run_and_starts_afresh(
    agent_server: Any,
) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (_, peer, _):
            first = assignment(7, [0], None) | {"attempt": 0}
            await peer.send("desired_state", generation=1, assignments=[first])
            await peer.expect("event", event("workload_started", 7))

            await peer.send("desired_state", generation=2, assignments=[first | {"attempt": 1}])
            old = await peer.expect("event", event("workload_exited", 7))
            assert (old["exit_code"], old["detail"]["attempt"]) == (-15, 0)
            new = await peer.expect("event", event("workload_started", 7))
            assert new["detail"]["attempt"] == 1
            beat = await peer.expect("heartbeat", at_generation(2))
            assert (by_id(beat)[7]["state"], by_id(beat)[7]["attempt"]) == ("running", 1)

            # The same attempt again changes nothing; an attempt that ended is not rerun.
            await peer.send("desired_state", generation=3, assignments=[first | {"attempt": 1}])
            await peer.expect("heartbeat", at_generation(3))
            starts = [
                m for m in peer.received if m["type"] == "event" and m["kind"] == "workload_started"
            ]
            assert len(starts) == 2

    run(scenario())


def test_an_ended_attempt_is_rerun_when_a_new_attempt_is_listed(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running_agent(server) as (_, peer, _):
            short = assignment(8, [1], 30.0) | {"attempt": 2}
            await peer.send("desired_state", generation=1, assignments=[short])
            exited = await peer.expect("event", event("workload_exited", 8))
            assert exited["detail"]["attempt"] == 2
            await peer.send("desired_state", generation=2, assignments=[short | {"attempt": 3}])
            started = await peer.expect("event", event("workload_started", 8))
            assert started["detail"]["attempt"] == 3

    run(scenario())


def test_a_runs_output_goes_out_in_logs_messages_before_its_exit(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server:
            backend = SimulatedBackend("node-a", gpus=GPUS, speed=SPEED, steps_per_s=10, seed=7)
            agent = Agent(server.url, "tok-a", backend, heartbeat_s=0.05, output_s=0.05)
            task = asyncio.create_task(agent.run())
            try:
                peer = await server.next_connection()
                await peer.expect("hello")
                await peer.send("desired_state", generation=1, assignments=[assignment(7, [0], 30)])
                await peer.expect("event", event("workload_exited", 7))
            finally:
                await agent.stop()
                await task
            logs = [m for m in peer.received if m["type"] == "logs"]
            exited = next(
                i for i, m in enumerate(peer.received) if m.get("kind") == "workload_exited"
            )
            assert all(peer.received.index(m) < exited for m in logs)  # its last words first
            lines = [line for m in logs for line in m["lines"]]
            assert lines == ["step 100 of 300", "step 200 of 300", "step 300 of 300"]
            offsets = [m["offset"] for m in logs]
            assert offsets == sorted(set(offsets)) and offsets[0] == 0  # each batch once
            assert {(m["workload_id"], m["attempt"]) for m in logs} == {(7, 0)}

    run(scenario())


def test_a_refused_hello_is_logged_as_an_error_and_tried_again_rarely(
    agent_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with agent_server() as server:
            agent = make_agent(server.url)
            agent._refused_retry_s = 1.0  # 5 minutes in earnest; its backoff is 0.02-0.1 s
            task = asyncio.create_task(agent.run())
            try:
                peer = await server.next_connection()
                await peer.expect("hello")
                await peer.send(
                    "error", reason="This token is node b's, not node-a's.", field="node.hostname"
                )
                await peer.ws.close(code=CLOSE_REFUSED)
                refused_at = asyncio.get_running_loop().time()
                again = await server.next_connection()
                waited = asyncio.get_running_loop().time() - refused_at
                await again.expect("hello")
            finally:
                await agent.stop()
                await task
        assert 0.9 <= waited < 3

    run(scenario())
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [
        "node-a: the server refused this node (its reason is above); trying again in 1 s"
    ]
    assert "This token is node b's, not node-a's." in caplog.text
