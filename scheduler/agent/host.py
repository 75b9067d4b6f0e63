"""Facts about the host an agent runs on: CPU, memory and network interfaces (Linux).

Read from /proc and /sys under `root`, so tests can point it at a directory of their own. A file
that is missing or unreadable gives an empty or zero fact, never an error: a node whose NIC does
not report its speed still runs its work.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

from scheduler.agent.backends import NO_LABELS, Nic, NodeFacts, TopologyLabels

ROOT = Path("/")


def host_facts(
    labels: TopologyLabels = NO_LABELS,
    root: Path = ROOT,
    driver_version: str | None = None,
    cuda_version: str | None = None,
    nvlink: tuple[int, int] = (0, 0),
) -> NodeFacts:
    """This host's facts, with the GPU driver stack and NVLink counts the caller knows."""
    return NodeFacts(
        driver_version=driver_version,
        cuda_version=cuda_version,
        nvlink_up=nvlink[0],
        nvlink_total=nvlink[1],
        cpu_model=cpu_model(root),
        cpu_count=os.cpu_count() or 0,
        memory_mb=memory_mb(root),
        nics=nics(root),
        labels=labels,
    )


def cpu_model(root: Path = ROOT) -> str:
    """The CPU's model name from /proc/cpuinfo, else what the platform module says."""
    for line in _read(root / "proc/cpuinfo").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor()


def memory_mb(root: Path = ROOT) -> int:
    """Total memory in MiB from /proc/meminfo (0 when unknown)."""
    for line in _read(root / "proc/meminfo").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "MemTotal:" and parts[1].isdigit():
            return int(parts[1]) // 1024
    return 0


def nics(root: Path = ROOT) -> tuple[Nic, ...]:
    """The host's network interfaces but loopback, by name, from /sys/class/net."""
    net = root / "sys/class/net"
    try:
        names = sorted(entry.name for entry in net.iterdir())
    except OSError:
        return ()
    return tuple(_nic(net / name) for name in names if name != "lo")


def _nic(path: Path) -> Nic:
    speed = _read(path / "speed").strip()
    # Down links and virtual interfaces report -1, or refuse the read.
    speed_mbps = int(speed) if speed.isdigit() and int(speed) > 0 else None
    return Nic(path.name, speed_mbps, _read(path / "operstate").strip() == "up")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def mps_running(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether an NVIDIA MPS control daemon serves this host, as a CUDA client would find it:
    its pid file in the pipe directory (``CUDA_MPS_PIPE_DIRECTORY``, by default
    ``/tmp/nvidia-mps``) names a live process. NVML does not say; a stale directory left by a
    daemon that died must not make the agent promise limits nobody enforces."""
    pipes = Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    try:
        pid = int((pipes / "nvidia-cuda-mps-control.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return (pipes / "control").exists()
