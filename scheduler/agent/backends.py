"""What the node agent needs from the machine it runs on: the `Backend` protocol and its values.

An `Agent` talks to the server; a `Backend` talks to the GPUs and the workload processes. Two
backends implement it:

- `simulated.SimulatedBackend`: simulated GPUs whose workloads are timers (demos, the fleet
  runner, tests); faults can be injected for drills.
- `processes.ProcessBackend`: workloads as real processes, on top of a `Machine` that gives the
  inventory, the telemetry and the hardware's fault events: `nvml.NvmlMachine` on real GPUs, or
  `simulated.SimulatedGpus` on a machine without any.

Backends report what happens between the agent's questions (faults, checkpoints saved) as
`BackendEvent`s to the listener the agent subscribes, always on the event loop's thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from scheduler.agent.protocol import LOG_LINE_CHARS, printable

# The exit code a workload reports when it was told to stop: killed by SIGTERM, as a POSIX
# process's returncode reads.
STOPPED_EXIT_CODE = -15

# How long a checkpoint command waits for the save to land, unless the command says otherwise.
DEFAULT_CHECKPOINT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the node inventory lists it."""

    index: int
    uuid: str
    memory_mb: int


@dataclass(frozen=True)
class Nic:
    """One network interface of the host."""

    name: str
    speed_mbps: int | None  # None when the link reports no speed (down, or virtual)
    up: bool


@dataclass(frozen=True)
class TopologyLabels:
    """Where the node sits in the network, from the agent's configuration (None: not set)."""

    datacenter: str | None = None
    pod: str | None = None
    leaf: str | None = None


NO_LABELS = TopologyLabels()


@dataclass(frozen=True)
class NodeFacts:
    """What a node is beyond its GPUs: driver stack, NVLink, host and topology labels."""

    driver_version: str | None = None
    cuda_version: str | None = None
    nvlink_up: int = 0
    nvlink_total: int = 0
    cpu_model: str = ""
    cpu_count: int = 0
    memory_mb: int = 0
    nics: tuple[Nic, ...] = ()
    labels: TopologyLabels = field(default_factory=TopologyLabels)
    # Whether the agent runs each tenant's jobs as a user of its own (None: it runs no
    # processes, as the simulated backend). False: one tenant's work at a time on this node.
    isolates_tenants: bool | None = None

    def to_message(self) -> dict[str, Any]:
        """The `facts` field of a hello's `node`."""
        return {
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "nvlink": {"up": self.nvlink_up, "total": self.nvlink_total},
            "cpu_model": self.cpu_model,
            "cpu_count": self.cpu_count,
            "memory_mb": self.memory_mb,
            "nics": [{"name": n.name, "speed_mbps": n.speed_mbps, "up": n.up} for n in self.nics],
            "datacenter": self.labels.datacenter,
            "pod": self.labels.pod,
            "leaf": self.labels.leaf,
            "isolates_tenants": self.isolates_tenants,
        }


@dataclass(frozen=True)
class NodeInventory:
    """What a node has: its name, its GPU model, its GPUs and its facts."""

    hostname: str
    gpu_model: str
    gpus: tuple[GpuInfo, ...]
    facts: NodeFacts = field(default_factory=NodeFacts)

    def to_message(self) -> dict[str, Any]:
        """The `node` field of a `hello` message."""
        return {
            "hostname": self.hostname,
            "gpu_model": self.gpu_model,
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "memory_mb": g.memory_mb} for g in self.gpus
            ],
            "facts": self.facts.to_message(),
        }

    def enrolment_facts(self) -> dict[str, Any]:
        """The `facts` an enrolment request carries: the hello's facts and the GPU count."""
        return {
            **self.facts.to_message(),
            "gpu_model": self.gpu_model,
            "gpu_count": len(self.gpus),
        }


@dataclass(frozen=True)
class GpuProcess:
    """A process seen using a GPU, and the workload of this node it belongs to: None for a
    stranger, which no workload of the agent started."""

    pid: int
    workload_id: int | None

    def to_message(self) -> dict[str, Any]:
        return {"pid": self.pid, "workload_id": self.workload_id}


@dataclass(frozen=True)
class MigDevice:
    """One MIG device of a GPU: the slice a process sees as its GPU (by this UUID, in
    CUDA_VISIBLE_DEVICES), its profile as NVIDIA names it ("3g.40gb") and whether a process
    computes on it."""

    uuid: str
    profile: str
    in_use: bool

    def to_message(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "profile": self.profile, "in_use": self.in_use}


@dataclass(frozen=True)
class MigLayout:
    """A GPU's MIG mode, now and pending (a change of mode takes effect at the GPU's next
    reset), and, while it is on, the MIG devices it is sliced into."""

    enabled: bool
    pending: bool
    devices: tuple[MigDevice, ...] = ()

    def to_message(self) -> dict[str, Any]:
        """The `mig` record of a heartbeat's GPU sample."""
        devices = [device.to_message() for device in self.devices]
        return {"enabled": self.enabled, "pending": self.pending, "devices": devices}


def mig_profile(gpu_slices: int, compute_slices: int, memory_mb: int, gpu_memory_mb: int) -> str:
    """A MIG device's profile as nvidia-smi names it: "3g.40gb" (a GPU instance of three
    compute slices and 40 GB), or "1c.3g.40gb" for one slice of such an instance. Its memory is
    named as NVIDIA's tools name it: its share of the GPU's memory rounded up to eighths, times
    the GPU's memory in whole GiB (rounded up), rounded half up; the instance's own MiB would
    name a full H100's 80 GB instance "79gb", and an H200's half "70gb" where NVIDIA says 71."""
    eighths = math.ceil(memory_mb * 8 / gpu_memory_mb)
    gpu_gib = math.ceil(gpu_memory_mb / 1024)
    name = f"{gpu_slices}g.{(eighths * gpu_gib + 4) // 8}gb"
    return name if compute_slices == gpu_slices else f"{compute_slices}c.{name}"


@dataclass(frozen=True)
class GpuSample:
    """One GPU's telemetry at one moment, field for field as in a `heartbeat`."""

    index: int
    util: float
    memory_used_mb: int
    temperature_c: float
    power_w: float
    ecc_sbe: int = 0  # volatile corrected (single-bit) ECC errors
    ecc_dbe: int = 0  # volatile uncorrected (double-bit) ECC errors
    retired_pages: int = 0  # pages retired, or rows remapped on GPUs that remap rows
    processes: tuple[GpuProcess, ...] = ()  # what runs on it (`Backend.telemetry`)
    mig: MigLayout | None = None  # None: MIG off, or a GPU without it

    def to_message(self) -> dict[str, Any]:
        """One item of a heartbeat's `gpus` list; `mig` only where MIG is on or pending, so
        the heartbeats of GPUs without it stay as small as they were."""
        mig = {} if self.mig is None else {"mig": self.mig.to_message()}
        return mig | {
            "processes": [process.to_message() for process in self.processes],
            "index": self.index,
            "util": self.util,
            "memory_used_mb": self.memory_used_mb,
            "temperature_c": self.temperature_c,
            "power_w": self.power_w,
            "ecc_sbe": self.ecc_sbe,
            "ecc_dbe": self.ecc_dbe,
            "retired_pages": self.retired_pages,
        }


@dataclass(frozen=True)
class Assignment:
    """One workload the server wants running on this node (an item of `desired_state`)."""

    workload_id: int
    gpu_indices: tuple[int, ...]
    command: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    simulated_duration_s: float | None = None
    simulated_speed: float = 1.0  # of its pace on all the GPUs it asked for
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = ""
    master_port: int = 0
    attempt: int = 0  # which run: a new attempt of a listed workload restarts it
    serve_port: int | None = None  # an inference replica: it serves HTTP on this port
    tenant: int | None = None  # whose work: an agent that can runs each tenant's as its own user
    slices: int = 0  # a share of its one GPU, in eighths (1-7); 0: its GPUs whole
    mig: str = ""  # a MIG instance of its one GPU, of this profile ("1g.10gb"); "": none

    @classmethod
    def from_message(cls, item: Mapping[str, Any]) -> Assignment:
        """Build from an already validated `desired_state.assignments` item."""
        return cls(
            workload_id=item["workload_id"],
            gpu_indices=tuple(item["gpu_indices"]),
            command=item["command"],
            env=dict(item["env"]),
            simulated_duration_s=item["simulated_duration_s"],
            simulated_speed=item.get("simulated_speed", 1.0),
            nnodes=item["nnodes"],
            node_rank=item["node_rank"],
            master_addr=item["master_addr"],
            master_port=item["master_port"],
            attempt=item.get("attempt", 0),
            serve_port=item.get("serve_port"),
            tenant=item.get("tenant"),
            slices=item.get("slices", 0),
            mig=item.get("mig", ""),
        )


@dataclass(frozen=True)
class WorkloadExit:
    """How a workload ended: its exit code (None when unknown), the last step it reached, and
    the last lines of its output (real processes only)."""

    exit_code: int | None
    step: int
    log_tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Output:
    """Lines a workload wrote, read from `offset` on, and where the next read begins (an
    offset the backend defines: bytes of its log for processes)."""

    lines: tuple[str, ...]
    next_offset: int


# One read of a workload's output: a `logs` message's worth. JSON writes a byte that is not
# text as six ("\ufffd"), so even output that is all such bytes stays inside a frame (256 KiB).
OUTPUT_BATCH_BYTES = 16 * 1024


# Runs whose output a backend can still read: the newest this many, ended or not.
REMEMBERED_RUNS = 256


def remember_run(runs: dict[int, Any], workload_id: int, run: Any) -> None:
    """Keep `run` as the workload's newest, forgetting the oldest beyond `REMEMBERED_RUNS`."""
    runs.pop(workload_id, None)
    runs[workload_id] = run
    while len(runs) > REMEMBERED_RUNS:
        del runs[next(iter(runs))]


def output_line(line: str) -> str:
    """A line of output as it travels: as a terminal would show it, without its control
    (`protocol.printable`: no NUL either, which no database keeps), cut, with a mark, at the
    protocol's length."""
    line = printable(line)
    if len(line) <= LOG_LINE_CHARS:
        return line
    return line[: LOG_LINE_CHARS - 1] + "…"


@dataclass(frozen=True)
class BackendEvent:
    """Something that happened on the node between the agent's questions: an `event` message's
    `kind` ("fault" or "checkpoint_saved"), its workload (None for the node) and its detail."""

    kind: str
    workload_id: int | None
    detail: Mapping[str, Any]


EventListener = Callable[[BackendEvent], None]


@dataclass(frozen=True)
class Serving:
    """Where an inference replica listens, and its load when the backend can tell (requests
    in flight, served or waiting; requests finished per second)."""

    host: str
    port: int
    in_flight: int | None = None
    requests_per_s: float | None = None

    def message(self) -> dict[str, Any]:
        """The heartbeat's `serving` record."""
        known = {"in_flight": self.in_flight, "requests_per_s": self.requests_per_s}
        return {"host": self.host, "port": self.port} | {
            k: v for k, v in known.items() if v is not None
        }


@dataclass(frozen=True)
class ShareLimits:
    """How the node holds a share job to its share of a GPU: MPS, which caps the job's SMs and
    pins its device memory (so neighbours keep theirs), or, where no MPS daemon runs, time
    slicing, which isolates nothing: the job gets turns on the GPU, and its memory is bounded
    only by its neighbours'."""

    mps: bool
    sm_percent: int = 0  # of the GPU's SMs the job may use (MPS only)
    memory_mb: int = 0  # device memory pinned for it (MPS only)

    @classmethod
    def of(cls, slices: int, mps: bool, gpu_memory_mb: int) -> ShareLimits:
        """The limits of a share of `slices` eighths of a GPU with `gpu_memory_mb` MB."""
        if not mps:
            return cls(mps=False)
        return cls(True, math.ceil(100 * slices / 8), gpu_memory_mb * slices // 8)

    def env(self) -> dict[str, str]:
        """The MPS client's variables: the thread percentage, and the pinned memory limit of
        its one visible device (ordinal 0, `<device>=<N>MB`, as NVIDIA's MPS docs give it)."""
        if not self.mps:
            return {}
        return {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(self.sm_percent),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={self.memory_mb}MB",
        }

    def message(self) -> dict[str, Any]:
        """The heartbeat's `share` record."""
        mode = "mps" if self.mps else "time_slicing"
        return {"mode": mode, "sm_percent": self.sm_percent, "memory_mb": self.memory_mb}


@dataclass(frozen=True)
class FaultDrill:
    """What injecting a fault did: a line for the ack, and how long the agent must go silent
    (a simulated heartbeat loss) before it speaks again."""

    detail: str
    silence_s: float = 0.0


class FaultRefused(ValueError):
    """A fault that this backend cannot, or will not, inject."""


def fault_detail(code: str, xid: int | None, gpu_index: int | None, message: str) -> dict[str, Any]:
    """The `detail` of a `fault` event."""
    return {"code": code, "xid": xid, "gpu_index": gpu_index, "message": message}


def with_processes(
    samples: list[GpuSample], processes: Mapping[int, list[GpuProcess]]
) -> list[GpuSample]:
    """The samples, each with the processes seen on its GPU."""
    return [replace(sample, processes=tuple(processes.get(sample.index, ()))) for sample in samples]


class NodeFault(Exception):
    """The node itself keeps a workload from starting (a GPU fallen off the bus): the agent
    reports `detail` (a `fault` event's) as the node's fault, not as the job's failure."""

    def __init__(self, detail: dict[str, Any]) -> None:
        super().__init__(detail["message"])
        self.detail = detail


def lost_gpu(index: int) -> NodeFault:
    """A start refused because GPU `index` has fallen off the bus (XID 79's symptom)."""
    message = f"GPU {index} has fallen off the bus; the node needs a reboot"
    return NodeFault(fault_detail("xid-79", 79, index, message))


class Machine(Protocol):
    """The hardware side of a node, without its workloads: what `ProcessBackend` runs on."""

    def inventory(self) -> NodeInventory:
        """The node's name, GPUs and facts."""
        ...

    def telemetry(self, busy: Collection[int]) -> list[GpuSample]:
        """One sample per GPU, taken now. `busy`: the GPUs workloads hold, which a simulated
        machine uses to make up their load and a real one ignores."""
        ...

    def subscribe(self, listener: EventListener) -> None:
        """Report hardware faults to `listener` from now on (called from the event loop)."""
        ...

    def lost(self, index: int) -> bool:
        """Whether GPU `index` has fallen off the bus (it no longer answers)."""
        ...

    def compute_processes(self) -> dict[int, list[int]]:
        """The pids the hardware sees computing on each GPU (NVML's compute processes);
        empty where there is no hardware to ask."""
        ...

    def mig_instance(self, index: int, profile: str, taken: Collection[str]) -> str:
        """The UUID of a MIG device of `profile` on GPU `index` that no process uses and that
        is none of `taken`: an idle one, else one created, the GPU re-sliced where it has no
        room and none of its MIG devices is in use. ValueError saying why where none can be."""
        ...

    def mig_off(self, index: int) -> None:
        """GPU `index` out of MIG mode for a whole-GPU job or a share, its idle MIG devices
        destroyed; nothing where MIG is off or the GPU has none. ValueError saying why where a
        device is in use or only a GPU reset would turn it off."""
        ...

    def check(self) -> str:
        """A node's health check of its GPUs (slow: seconds): a line of what passed, or
        NodeFault / RuntimeError saying what failed."""
        ...

    def inject_fault(self, code: str, gpu_index: int | None, args: Mapping[str, Any]) -> FaultDrill:
        """Raise a fault for a drill, or refuse with FaultRefused."""
        ...

    def close(self) -> None:
        """Release the hardware interfaces; idempotent."""
        ...


class Backend(Protocol):
    """What an agent needs from the machine: inventory, telemetry, events and workload control."""

    def inventory(self) -> NodeInventory:
        """The node's name, GPUs and facts."""
        ...

    def telemetry(self) -> list[GpuSample]:
        """One sample per GPU, taken now, with the processes seen on it."""
        ...

    async def health_check(self) -> str:
        """Whether the node may take work: its GPUs answer and compute, and no process that no
        workload of this agent started holds one. A line of what passed; raises NodeFault or
        RuntimeError saying what failed."""
        ...

    def subscribe(self, listener: EventListener) -> None:
        """Send faults and saved checkpoints to `listener` from now on (one listener)."""
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

    async def checkpoint(
        self,
        workload_id: int,
        request_id: str | None = None,
        timeout_s: float = DEFAULT_CHECKPOINT_TIMEOUT_S,
        kind: str = "requested",
        reason: str = "",
    ) -> dict[str, Any]:
        """Have a running workload save a checkpoint of `kind` ("requested", or "triggered"
        by a fault) and return once it has landed, with the `checkpoint_saved` detail (also
        reported to the listener). Raises LookupError when the workload is not running or ends
        first, TimeoutError when no save lands in time, RuntimeError when the save failed."""
        ...

    async def delete_saves(self, workload_id: int, locations: list[str]) -> int:
        """Remove these saves of the workload (files or folders in its checkpoint directory);
        return how many were there. Raises ValueError, removing nothing, for a location outside
        that directory."""
        ...

    async def fence(self) -> list[int]:
        """Stop whatever an earlier agent process left running on this machine, before the
        agent first says hello; return the workloads it stopped."""
        ...

    def step(self, workload_id: int) -> int:
        """The step a started, not yet waited-for workload can resume from (its newest save,
        or what a simulated workload has done)."""
        ...

    def progress(self, workload_id: int) -> int | None:
        """The training step a running workload reports having reached, or None when it
        reports none (hangs and stragglers are judged only by reported steps)."""
        ...

    def serving(self, workload_id: int) -> Serving | None:
        """Where a running inference replica listens and its load; None for other work."""
        ...

    def share(self, workload_id: int) -> ShareLimits | None:
        """How a running share job is held to its share of a GPU; None for whole-GPU work."""
        ...

    def output(self, workload_id: int, offset: int, limit_bytes: int) -> Output:
        """What the workload's newest run (running or ended) has written from `offset` on:
        whole lines (and, once the run has ended, a last unfinished one), about `limit_bytes`
        of them at most. Nothing when the workload is unknown."""
        ...

    def inject_fault(self, code: str, gpu_index: int | None, args: Mapping[str, Any]) -> FaultDrill:
        """Raise a fault for an operator's drill, or refuse with FaultRefused."""
        ...
