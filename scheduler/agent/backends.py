"""What the node agent needs from the machine it runs on, and a simulated machine.

An `Agent` talks to the server; a `Backend` talks to the GPUs and the workload processes. The
simulated backend here serves demos, the fleet runner and tests; an NVML backend for real GPUs
implements the same `Backend` protocol.
"""

from __future__ import annotations

import asyncio
import random
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

# The exit code a workload reports when it was told to stop: killed by SIGTERM, as a POSIX
# process's returncode reads.
STOPPED_EXIT_CODE = -15


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the node inventory lists it."""

    index: int
    uuid: str
    memory_mb: int


@dataclass(frozen=True)
class NodeInventory:
    """What a node has: its name, its GPU model and its GPUs."""

    hostname: str
    gpu_model: str
    gpus: tuple[GpuInfo, ...]

    def to_message(self) -> dict[str, Any]:
        """The `node` field of a `hello` message."""
        return {
            "hostname": self.hostname,
            "gpu_model": self.gpu_model,
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "memory_mb": g.memory_mb} for g in self.gpus
            ],
        }


@dataclass(frozen=True)
class GpuSample:
    """One GPU's telemetry at one moment, field for field as in a `heartbeat`."""

    index: int
    util: float
    memory_used_mb: int
    temperature_c: float
    power_w: float

    def to_message(self) -> dict[str, Any]:
        """One item of a heartbeat's `gpus` list."""
        return {
            "index": self.index,
            "util": self.util,
            "memory_used_mb": self.memory_used_mb,
            "temperature_c": self.temperature_c,
            "power_w": self.power_w,
        }


@dataclass(frozen=True)
class Assignment:
    """One workload the server wants running on this node (an item of `desired_state`)."""

    workload_id: int
    gpu_indices: tuple[int, ...]
    command: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    simulated_duration_s: float | None = None
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = ""
    master_port: int = 0

    @classmethod
    def from_message(cls, item: Mapping[str, Any]) -> Assignment:
        """Build from an already validated `desired_state.assignments` item."""
        return cls(
            workload_id=item["workload_id"],
            gpu_indices=tuple(item["gpu_indices"]),
            command=item["command"],
            env=dict(item["env"]),
            simulated_duration_s=item["simulated_duration_s"],
            nnodes=item["nnodes"],
            node_rank=item["node_rank"],
            master_addr=item["master_addr"],
            master_port=item["master_port"],
        )


@dataclass(frozen=True)
class WorkloadExit:
    """How a workload ended: its exit code (None when unknown) and the last step it reached."""

    exit_code: int | None
    step: int


class Backend(Protocol):
    """What an agent needs from the machine: inventory, telemetry, and workload control."""

    def inventory(self) -> NodeInventory:
        """The node's name and GPUs."""
        ...

    def telemetry(self) -> list[GpuSample]:
        """One sample per GPU, taken now."""
        ...

    async def start(self, assignment: Assignment) -> None:
        """Launch a workload; return once it runs, raise if it cannot be started."""
        ...

    async def wait(self, workload_id: int) -> WorkloadExit:
        """Wait until a started workload ends, however it ends, and say how."""
        ...

    async def stop(self, workload_id: int) -> None:
        """Terminate a running workload, return once it has ended (exit -15); ended: no-op."""
        ...

    async def checkpoint(self, workload_id: int) -> dict[str, Any]:
        """Have a running workload save a checkpoint; return what to report (step, path)."""
        ...

    def step(self, workload_id: int) -> int:
        """The training step a started, not yet waited-for workload has reached."""
        ...


@dataclass
class _SimWorkload:
    assignment: Assignment
    started_at: float
    exit: asyncio.Future[WorkloadExit]
    timer: asyncio.TimerHandle | None = None


class SimulatedBackend:
    """A node whose workloads are timers and whose telemetry follows them.

    A workload runs `simulated_duration_s / speed` seconds of wall time (forever when the
    duration is None), advancing `steps_per_s` steps per simulated second, then exits 0.
    GPUs a running workload holds report 80-99 % utilisation, most of their memory and high
    power; idle GPUs report about nothing. The jitter comes from a `random.Random` seeded from
    `seed`, or from the hostname, so the same node tells the same story every run.
    """

    def __init__(
        self,
        hostname: str,
        gpu_model: str = "H100-SXM-80GB",
        gpus: int = 8,
        memory_mb: int = 81559,
        *,
        speed: float = 1.0,
        steps_per_s: float = 1.0,
        tdp_w: float = 700.0,
        seed: int | None = None,
    ) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self._inventory = NodeInventory(
            hostname=hostname,
            gpu_model=gpu_model,
            gpus=tuple(GpuInfo(i, _gpu_uuid(hostname, i), memory_mb) for i in range(gpus)),
        )
        self._speed = speed
        self._steps_per_s = steps_per_s
        self._tdp_w = tdp_w
        # crc32, not hash(): str hashes change from one process to the next.
        self._rng = random.Random(zlib.crc32(hostname.encode()) if seed is None else seed)
        self._workloads: dict[int, _SimWorkload] = {}

    def inventory(self) -> NodeInventory:
        """The simulated node's name and GPUs."""
        return self._inventory

    def telemetry(self) -> list[GpuSample]:
        """Busy GPUs near full load, idle GPUs near zero, with seeded jitter."""
        busy = {
            index
            for workload in self._workloads.values()
            if not workload.exit.done()
            for index in workload.assignment.gpu_indices
        }
        return [self._sample(gpu, gpu.index in busy) for gpu in self._inventory.gpus]

    async def start(self, assignment: Assignment) -> None:
        """Start a timer standing in for the workload's process."""
        self._check_startable(assignment)
        loop = asyncio.get_running_loop()
        workload = _SimWorkload(assignment, loop.time(), loop.create_future())
        if assignment.simulated_duration_s is not None:
            delay = assignment.simulated_duration_s / self._speed
            workload.timer = loop.call_later(delay, self._finish, workload, 0)
        self._workloads[assignment.workload_id] = workload

    async def wait(self, workload_id: int) -> WorkloadExit:
        """Wait for the workload's timer to run out or for `stop`."""
        workload = self._workloads[workload_id]
        # Shielded: a cancelled waiter (an agent shutting down) must not end the workload.
        result = await asyncio.shield(workload.exit)
        self._workloads.pop(workload_id, None)
        return result

    async def stop(self, workload_id: int) -> None:
        """End the workload now, as SIGTERM would; a workload already ended is left alone."""
        workload = self._workloads.get(workload_id)
        if workload is not None and not workload.exit.done():
            self._finish(workload, STOPPED_EXIT_CODE)

    async def checkpoint(self, workload_id: int) -> dict[str, Any]:
        """Pretend to save: report the step and a path naming it."""
        workload = self._workloads.get(workload_id)
        if workload is None or workload.exit.done():
            raise LookupError(f"workload {workload_id} is not running")
        step = self.step(workload_id)
        path = f"sim://{self._inventory.hostname}/workloads/{workload_id}/step-{step}"
        return {"step": step, "path": path}

    def step(self, workload_id: int) -> int:
        """Steps done so far: simulated seconds elapsed times `steps_per_s`."""
        workload = self._workloads[workload_id]
        if workload.exit.done():
            return workload.exit.result().step
        return self._steps_since_start(workload)

    def _check_startable(self, assignment: Assignment) -> None:
        if assignment.workload_id in self._workloads:
            raise ValueError(f"workload {assignment.workload_id} is already running")
        count = len(self._inventory.gpus)
        for index in assignment.gpu_indices:
            if not 0 <= index < count:
                raise ValueError(f"GPU index {index} does not exist on a node with {count} GPUs")

    def _steps_since_start(self, workload: _SimWorkload) -> int:
        elapsed = (asyncio.get_running_loop().time() - workload.started_at) * self._speed
        duration = workload.assignment.simulated_duration_s
        if duration is not None:
            elapsed = min(elapsed, duration)
        return int(elapsed * self._steps_per_s)

    def _finish(self, workload: _SimWorkload, exit_code: int) -> None:
        if workload.timer is not None:
            workload.timer.cancel()
        if exit_code == 0 and workload.assignment.simulated_duration_s is not None:
            # A natural end reports the full duration's steps, whatever the timer's lateness.
            step = int(workload.assignment.simulated_duration_s * self._steps_per_s)
        else:
            step = self._steps_since_start(workload)
        workload.exit.set_result(WorkloadExit(exit_code, step))

    def _sample(self, gpu: GpuInfo, busy: bool) -> GpuSample:
        rng = self._rng
        if busy:
            util, memory = rng.uniform(80.0, 99.0), gpu.memory_mb * rng.uniform(0.80, 0.95)
            temperature, power = rng.uniform(65.0, 82.0), self._tdp_w * rng.uniform(0.75, 0.97)
        else:
            util, memory = rng.uniform(0.0, 0.5), rng.uniform(0.0, 4.0)
            temperature, power = rng.uniform(30.0, 40.0), self._tdp_w * rng.uniform(0.08, 0.12)
        return GpuSample(
            gpu.index, round(util, 1), int(memory), round(temperature, 1), round(power, 1)
        )


def _gpu_uuid(hostname: str, index: int) -> str:
    # Stable per node and index, shaped like nvidia-smi's "GPU-<uuid>".
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'gpu{index}.{hostname}')}"
