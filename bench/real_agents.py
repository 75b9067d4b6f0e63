"""Real agents for the benchmarks: each node's agent a `wanka-agent --backend processes` process
of its own, whose jobs run as real processes (on simulated GPUs), and the real PyTorch job they
run (`examples/train_tiny.py` on the CPU). `bench.conformance` and `bench.soak` use them for
their `--backend processes` modes."""

import asyncio
import os
import shlex
import signal
import sys
from pathlib import Path

from bench.processes import Child
from scheduler.agent.processes import recorded_group

ROOT = Path(__file__).resolve().parents[1]
TRAIN_TINY = ROOT / "examples" / "train_tiny.py"


def train_tiny(steps: int, gpus: int) -> str:
    """`examples/train_tiny.py` on the CPU for `steps` steps, a step about a second at the job's
    full size of `gpus` GPUs and slower in proportion on fewer (a fixed global batch over fewer
    replicas), as simulated agents run a shrunk job."""
    pause = f'"$(( {gpus} * 1000 / WORLD_SIZE ))e-3"'  # seconds, from the launch variables
    arguments = f"--steps {steps} --device cpu --sleep-s {pause}"
    # One thread each: many PyTorch processes share the benchmark machine's cores.
    script = f'OMP_NUM_THREADS=1 exec "$0" {shlex.quote(str(TRAIN_TINY))} {arguments}'
    return shlex.join(["sh", "-c", script, sys.executable])


class AgentProcesses:
    """Each node's agent as a real `wanka-agent --backend processes`: its jobs run as processes
    of their own, on simulated GPUs. Its output goes to agent-<node>.log, its state to
    agents/<node>/ in the logs directory. Nodes are `scheduler.agent.fleet.NodeSpec`s."""

    def __init__(self, url: str, logs: Path, heartbeat_s: float, grace_s: float):
        self.url, self.logs = url, logs
        self.heartbeat_s, self.grace_s = heartbeat_s, grace_s
        self.children: dict[str, Child] = {}
        self.nodes: dict = {}

    def state_dir(self, name: str) -> Path:
        return self.logs / "agents" / name

    def launch(self, node) -> None:
        command = [
            sys.executable, "-m", "scheduler.agent.cli", "--url", self.url,
            "--backend", "processes", "--hostname", node.hostname, "--gpus", "8",
            "--gpu-model", node.gpu_model, "--state-dir", str(self.state_dir(node.hostname)),
            "--heartbeat-s", str(self.heartbeat_s), "--grace-s", str(self.grace_s),
        ]  # fmt: skip
        env = {**os.environ, "WANKA_AGENT_TOKEN": node.token, "PYTHONPATH": str(ROOT)}
        # Ready at once: the database says when it has connected.
        child = Child(f"agent-{node.hostname}", command, env, self.logs, ready="")
        child.start()
        self.children[node.hostname] = child

    async def start(self, nodes) -> None:
        for node in nodes:
            self.nodes[node.hostname] = node
            self.launch(node)

    async def kill(self, name: str, restart_after_s: float) -> None:
        """kill -9 of the agent: its jobs' processes run on, orphaned. Started again on the same
        state directory `restart_after_s` later, it stops them before it says hello."""
        await asyncio.to_thread(self.children[name].kill)
        await asyncio.sleep(restart_after_s)
        self.launch(self.nodes[name])

    async def restart(self, name: str) -> None:
        """The node rebooted: its agent stopped (its jobs with it) and started again, on a
        fresh machine whose GPUs all answer."""
        await asyncio.to_thread(self.children[name].stop)
        self.launch(self.nodes[name])

    def group(self, name: str, workload_id: int) -> int:
        """The process group of the workload's processes on the node."""
        return recorded_group(self.state_dir(name) / "workloads" / str(workload_id))["pgid"]

    def hang(self, name: str, workload_id: int) -> None:
        """The job's processes on the node stop, as in a stuck collective: SIGSTOP."""
        os.killpg(self.group(name, workload_id), signal.SIGSTOP)

    async def stop(self, names) -> None:
        """SIGTERM: each agent stops its jobs' processes and exits."""
        await asyncio.gather(*(asyncio.to_thread(self.children.pop(n).stop) for n in names))

    def end_orphans(self) -> None:
        """SIGKILL the jobs' processes a killed agent left, should the benchmark end before the
        agent is started again to stop them (each records its group, and a group that carries
        its workload's id is the one recorded)."""
        for path in (self.logs / "agents").glob("*/workloads/*/pgid"):
            record = recorded_group(path.parent)
            try:
                environ = Path(f"/proc/{record['pgid']}/environ").read_bytes().split(b"\0")
                if f"WANKA_WORKLOAD_ID={path.parent.name}".encode() in environ:
                    os.killpg(record["pgid"], signal.SIGKILL)
            except (OSError, TypeError):  # gone already, or no record
                pass
