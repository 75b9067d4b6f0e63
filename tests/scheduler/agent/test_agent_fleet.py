"""Many agents in one process, and the fleet command line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler.agent.fleet import NodeSpec, build_agent, load_nodes, run_fleet

REPO = Path(__file__).resolve().parents[3]


def make_nodes(count: int) -> list[NodeSpec]:
    """`count` small nodes named node-000, node-001, ... each with its own token."""
    return [NodeSpec(f"node-{i:03d}", f"tok-{i:03d}", gpus=2, memory_mb=1024) for i in range(count)]


async def wait_for_hellos(server: Any, count: int, seconds: float = 5.0) -> None:
    """Return once `count` distinct nodes have said hello."""
    async with asyncio.timeout(seconds):
        while len(server.hellos) < count:
            await asyncio.sleep(0.02)


def test_fifty_agents_each_connect_with_their_own_token_and_say_hello(agent_server: Any) -> None:
    nodes = make_nodes(50)

    async def scenario() -> None:
        async with agent_server() as server:
            stop = asyncio.Event()
            fleet = asyncio.create_task(
                run_fleet(server.url, nodes, heartbeat_s=0.2, stop_event=stop)
            )
            await wait_for_hellos(server, len(nodes))
            stop.set()
            async with asyncio.timeout(5):
                await fleet
        assert server.hellos == {n.hostname: f"Bearer {n.token}" for n in nodes}

    asyncio.run(scenario())


def test_the_command_line_runs_a_fleet_until_sigterm(agent_server: Any, tmp_path: Path) -> None:
    nodes = make_nodes(3)
    nodes_file = tmp_path / "nodes.json"
    nodes_file.write_text(json.dumps([vars(n) for n in nodes]))

    async def scenario() -> None:
        async with agent_server() as server:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "scheduler.agent.fleet",
                "--url",
                server.url,
                "--nodes",
                str(nodes_file),
                "--log-level",
                "WARNING",
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            try:
                await wait_for_hellos(server, len(nodes), seconds=10)
                process.send_signal(signal.SIGTERM)
                async with asyncio.timeout(5):
                    assert await process.wait() == 0
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()

    asyncio.run(scenario())


def test_a_nodes_file_fills_in_defaults(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(
        json.dumps([{"hostname": "a", "token": "t"}, {"hostname": "b", "token": "u", "gpus": 4}])
    )
    assert load_nodes(path) == [NodeSpec("a", "t"), NodeSpec("b", "u", gpus=4)]


def test_a_fleet_node_with_mig_reports_its_layout(tmp_path: Path) -> None:
    """Off by default; asked for, a node of a model with MIG heartbeats its layout."""
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps([{"hostname": "a", "token": "t", "gpu_model": "H800", "mig": True}]))
    (sliced,) = load_nodes(path)
    plain = NodeSpec("b", "u", gpu_model="H800")
    beats = [build_agent(n, "ws://x/")._backend.telemetry() for n in (sliced, plain)]
    assert beats[0][0].mig.devices[0].profile == "3g.40gb" and beats[1][0].mig is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param({"hostname": "a"}, "expected a JSON list", id="an object instead of a list"),
        pytest.param([{"hostname": "a"}], r"\[0\].*token", id="a node without its token"),
        pytest.param(
            [{"hostname": "a", "token": "t", "gpu": 8}],
            r"\[0\]: unknown fields \['gpu'\]",
            id="a misspelt field",
        ),
        pytest.param(["node-a"], r"\[0\]: expected an object", id="a bare hostname"),
    ],
)
def test_a_bad_nodes_file_names_the_entry(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=message):
        load_nodes(path)
