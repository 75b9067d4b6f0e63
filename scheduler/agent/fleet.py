"""Many simulated node agents in one asyncio process, each with its own WebSocket connection.

    python -m scheduler.agent.fleet --url ws://127.0.0.1:8000/ws/agent/ --nodes nodes.json

`nodes.json` is a list of objects with the fields of `NodeSpec`; `hostname` and `token` are
required, and `gpu_model` and `gpus` must be the node's as the portal records them (the server
refuses a hello whose inventory is not its node's). The fleet runs until SIGINT or SIGTERM,
then closes every connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from scheduler.agent.agent import Agent
from scheduler.agent.backends import TopologyLabels
from scheduler.agent.simulated import SimulatedBackend

logger = logging.getLogger(__name__)

# Seconds between two agents' starts: 50 connections a second, which one ASGI process takes in
# while serving the rest (bench.agents), instead of one burst of handshakes, hellos and
# desired-state queries that time out and come back as a reconnection storm.
DEFAULT_STAGGER_S = 0.02


@dataclass(frozen=True)
class NodeSpec:
    """One simulated node: its name, its agent token, its GPUs and where it sits."""

    hostname: str
    token: str
    gpu_model: str = "H100-SXM-80GB"
    gpus: int = 8
    memory_mb: int = 81559
    datacenter: str | None = None
    pod: str | None = None
    leaf: str | None = None
    mig: bool = False  # its GPUs report MIG layouts, where its model has MIG


def build_agent(node: NodeSpec, url: str, heartbeat_s: float = 5.0, speed: float = 1.0) -> Agent:
    """An agent for `node` on a `SimulatedBackend`."""
    labels = TopologyLabels(node.datacenter, node.pod, node.leaf)
    backend = SimulatedBackend(
        node.hostname,
        node.gpu_model,
        node.gpus,
        node.memory_mb,
        speed=speed,
        labels=labels,
        mig=node.mig,
    )
    return Agent(url, node.token, backend, heartbeat_s=heartbeat_s)


async def run_fleet(
    url: str,
    nodes: Sequence[NodeSpec],
    heartbeat_s: float = 5.0,
    speed: float = 1.0,
    stop_event: asyncio.Event | None = None,
    stagger_s: float = DEFAULT_STAGGER_S,
) -> None:
    """Run one agent per node until `stop_event` is set (or until cancelled), then stop them."""
    agents = [build_agent(node, url, heartbeat_s, speed) for node in nodes]
    tasks = [
        asyncio.create_task(_start_later(agent, i * stagger_s), name=f"fleet {agent.hostname}")
        for i, agent in enumerate(agents)
    ]
    logger.info("fleet: %d agents starting against %s", len(agents), url)
    try:
        await (stop_event.wait() if stop_event is not None else asyncio.Future())
    finally:
        # stop() before an agent's first run() also makes that run() return at once.
        await asyncio.gather(*(agent.stop() for agent in agents))
        for task in tasks:
            task.cancel()  # the ones still waiting for their start slot
        await asyncio.gather(*tasks, return_exceptions=True)
        logger.info("fleet: %d agents stopped", len(agents))


async def _start_later(agent: Agent, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    try:
        await agent.run()
    except Exception:
        # One agent failing (a bad URL, a bug) must not end the other agents' runs.
        logger.exception("fleet: agent %s stopped with an error", agent.hostname)


def load_nodes(path: str | Path) -> list[NodeSpec]:
    """Read a JSON list of node objects; raises ValueError naming the first bad entry."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of nodes")
    return [_node_from_json(item, f"{path}[{i}]") for i, item in enumerate(data)]


def _node_from_json(item: Any, where: str) -> NodeSpec:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected an object")
    known = {f.name for f in fields(NodeSpec)}
    unknown = sorted(set(item) - known)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}; known: {sorted(known)}")
    try:
        return NodeSpec(**item)
    except TypeError as exc:
        raise ValueError(f"{where}: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run a simulated fleet from a nodes file until SIGINT or SIGTERM."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        nodes = load_nodes(args.nodes)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    _raise_open_file_limit(len(nodes))
    asyncio.run(_run_until_signalled(args, nodes))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.agent.fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", required=True, help="agent endpoint, e.g. ws://HOST/ws/agent/")
    parser.add_argument("--nodes", required=True, help="JSON file: a list of node objects")
    parser.add_argument("--heartbeat-s", type=float, default=5.0, help="seconds between heartbeats")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per second")
    parser.add_argument(
        "--stagger-s",
        type=float,
        default=DEFAULT_STAGGER_S,
        help="seconds between two agents' starts",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser


async def _run_until_signalled(args: argparse.Namespace, nodes: list[NodeSpec]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Windows has no loop signal handlers; there Ctrl+C still ends the run.
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await run_fleet(args.url, nodes, args.heartbeat_s, args.speed, stop, args.stagger_s)


def _raise_open_file_limit(agents: int) -> None:
    # One socket per agent: 2,000 agents exceed the usual soft limit of 1,024 open files.
    try:
        import resource
    except ImportError:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = agents + 256
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < wanted:
        logger.warning("fleet: open-file limit %d is too low for %d agents", hard, agents)


if __name__ == "__main__":
    sys.exit(main())
