"""The agent over a real socket with fault drills, silence, events kept through an outage, and
real processes: log tails, checkpoint commands that take time, and commands sent twice."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from scheduler.agent.agent import Agent
from scheduler.agent.backends import Backend
from scheduler.agent.processes import ProcessBackend
from scheduler.agent.simulated import SimulatedBackend, SimulatedGpus

REPO = Path(__file__).resolve().parents[3]


def assignment(workload_id: int, gpus: list[int], command: str = "train", **env: str) -> dict:
    """One desired_state assignment for a single-node workload that runs until stopped."""
    return {
        "workload_id": workload_id,
        "gpu_indices": gpus,
        "command": command,
        "env": env,
        "simulated_duration_s": None,
        "nnodes": 1,
        "node_rank": 0,
        "master_addr": "",
        "master_port": 0,
    }


def simulated() -> SimulatedBackend:
    """A 4-GPU simulated node."""
    return SimulatedBackend("node-a", "H100-SXM-80GB", 4, 81559, speed=100.0, seed=7)


def processes(tmp_path: Path) -> ProcessBackend:
    """Real processes on 4 simulated GPUs."""
    machine = SimulatedGpus("node-a", "H100-SXM-80GB", 4, 81559, seed=7)
    return ProcessBackend(machine, tmp_path, grace_s=2.0, poll_s=0.05,
                          base_env={"PYTHONPATH": str(REPO)})  # fmt: skip


@asynccontextmanager
async def running(server: Any, backend: Backend) -> AsyncIterator[tuple[Agent, Any]]:
    """An agent on `backend`, connected, hello received; stopped on the way out."""
    agent = Agent(server.url, "tok-a", backend, heartbeat_s=0.05, backoff_base_s=0.02,
                  backoff_cap_s=0.1, reconnect_spread_s=0.05)  # fmt: skip
    task = asyncio.create_task(agent.run())
    try:
        peer = await server.next_connection()
        await peer.expect("hello")
        yield agent, peer
    finally:
        await agent.stop()
        await task


def run(scenario) -> None:
    """Drive one scenario within a deadline."""

    async def bounded() -> None:
        async with asyncio.timeout(15):
            await scenario

    asyncio.run(bounded())


def is_event(kind: str, workload_id: int | None = None) -> Any:
    """A filter for events of `kind` (about `workload_id`, when given)."""
    return lambda m: m["kind"] == kind and (workload_id is None or m["workload_id"] == workload_id)


def acked(command_id: str) -> Any:
    """A filter for the ack of `command_id`."""
    return lambda m: m["command_id"] == command_id


def positions(peer: Any, kind: str) -> list[int]:
    """Where in what the agent sent the events of `kind` are."""
    return [i for i, m in enumerate(peer.received) if m["type"] == "event" and m["kind"] == kind]


def test_an_xid_79_drill_reports_the_fault_then_the_workload_fails(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running(server, simulated()) as (_, peer):
            await peer.send("desired_state", generation=1, assignments=[assignment(7, [2, 3])])
            await peer.expect("event", is_event("workload_started", 7))
            await peer.send("command", command_id="d1", action="inject_fault", workload_id=None,
                            args={"code": "xid-79", "gpu_index": 3})  # fmt: skip
            fault = await peer.expect("event", is_event("fault"))
            assert fault["detail"]["code"] == "xid-79" and fault["detail"]["gpu_index"] == 3
            ack = await peer.expect("ack", acked("d1"))
            assert ack["ok"] and "killed workload(s) [7]" in ack["detail"]
            exited = await peer.expect("event", is_event("workload_exited", 7))
            assert exited["exit_code"] == 1
            beat = await peer.expect("heartbeat")
            assert [g["index"] for g in beat["gpus"]] == [0, 1, 2]  # GPU 3 is off the bus
            acks = [i for i, m in enumerate(peer.received) if m["type"] == "ack"]
            assert positions(peer, "fault")[0] < acks[0]

    run(scenario())


def test_a_drill_the_backend_refuses_is_acked_not_ok_with_the_reason(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running(server, simulated()) as (_, peer):
            await peer.send("command", command_id="d2", action="inject_fault", workload_id=None,
                            args={"code": "meltdown"})  # fmt: skip
            ack = await peer.expect("ack", acked("d2"))
            assert not ack["ok"] and "unknown fault 'meltdown'" in ack["detail"]

    run(scenario())


def test_a_heartbeat_loss_drill_silences_the_agent_but_keeps_its_work(agent_server: Any) -> None:
    async def scenario() -> None:
        async with agent_server() as server, running(server, simulated()) as (agent, peer):
            await peer.send("desired_state", generation=1, assignments=[assignment(7, [0])])
            await peer.expect("heartbeat", lambda m: m["generation"] == 1)
            await peer.send("command", command_id="d3", action="inject_fault", workload_id=None,
                            args={"code": "heartbeat-loss", "duration_s": 0.5})  # fmt: skip
            assert (await peer.expect("ack", acked("d3")))["ok"]
            count = len(peer.received)
            await asyncio.sleep(0.4)
            assert len(peer.received) == count and agent.connected  # nothing, not even beats
            beat = await peer.expect("heartbeat")
            assert beat["workloads"][0]["state"] == "running"
            assert server.connections.empty()  # the same connection all along

    run(scenario())


def test_faults_during_an_outage_are_sent_after_the_next_hello(agent_server: Any) -> None:
    async def scenario() -> None:
        backend = simulated()
        async with agent_server() as server, running(server, backend) as (agent, peer):
            server.refuse = True
            await peer.close()
            while agent.connected:
                await asyncio.sleep(0.01)
            backend.inject_fault("xid-74", 1, {})  # while nobody listens
            await asyncio.sleep(0.1)
            server.refuse = False
            again = await server.next_connection()
            await again.expect("hello")
            fault = await again.expect("event", is_event("fault"))
            assert (fault["detail"]["code"], fault["detail"]["gpu_index"]) == ("xid-74", 1)

    run(scenario())


def python(code: str) -> str:
    """A command line that runs `code` with this interpreter."""
    return shlex.join([sys.executable, "-c", code])


# Saves 0.3 s after being asked, so a command can arrive twice while the save runs.
SLOW_SAVER = python(
    "import time\n"
    "from pathlib import Path\n"
    "from scheduler.agent.contract import Checkpointing\n"
    "ckpt = Checkpointing.from_env()\n"
    "print('ready', flush=True)\n"
    "step = 0\n"
    "while True:\n"
    "    step += 1\n"
    "    time.sleep(0.02)\n"
    "    if ckpt.due(step):\n"
    "        time.sleep(0.3)\n"
    "        ckpt.save(step, lambda path: Path(path).write_text(str(step)))\n"
)


def test_a_checkpoint_sent_twice_while_it_runs_saves_once_and_is_acked_again_later(
    agent_server: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        backend = processes(tmp_path)
        async with agent_server() as server, running(server, backend) as (_, peer):
            await peer.send("desired_state", generation=1,
                            assignments=[assignment(4, [0], SLOW_SAVER)])  # fmt: skip
            await peer.expect("event", is_event("workload_started", 4))
            log = tmp_path / "workloads" / "4" / "output.log"
            while "ready" not in log.read_text():
                await asyncio.sleep(0.02)
            command = {"command_id": "c1", "action": "checkpoint", "workload_id": 4,
                       "args": {"timeout_s": 5}}  # fmt: skip
            await peer.send("command", **command)
            await asyncio.sleep(0.1)
            await peer.send("command", **command)  # while the first is still saving
            saved = await peer.expect("event", is_event("checkpoint_saved", 4))
            first = await peer.expect("ack", acked("c1"))
            assert first["ok"] and saved["detail"]["request_id"] == "c1"
            assert f"saved step {saved['detail']['step']}" in first["detail"]
            await peer.send("command", **command)  # after the ack: the same answer again
            again = await peer.expect("ack", acked("c1"))
            assert again["detail"] == first["detail"]
            await asyncio.sleep(0.2)
            assert len(positions(peer, "checkpoint_saved")) == 1
            assert [m["type"] for m in peer.received].count("ack") == 2

    run(scenario())


def test_a_checkpoint_that_never_lands_is_acked_not_ok(agent_server: Any, tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = processes(tmp_path)
        async with agent_server() as server, running(server, backend) as (_, peer):
            sleeper = python("import time; time.sleep(30)")
            await peer.send("desired_state", generation=1,
                            assignments=[assignment(5, [1], sleeper)])  # fmt: skip
            await peer.expect("event", is_event("workload_started", 5))
            await peer.send("command", command_id="c2", action="checkpoint", workload_id=5,
                            args={"timeout_s": 0.3})  # fmt: skip
            ack = await peer.expect("ack", acked("c2"))
            assert (
                not ack["ok"] and "no checkpoint of workload 5 landed within 0.3 s" in ack["detail"]
            )
            # Meanwhile the agent went on with its work: heartbeats, and the workload runs.
            beat = await peer.expect("heartbeat")
            assert beat["workloads"][0]["state"] == "running"

    run(scenario())


def test_a_process_that_fails_reports_its_exit_code_and_last_lines(
    agent_server: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        backend = processes(tmp_path)
        async with agent_server() as server, running(server, backend) as (_, peer):
            failing = python(
                "import sys\nprint('loading data')\nsys.exit('CUDA error: out of memory')"
            )
            await peer.send("desired_state", generation=1,
                            assignments=[assignment(6, [0], failing)])  # fmt: skip
            exited = await peer.expect("event", is_event("workload_exited", 6))
            assert exited["exit_code"] == 1
            assert exited["detail"]["log_tail"] == ["loading data", "CUDA error: out of memory"]
            beat = await peer.expect("heartbeat")
            assert (beat["workloads"][0]["state"], beat["workloads"][0]["exit_code"]) == (
                "exited",
                1,
            )

    run(scenario())
