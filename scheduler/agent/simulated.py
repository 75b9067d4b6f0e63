"""Simulated GPUs, and a simulated node whose workloads are timers, with faults for drills.

`SimulatedGpus` is a `Machine`: an inventory, telemetry that follows the load it is told about,
and injectable faults. `SimulatedBackend` is a whole `Backend` on top of it, as the fleet runner
and the demos use: a workload is a timer that advances steps, saves checkpoints and ends.

Faults a drill can inject (`inject_fault`, the `inject_fault` command), by fault catalogue code:

- any XID, as "xid-<n>" (79, 48, 94 and 74 are the usual drills), and the catalogue's hardware
  faults ("ecc-dbe", "ecc-sbe-storm", "nvlink-down", "nic-down"): reported as a `fault` event on
  the GPU named (GPU 0, or the first busy one, when none is; the whole node for "nic-down"); a
  kind that `kills_job` then ends the workloads on that GPU (on the node) with exit code
  `FAULT_EXIT_CODE`. XID 79 takes the GPU off the bus: it stops reporting telemetry and takes
  no new work. XIDs 48, 94, 95 and "ecc-dbe" count an uncorrectable ECC error and a retired
  page; "ecc-sbe-storm" brings the retired pages to the site limit.
- "heartbeat-loss": the agent goes silent for `duration_s` (default 30) and keeps its workloads.
- "slow-node" and "straggler": steps take `factor` (default 3, and 2) times longer, for
  `duration_s` or until the agent ends; "hang": the running workloads' steps stop, they neither
  progress nor end, for `duration_s` or until they are stopped (a restart clears a hang, as it
  does a stuck collective).

The last two groups are for the control plane to notice (missed heartbeats, step rates), so the
agent reports no event for them.

With `mig`, a node of a model that has MIG (`scheduler.mig.has_mig`) reports every GPU in MIG
mode, sliced as `SIMULATED_MIG` (3g, 2g and two 1g), until a whole-GPU job or a share starts
on it: MIG is off on that GPU from then on, as the agent turns it off. A simulated MIG job
holds its GPU whole, so all of its MIG devices are in use. Without `mig` (the default) no GPU
reports MIG.

Simulated workloads honour the checkpoint contract's variables in their assignment's env:
`WANKA_CHECKPOINT_INTERVAL_S` (simulated seconds between periodic saves) and
`WANKA_RESUME_FROM` (a location ending in "/step-<n>" starts the run at step n).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
import uuid
import zlib
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.agent.backends import (
    DEFAULT_CHECKPOINT_TIMEOUT_S,
    NO_LABELS,
    STOPPED_EXIT_CODE,
    Assignment,
    BackendEvent,
    EventListener,
    FaultDrill,
    FaultRefused,
    GpuInfo,
    GpuProcess,
    GpuSample,
    MigDevice,
    MigLayout,
    Nic,
    NodeFacts,
    NodeInventory,
    Output,
    Serving,
    ShareLimits,
    TopologyLabels,
    WorkloadExit,
    fault_detail,
    lost_gpu,
    mig_profile,
    remember_run,
    with_processes,
)
from scheduler.agent.contract import ENV_CHECKPOINT_INTERVAL_S, ENV_RESUME_FROM
from scheduler.agent.serving import SimulatedReplica
from scheduler.faults import RETIRED_PAGES_LIMIT, FaultKind, lookup
from scheduler.mig import has_mig

logger = logging.getLogger(__name__)

# How a simulated workload that a fault killed exits: as a CUDA error raised in Python does.
FAULT_EXIT_CODE = 1

DEFAULT_SILENCE_S = 30.0
# How much longer a step takes, by drill; a hang never finishes one.
SLOWDOWNS = {"slow-node": 3.0, "straggler": 2.0, "hang": math.inf}
NODE_FAULTS = ("nic-down",)  # faults of the node, not of one GPU

# A simulated checkpoint: what a large model's shard plus optimizer state weighs per GPU. The
# save itself is instant, and says so (a duration of 0): nothing stalls.
_CHECKPOINT_BYTES_PER_GPU = 16 * 2**30

_NVLINKS_PER_GPU = 18  # H100 / H200 SXM
LOG_EVERY_STEPS = 100  # a simulated workload's output: one line per this many steps
_RESUME_STEP = re.compile(r"/step-(\d+)$")
# A simulated MIG GPU: (compute slices, eighths of the memory) of each MIG device.
SIMULATED_MIG = ((3, 4), (2, 2), (1, 1), (1, 1))


@dataclass
class _GpuState:
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    retired_pages: int = 0
    lost: bool = False  # fell off the bus
    mig_off: bool = False  # MIG turned off for a whole-GPU job, on a node simulated with MIG


class SimulatedGpus:
    """A node's simulated GPUs: stable inventory, load-following telemetry, injectable XIDs.

    The jitter comes from a `random.Random` seeded from `seed`, or from the hostname, so the
    same node tells the same story every run.
    """

    def __init__(
        self,
        hostname: str,
        gpu_model: str = "H100-SXM-80GB",
        gpus: int = 8,
        memory_mb: int = 81559,
        *,
        tdp_w: float = 700.0,
        labels: TopologyLabels = NO_LABELS,
        seed: int | None = None,
        mig: bool = False,
    ) -> None:
        self._inventory = NodeInventory(
            hostname=hostname,
            gpu_model=gpu_model,
            gpus=tuple(GpuInfo(i, _gpu_uuid(hostname, i), memory_mb) for i in range(gpus)),
            facts=_simulated_facts(gpus, labels),
        )
        self._tdp_w = tdp_w
        # crc32, not hash(): str hashes change from one process to the next.
        self._rng = random.Random(zlib.crc32(hostname.encode()) if seed is None else seed)
        self._state = [_GpuState() for _ in range(gpus)]
        self._listener: EventListener | None = None
        self._mig = mig and has_mig(gpu_model)

    def inventory(self) -> NodeInventory:
        """The simulated node's name, GPUs and facts."""
        return self._inventory

    def telemetry(self, busy: Collection[int]) -> list[GpuSample]:
        """Busy GPUs near full load, idle ones near zero; a GPU off the bus reports nothing."""
        return [
            self._sample(gpu, gpu.index in busy)
            for gpu in self._inventory.gpus
            if not self._state[gpu.index].lost
        ]

    def subscribe(self, listener: EventListener) -> None:
        """Report injected faults to `listener`."""
        self._listener = listener

    def lost(self, index: int) -> bool:
        """Whether GPU `index` has fallen off the bus."""
        return self._state[index].lost

    def compute_processes(self) -> dict[int, list[int]]:
        """No hardware to ask: the processes backend reports its own."""
        return {}

    def mig_instance(self, index: int, profile: str, taken: Collection[str]) -> str:
        """Simulated GPUs are not sliced: a MIG job needs NVML (the nvml backend)."""
        raise ValueError(f"simulated GPUs have no {profile} MIG devices to run on")

    def mig_off(self, index: int) -> None:
        """GPU `index` reports MIG off from now on (its simulated devices are never in use)."""
        self._state[index].mig_off = True

    def check(self) -> str:
        """Every simulated GPU is still on the bus."""
        for gpu in self._inventory.gpus:
            if self.lost(gpu.index):
                raise lost_gpu(gpu.index)
        return f"{len(self._inventory.gpus)} simulated GPUs answer"

    def inject_fault(self, code: str, gpu_index: int | None, args: Mapping[str, Any]) -> FaultDrill:
        """Raise a hardware fault on a GPU (GPU 0 unless named) or on the node, or silence the
        agent for a while; see the module docstring."""
        if code == "heartbeat-loss":
            silence_s = float(args.get("duration_s", DEFAULT_SILENCE_S))
            return FaultDrill(f"the agent goes silent for {silence_s:g} s", silence_s)
        kind = _hardware_kind(code)
        index = None if code in NODE_FAULTS else 0 if gpu_index is None else gpu_index
        if index is not None:
            if not 0 <= index < len(self._state):
                raise FaultRefused(f"GPU index {index} does not exist on this node")
            self._apply(kind, self._state[index])
        if self._listener is not None:
            detail = fault_detail(kind.code, kind.xid, index, _fault_message(kind, index))
            self._listener(BackendEvent("fault", None, detail))
        return FaultDrill(
            f"{kind.code} raised " + ("on the node" if index is None else f"on GPU {index}")
        )

    def close(self) -> None:
        """Nothing to release."""

    @staticmethod
    def _apply(kind: FaultKind, state: _GpuState) -> None:
        if kind.xid == 79:
            state.lost = True
        elif kind.xid in (48, 94, 95) or kind.code == "ecc-dbe":
            state.ecc_dbe += 1
            state.retired_pages += 1
        elif kind.code == "ecc-sbe-storm":
            state.retired_pages = max(state.retired_pages, RETIRED_PAGES_LIMIT)
        elif kind.xid == 92:
            state.ecc_sbe += 100

    def _sample(self, gpu: GpuInfo, busy: bool) -> GpuSample:
        rng = self._rng
        if busy:
            util, memory = rng.uniform(80.0, 99.0), gpu.memory_mb * rng.uniform(0.80, 0.95)
            temperature, power = rng.uniform(65.0, 82.0), self._tdp_w * rng.uniform(0.75, 0.97)
        else:
            util, memory = rng.uniform(0.0, 0.5), rng.uniform(0.0, 4.0)
            temperature, power = rng.uniform(30.0, 40.0), self._tdp_w * rng.uniform(0.08, 0.12)
        state = self._state[gpu.index]
        return GpuSample(
            gpu.index,
            round(util, 1),
            int(memory),
            round(temperature, 1),
            round(power, 1),
            state.ecc_sbe,
            state.ecc_dbe,
            state.retired_pages,
            mig=self._mig_layout(gpu, busy) if self._mig and not state.mig_off else None,
        )

    def _mig_layout(self, gpu: GpuInfo, busy: bool) -> MigLayout:
        devices = tuple(
            MigDevice(
                f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'mig{i}.{gpu.uuid}')}",
                mig_profile(slices, slices, gpu.memory_mb * eighths // 8, gpu.memory_mb),
                busy,
            )
            for i, (slices, eighths) in enumerate(SIMULATED_MIG)
        )
        return MigLayout(enabled=True, pending=True, devices=devices)


@dataclass
class _SimWorkload:
    assignment: Assignment
    exit: asyncio.Future[WorkloadExit]
    done_s: float  # simulated seconds of work done at loop time `mark`
    mark: float
    interval_s: float | None  # simulated seconds between periodic checkpoints
    hung: bool = False  # a hang drill stopped its steps
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    replica: SimulatedReplica | None = None  # an inference replica's server
    port: int = 0

    @property
    def duration_s(self) -> float:
        duration = self.assignment.simulated_duration_s
        return math.inf if duration is None else duration

    def progress(self, now: float, rate: float) -> float:
        return min(self.done_s + (now - self.mark) * rate, self.duration_s)


class SimulatedBackend:
    """A node whose workloads are timers and whose telemetry follows them.

    A workload runs `simulated_duration_s / speed` seconds of wall time (forever when the
    duration is None; longer on fewer GPUs than it asked for, by its `simulated_speed`),
    advancing `steps_per_s` steps per simulated second, then exits 0. GPUs a running workload
    holds report 80-99 % utilisation, most of their memory and high
    power; idle GPUs report about nothing. See the module docstring for faults and checkpoints.
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
        labels: TopologyLabels = NO_LABELS,
        mig: bool = False,
    ) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self._gpus = SimulatedGpus(
            hostname, gpu_model, gpus, memory_mb, tdp_w=tdp_w, labels=labels, seed=seed, mig=mig
        )
        self._speed = speed
        self._slow_factor = 1.0
        self._slow_timer: asyncio.TimerHandle | None = None
        self._steps_per_s = steps_per_s
        self._workloads: dict[int, _SimWorkload] = {}
        self._runs: dict[int, tuple[int, _SimWorkload]] = {}  # its newest run, first step
        self._listener: EventListener | None = None

    @property
    def _rate(self) -> float:
        """Simulated seconds of work per wall second, now."""
        return self._speed / self._slow_factor

    def inventory(self) -> NodeInventory:
        """The simulated node's name, GPUs and facts."""
        return self._gpus.inventory()

    def telemetry(self) -> list[GpuSample]:
        """Busy GPUs near full load, idle GPUs near zero, with seeded jitter; each running
        workload is seen on its GPUs (as pid 0: it has no process)."""
        seen = defaultdict(list)
        for workload in self._workloads.values():
            if not workload.exit.done():
                for index in workload.assignment.gpu_indices:
                    seen[index].append(GpuProcess(0, workload.assignment.workload_id))
        return with_processes(self._gpus.telemetry(self._busy()), seen)

    async def health_check(self) -> str:
        """The simulated GPUs' check; a simulated workload holds no GPU once it has ended."""
        return self._gpus.check()

    def subscribe(self, listener: EventListener) -> None:
        """Report faults and saved checkpoints to `listener`."""
        self._listener = listener
        self._gpus.subscribe(listener)

    async def start(self, assignment: Assignment) -> None:
        """Start a timer standing in for the workload's process (on a GPU in MIG mode, MIG
        turned off first, as the agent does for a whole-GPU job or a share)."""
        self._check_startable(assignment)
        for index in assignment.gpu_indices if not assignment.mig else ():
            self._gpus.mig_off(index)
        loop = asyncio.get_running_loop()
        workload = _SimWorkload(
            assignment,
            loop.create_future(),
            done_s=self._resumed_progress(assignment),
            mark=loop.time(),
            interval_s=_positive_float(assignment.env.get(ENV_CHECKPOINT_INTERVAL_S)),
        )
        if assignment.serve_port:
            workload.replica = SimulatedReplica(self._gpus.inventory().gpu_model)
            workload.port = await workload.replica.start()
        self._workloads[assignment.workload_id] = workload
        remember_run(self._runs, assignment.workload_id, (self._step_now(workload), workload))
        self._schedule(workload)

    async def wait(self, workload_id: int) -> WorkloadExit:
        """Wait for the workload's timer to run out, for `stop`, or for a fault."""
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

    async def checkpoint(
        self,
        workload_id: int,
        request_id: str | None = None,
        timeout_s: float = DEFAULT_CHECKPOINT_TIMEOUT_S,
        kind: str = "requested",
        reason: str = "",
    ) -> dict[str, Any]:
        """Save at once: report the step reached and a location naming it."""
        workload = self._workloads.get(workload_id)
        if workload is None or workload.exit.done():
            raise LookupError(f"workload {workload_id} is not running")
        return self._save(workload, kind, request_id)

    def step(self, workload_id: int) -> int:
        """Steps done so far: simulated seconds of work times `steps_per_s`."""
        workload = self._workloads[workload_id]
        if workload.exit.done():
            return workload.exit.result().step
        return self._step_now(workload)

    async def delete_saves(self, workload_id: int, locations: list[str]) -> int:
        """Simulated saves are only names: each is forgotten at once."""
        return len(locations)

    async def fence(self) -> list[int]:
        """Nothing to stop: simulated workloads end with the agent's process."""
        return []

    def progress(self, workload_id: int) -> int | None:
        """A simulated workload reports every step it makes."""
        return self.step(workload_id)

    def share(self, workload_id: int) -> ShareLimits | None:
        """Simulated GPUs have no MPS: a share is time-sliced (and the pace says nothing of
        it)."""
        workload = self._workloads.get(workload_id)
        if workload is None or not workload.assignment.slices:
            return None
        return ShareLimits.of(workload.assignment.slices, False, 0)

    def serving(self, workload_id: int) -> Serving | None:
        """A replica's server (on 127.0.0.1 and a port of its own) and its load."""
        replica = self._workloads[workload_id].replica
        if replica is None:
            return None
        port = self._workloads[workload_id].port
        return Serving("127.0.0.1", port, replica.in_flight, round(replica.requests_per_s(), 3))

    def output(self, workload_id: int, offset: int, limit_bytes: int) -> Output:
        """A line every `LOG_EVERY_STEPS` steps of the newest run; `offset` counts lines."""
        if workload_id not in self._runs:
            return Output((), offset)
        first, workload = self._runs[workload_id]
        done = workload.exit.result().step if workload.exit.done() else self._step_now(workload)
        marks = range(first - first % LOG_EVERY_STEPS + LOG_EVERY_STEPS, done + 1, LOG_EVERY_STEPS)
        total = workload.duration_s * self._steps_per_s
        of = f" of {total:.0f}" if math.isfinite(total) else ""
        lines = tuple(f"step {n}{of}" for n in marks[offset : offset + limit_bytes // 16])
        return Output(lines, offset + len(lines))

    def inject_fault(self, code: str, gpu_index: int | None, args: Mapping[str, Any]) -> FaultDrill:
        """Raise a fault for a drill; see the module docstring for what each one does."""
        if code in SLOWDOWNS:
            return self._slow_down(code, args)
        if gpu_index is None and code not in NODE_FAULTS:
            gpu_index = min(self._busy(), default=0)  # hit the work, as a drill means to
        drill = self._gpus.inject_fault(code, gpu_index, args)
        if code == "heartbeat-loss" or not lookup(code).kills_job:
            return drill
        killed = self._kill_on(None if code in NODE_FAULTS else gpu_index, lookup(code))
        return FaultDrill(f"{drill.detail}; it killed workload(s) {killed}") if killed else drill

    # -- internals ----------------------------------------------------------------------------

    def _busy(self) -> set[int]:
        return {
            index
            for workload in self._workloads.values()
            if not workload.exit.done()
            for index in workload.assignment.gpu_indices
        }

    def _check_startable(self, assignment: Assignment) -> None:
        if assignment.workload_id in self._workloads:
            raise ValueError(f"workload {assignment.workload_id} is already running")
        count = len(self._gpus.inventory().gpus)
        for index in assignment.gpu_indices:
            if not 0 <= index < count:
                raise ValueError(f"GPU index {index} does not exist on a node with {count} GPUs")
            if self._gpus.lost(index):
                raise lost_gpu(index)

    def _resumed_progress(self, assignment: Assignment) -> float:
        match = _RESUME_STEP.search(assignment.env.get(ENV_RESUME_FROM, ""))
        if match is None or self._steps_per_s <= 0:
            return 0.0
        done = int(match.group(1)) / self._steps_per_s
        duration = assignment.simulated_duration_s
        return done if duration is None else min(done, duration)

    def _step_now(self, workload: _SimWorkload) -> int:
        now = asyncio.get_running_loop().time()
        # The epsilon: a timer may fire a hair before its time, and step 10 must not read 9.
        return int(workload.progress(now, self._rate_of(workload)) * self._steps_per_s + 1e-6)

    def _schedule(self, workload: _SimWorkload) -> None:
        """(Re)arm the workload's timers for the current rate: its end and its next save."""
        for timer in workload.timers:
            timer.cancel()
        workload.timers.clear()
        rate = self._rate_of(workload)
        if rate == 0:
            return  # a hang: nothing ends, nothing is saved, until the steps go on
        loop = asyncio.get_running_loop()
        done = workload.progress(loop.time(), rate)
        if workload.duration_s < math.inf:
            delay = (workload.duration_s - done) / rate
            workload.timers.append(loop.call_later(delay, self._finish, workload, 0))
        if workload.interval_s is not None:
            next_save = (math.floor(done / workload.interval_s) + 1) * workload.interval_s
            if next_save < workload.duration_s:
                delay = (next_save - done) / rate
                workload.timers.append(loop.call_later(delay, self._periodic, workload))

    def _periodic(self, workload: _SimWorkload) -> None:
        if not workload.exit.done():
            self._save(workload, "periodic", None)
            self._schedule(workload)

    def _save(self, workload: _SimWorkload, kind: str, request_id: str | None) -> dict[str, Any]:
        step = self._step_now(workload)
        wid = workload.assignment.workload_id
        size = max(1, len(workload.assignment.gpu_indices)) * _CHECKPOINT_BYTES_PER_GPU
        detail = {
            "step": step,
            "location": f"sim://{self.inventory().hostname}/workloads/{wid}/step-{step}",
            "size_bytes": size,
            "duration_s": 0.0,
            "kind": kind,
            "request_id": request_id,
            "status": "complete",
        }
        if self._listener is not None:
            self._listener(BackendEvent("checkpoint_saved", wid, detail))
        return detail

    def _rate_of(self, workload: _SimWorkload) -> float:
        return 0.0 if workload.hung else self._rate * workload.assignment.simulated_speed

    def _hang(self, args: Mapping[str, Any]) -> FaultDrill:
        loop = asyncio.get_running_loop()
        now = loop.time()
        hung = [w for w in self._workloads.values() if not w.exit.done()]
        for workload in hung:
            workload.done_s, workload.mark = workload.progress(now, self._rate_of(workload)), now
            workload.hung = True
            self._schedule(workload)
        duration = args.get("duration_s")
        if duration is None:
            return FaultDrill("steps stop")
        loop.call_later(float(duration), self._unhang, hung)
        return FaultDrill(f"steps stop for {float(duration):g} s")

    def _unhang(self, hung: list[_SimWorkload]) -> None:
        now = asyncio.get_running_loop().time()
        for workload in hung:
            if workload.hung and not workload.exit.done():
                workload.mark, workload.hung = now, False
                self._schedule(workload)

    def _slow_down(self, code: str, args: Mapping[str, Any]) -> FaultDrill:
        if code == "hang":
            return self._hang(args)
        factor = float(args.get("factor", SLOWDOWNS[code]))
        if factor < 1:
            raise FaultRefused(f"a slow node's factor must be at least 1, got {factor:g}")
        self._set_slow_factor(factor)
        loop = asyncio.get_running_loop()
        if self._slow_timer is not None:
            self._slow_timer.cancel()
            self._slow_timer = None
        duration = args.get("duration_s")
        if duration is not None:
            self._slow_timer = loop.call_later(float(duration), self._set_slow_factor, 1.0)
        lasting = "" if duration is None else f" for {float(duration):g} s"
        return FaultDrill(f"steps take {factor:g} times longer{lasting}")

    def _set_slow_factor(self, factor: float) -> None:
        now = asyncio.get_running_loop().time()
        running = [w for w in self._workloads.values() if not w.exit.done()]
        for workload in running:  # bank the progress made at the old rate
            workload.done_s, workload.mark = workload.progress(now, self._rate_of(workload)), now
        self._slow_factor = factor
        for workload in running:
            self._schedule(workload)

    def _kill_on(self, gpu_index: int | None, kind: FaultKind) -> list[int]:
        """End the workloads on `gpu_index` (on every GPU for None) as the fault would."""
        hit = [
            w
            for w in self._workloads.values()
            if not w.exit.done() and (gpu_index is None or gpu_index in w.assignment.gpu_indices)
        ]
        for workload in hit:
            logger.info(
                "%s: %s killed workload %s",
                self.inventory().hostname,
                kind.code,
                workload.assignment.workload_id,
            )
            self._finish(workload, FAULT_EXIT_CODE)
        return sorted(w.assignment.workload_id for w in hit)

    def _finish(self, workload: _SimWorkload, exit_code: int) -> None:
        for timer in workload.timers:
            timer.cancel()
        if workload.replica is not None:
            workload.replica.close()
        if exit_code == 0 and workload.duration_s < math.inf:
            # A natural end reports the full duration's steps, whatever the timer's lateness.
            step = int(workload.duration_s * self._steps_per_s)
        else:
            step = self._step_now(workload)
        workload.exit.set_result(WorkloadExit(exit_code, step))


def _hardware_kind(code: str) -> FaultKind:
    """The catalogue kind of a fault simulated GPUs can raise, or FaultRefused."""
    try:
        kind = lookup(code)
    except KeyError:
        raise FaultRefused(f"unknown fault {code!r}; inject a fault catalogue code") from None
    if code in SLOWDOWNS:
        raise FaultRefused(f"{code!r} slows simulated workloads: it needs the simulated backend")
    return kind


def _fault_message(kind: FaultKind, index: int | None) -> str:
    if kind.xid is not None:
        return f"XID {kind.xid} on GPU {index}: {kind.title} (simulated)"
    where = "" if index is None else f" on GPU {index}"
    return f"{kind.title}{where} (simulated)"


def _positive_float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value > 0 and math.isfinite(value) else None


def _simulated_facts(gpus: int, labels: TopologyLabels) -> NodeFacts:
    # Shaped like an 8-GPU HGX node: two 56-core sockets, 2 TiB of memory, one 400 Gb/s
    # compute NIC per GPU and a front-end Ethernet port.
    compute = tuple(Nic(f"ib{i}", 400_000, True) for i in range(gpus))
    return NodeFacts(
        driver_version="550.90.07",
        cuda_version="12.4",
        nvlink_up=_NVLINKS_PER_GPU * gpus,
        nvlink_total=_NVLINKS_PER_GPU * gpus,
        cpu_model="Simulated Xeon Platinum 8480+",
        cpu_count=224,
        memory_mb=2_097_152,
        nics=(Nic("eth0", 100_000, True), *compute),
        labels=labels,
    )


def _gpu_uuid(hostname: str, index: int) -> str:
    # Stable per node and index, shaped like nvidia-smi's "GPU-<uuid>".
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'gpu{index}.{hostname}')}"
