"""Workloads as real processes: `ProcessBackend`, on top of a `Machine` (NVML or simulated GPUs).

The machine answers for the hardware (inventory, telemetry, hardware faults); this module runs
the workloads. Each workload:

- runs its command, split like a shell would but without one (`shlex`), in its own session and
  process group, with stdin from /dev/null, in the working directory
  ``<state dir>/workloads/<id>/``;
- writes stdout and stderr to ``output.log`` there. The file, not a pipe, so that the process
  outlives the agent's own process; the last lines of the run go with the `workload_exited`
  event (`log_tail`);
- gets of the agent's environment only what a program needs to run on this machine
  (`INHERITED`: the search paths, the locale, the time zone, CUDA's and NCCL's settings),
  never the agent's token or any other secret it was started with; then its assignment's
  `env`, then the launch variables below, which win;
- runs, where the agent is root, as its tenant's own user (``wanka-t<tenant>``), its working
  and checkpoint directories 0700 and that user's: no other tenant's job reads its files, its
  output or its ``/proc`` entries, nor the agent's token. An agent that cannot (not root) runs
  one tenant's work at a time: it refuses a second tenant's job, and its facts say so
  (``isolates_tenants``), for the scheduler to know;
- runs, where the machine has a cgroup v2 hierarchy the agent may write, in a cgroup of its own
  (``wanka-<hostname>/workload-<id>``), which holds every process it starts, a rank in a
  session of its own included (the run waits at a gate, a shell reading a line from the agent,
  until it is in its cgroup, and only then starts its command: nothing it forks, however soon,
  starts outside), and bounds its memory and CPU to the job's share of the node (its GPUs of
  the node's) where the memory and cpu controllers are there;
- is stopped with SIGTERM to its process group, and SIGKILL after `grace_s` seconds. When its
  main process ends, anything left in its group or its cgroup is killed, so no stray rank holds
  a GPU.

Launch variables, as `torchrun` means them (a launch of ``torchrun train.py`` needs no flags,
since torchrun takes its defaults from the ``PET_*`` variables):

==========================  ==========================================================
``CUDA_VISIBLE_DEVICES``     the assigned GPU indices, e.g. ``0,1,2,3`` (``""``: none); a
                             MIG job's MIG device, ``MIG-<uuid>``, which the machine sets
                             up on its GPU (`Machine.mig_instance`)
``CUDA_DEVICE_ORDER``        ``PCI_BUS_ID``, so the indices mean what NVML's mean
``MASTER_ADDR``              the rank-0 node's address (``127.0.0.1`` when not given)
``MASTER_PORT``              its port (when given)
``NNODES``                   nodes in the job
``NODE_RANK``                this node's rank, 0 to NNODES - 1
``WORLD_SIZE``               NNODES x processes per node, one per assigned GPU (at least 1)
``PET_NNODES`` ...           the same for torchrun: ``PET_NNODES``, ``PET_NODE_RANK``,
                             ``PET_NPROC_PER_NODE``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``
``WANKA_WORKLOAD_ID``        the workload's id
``WANKA_CHECKPOINT_DIR``     see `scheduler.agent.contract` (kept if the assignment sets it);
                             a ``WANKA_PARALLEL_PLAN`` is also written there as a file
``HOME``                     its working directory, unless the assignment says otherwise
``PYTHONUNBUFFERED``         ``1`` unless the assignment says otherwise, so Python output
                             reaches the log as it is written
``PORT``                     an inference replica's port, to serve HTTP on
``WANKA_LOAD_FILE``          where a replica may keep its load for the autoscaler
                             (``load.json`` in the working directory; see the contract)
``WANKA_PROGRESS_FILE``      where a training script reports the step it has reached
                             (``progress`` in the working directory, removed at each start)
``CUDA_MPS_ACTIVE_...``      a share job on a node whose MPS daemon runs (`mps_running`):
                             ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, its share of the SMs,
                             and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``0=<N>MB``), its
                             share of the GPU's memory (`ShareLimits`); without MPS, none:
                             its GPU is time-sliced with its neighbours, not isolated; a
                             job's own ``CUDA_MPS_*`` variables are ignored, as they would
                             take it out of the node's MPS daemon and its limits
==========================  ==========================================================

Checkpoints follow `scheduler.agent.contract`: the backend follows each workload's manifest and
reports every save as a `checkpoint_saved` event (a failed one with ``"status": "failed"``);
`checkpoint()` writes a request, signals the processes that catch SIGUSR1 and waits for the save
that answers it.

Workloads live as long as the agent's process: a control-plane outage leaves them running, but
`wanka-agent` stops them (`stop_all`, with the grace period to save) when it is itself stopped,
and a new agent process does not adopt processes an earlier one left behind (one that crashed):
it stops every such process group before it first says hello (`fence`), so the node returns to
service with its GPUs free even where the control plane has meanwhile moved the job elsewhere,
and a workload the control plane still wants there starts afresh from its newest checkpoint.
What it records of each run (``pgid`` in the working directory: the process group, the GPUs,
the cgroup) is what it stops, all of the cgroup included.
Ranks a launcher such as torchrun starts in sessions of their own are ended by the launcher on
SIGTERM, not by the group's SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scheduler.agent.backends import (
    DEFAULT_CHECKPOINT_TIMEOUT_S,
    Assignment,
    BackendEvent,
    EventListener,
    FaultDrill,
    GpuProcess,
    GpuSample,
    Machine,
    NodeInventory,
    Output,
    Serving,
    ShareLimits,
    WorkloadExit,
    lost_gpu,
    output_line,
    remember_run,
    with_processes,
)
from scheduler.agent.contract import (
    COMPLETE,
    ENV_CHECKPOINT_DIR,
    ENV_LOAD_FILE,
    ENV_PARALLEL_PLAN,
    ENV_PROGRESS_FILE,
    ENV_WORKLOAD_ID,
    REQUEST_SIGNAL,
    CheckpointRequest,
    ManifestEntry,
    ManifestTail,
    latest_complete,
    read_load,
    read_progress,
    write_plan,
    write_request,
)
from scheduler.agent.host import mps_running
from scheduler.mig import COMPUTE_SLICES

logger = logging.getLogger(__name__)

LOG_FILE = "output.log"
PGID_FILE = "pgid"
LOAD_FILE = "load.json"
PROGRESS_FILE = "progress"  # the training step the workload reports, rewritten as it goes
LOAD_FRESH_S = 10.0  # an inference replica's load file older than this says nothing
DEFAULT_GRACE_S = 30.0
# Where a run goes in a cgroup, it waits here until it is in: it reads a line from its stdin (a
# pipe from the agent), then starts its command with stdin from /dev/null. No line (the agent
# failed first): it starts nothing.
GATE = ("/bin/sh", "-c", 'read -r _ || exit 111; exec "$@" </dev/null', "wanka-gate")
DEFAULT_LOG_LINES = 50
_LOG_LINE_CHARS = 400  # a line of the tail is cut here: 50 lines stay well inside a frame
_TAIL_BYTES = 64 * 1024
# A reader this far behind jumps to the newest output and says how much it skipped: a job that
# prints gigabytes must neither fill the portal nor keep its agent reading for hours.
OUTPUT_BEHIND_BYTES = 8 * 1024 * 1024


@dataclass
class _Proc:
    assignment: Assignment
    process: asyncio.subprocess.Process
    workdir: Path
    checkpoint_dir: Path
    log_start: int  # where this run's output begins in the log file
    manifest: ManifestTail
    step: int
    waiters: dict[str, asyncio.Future[ManifestEntry]] = field(default_factory=dict)
    request_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    watcher: asyncio.Task[None] | None = None
    share: ShareLimits | None = None  # how a share job is held to its share of its GPU
    mig: str = ""  # the UUID of the MIG device a MIG job runs on
    listening: bool = False  # an inference replica's server has accepted a connection
    bad_load: bool = False  # its load file was refused (said once in the log, until it mends)


class ProcessBackend:
    """Runs each assigned workload as a process group on this machine; see the module docstring."""

    def __init__(
        self,
        machine: Machine,
        state_dir: Path,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        log_lines: int = DEFAULT_LOG_LINES,
        poll_s: float = 0.5,
        base_env: Mapping[str, str] | None = None,
        job_users: bool | None = None,
        mps: Callable[[], bool] = mps_running,
    ) -> None:
        self._machine = machine
        self._mps = mps  # asked at each share job's start: a daemon may come and go
        self._state_dir = Path(state_dir)
        # Each tenant's work as a user of its own: where the agent can (root, and its state
        # directory reachable by other users), unless told.
        can = os.geteuid() == 0 and _reachable(self._state_dir)
        self.job_users = can if job_users is None else job_users
        if job_users is None and not can:
            logger.warning(
                "jobs run as the agent's own user, one tenant's at a time: %s",
                "it is not root" if os.geteuid() else f"{state_dir} is not reachable by others",
            )
        if self.job_users and not _proc_hidden():
            logger.warning(
                "/proc is not mounted with hidepid: jobs see other tenants' command lines"
            )
        self.grace_s = grace_s
        self._log_lines = log_lines
        self._poll_s = poll_s
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._procs: dict[int, _Proc] = {}
        self._logs: dict[int, tuple[Path, int]] = {}  # workload -> its newest run's log, start
        self._listener: EventListener | None = None
        self._cgroups = cgroup_home(machine.inventory().hostname)

    def inventory(self) -> NodeInventory:
        """The machine's inventory, with whether this agent keeps tenants apart."""
        inventory = self._machine.inventory()
        facts = replace(inventory.facts, isolates_tenants=self.job_users)
        return replace(inventory, facts=facts)

    def telemetry(self) -> list[GpuSample]:
        """The machine's telemetry, told which GPUs the running workloads hold, with the
        processes seen on each GPU (`gpu_processes`)."""
        seen = self.gpu_processes()
        busy = {index for index, found in seen.items() if any(p.workload_id for p in found)}
        return with_processes(self._machine.telemetry(busy), seen)

    def gpu_processes(self) -> dict[int, list[GpuProcess]]:
        """Per GPU, the processes on it: each running workload's main process on the GPUs it
        was given; what the hardware sees computing there, by the workload whose process it
        descends from; and the process groups an earlier agent left that still run (fencing
        failed to end them) on the GPUs they were given. A process of no workload running here
        is a stranger (`workload_id` None)."""
        running = {
            p.process.pid: wid for wid, p in self._procs.items() if p.process.returncode is None
        }
        seen: dict[int, list[GpuProcess]] = defaultdict(list)
        for pid, wid in running.items():
            for index in self._procs[wid].assignment.gpu_indices:
                seen[index].append(GpuProcess(pid, wid))
        for index, pids in self._machine.compute_processes().items():
            for pid in pids:
                owner = _owner(pid, running)
                if owner is None or all(p.workload_id != owner for p in seen[index]):
                    seen[index].append(GpuProcess(pid, owner))
        for _wid, record in self._leftovers():
            if _group_alive(record["pgid"]) or _cgroup_pids(record):
                for index in record["gpus"]:
                    seen[index].append(GpuProcess(record["pgid"], None))
        return seen

    async def health_check(self) -> str:
        """The machine's check of its GPUs, then: no stranger on a GPU, and the state directory
        takes a write."""
        passed = await asyncio.to_thread(self._machine.check)
        strangers = [
            f"pid {p.pid} on GPU {index}"
            for index, found in sorted(self.gpu_processes().items())
            for p in found
            if p.workload_id is None
        ]
        if strangers:
            raise RuntimeError(
                "processes no workload of this node started hold GPUs: " + ", ".join(strangers)
            )
        probe = self._state_dir / ".health-check"
        try:
            self._state_dir.mkdir(parents=True, exist_ok=True)
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise RuntimeError(f"cannot write to the state directory: {exc}") from None
        return f"{passed}; no stray processes; the state directory takes writes"

    def subscribe(self, listener: EventListener) -> None:
        """Report hardware faults and saved checkpoints to `listener`."""
        self._listener = listener
        self._machine.subscribe(listener)

    def inject_fault(self, code: str, gpu_index: int | None, args: Mapping[str, Any]) -> FaultDrill:
        """Whatever the machine does with a drill (real GPUs refuse); the processes are left
        alone, since a real fault ends them by itself."""
        return self._machine.inject_fault(code, gpu_index, args)

    def close(self) -> None:
        """Release the machine, and the agent's cgroup once no run is in it. Running workloads
        are left running."""
        self._machine.close()
        if self._cgroups:
            with contextlib.suppress(OSError):  # runs left in it: it stays, for the next agent
                Path(self._cgroups).rmdir()

    async def stop_all(self) -> list[int]:
        """Stop every running workload (with the grace period); return their ids."""
        running = [wid for wid, p in self._procs.items() if p.process.returncode is None]
        await asyncio.gather(*(self.stop(wid) for wid in running))
        return sorted(running)

    async def start(self, assignment: Assignment) -> None:
        """Launch the workload's command; raise ValueError when it cannot be launched."""
        wid = assignment.workload_id
        if wid in self._procs:
            raise ValueError(f"workload {wid} is already running")
        argv = _argv(assignment)
        self._check_gpus(assignment)
        self._check_tenant(assignment)
        workdir = self._state_dir / "workloads" / str(wid)
        workdir.mkdir(parents=True, exist_ok=True)
        await self._stop_leftover(wid)
        checkpoint_dir = Path(assignment.env.get(ENV_CHECKPOINT_DIR) or workdir / "checkpoints")
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if ENV_PARALLEL_PLAN in assignment.env:
            write_plan(checkpoint_dir, assignment.env[ENV_PARALLEL_PLAN])
        env = launch_env(assignment, checkpoint_dir, self._base_env)
        env.setdefault("HOME", str(workdir))  # its own, not the agent's
        if assignment.serve_port:
            env[ENV_LOAD_FILE] = str(workdir / LOAD_FILE)
        env[ENV_PROGRESS_FILE] = str(workdir / PROGRESS_FILE)
        share = self._share_limits(assignment)
        env.update(share.env() if share else {})
        mig = self._mig_device(assignment)
        if mig:
            env["CUDA_VISIBLE_DEVICES"] = mig
        with contextlib.suppress(FileNotFoundError):
            (workdir / PROGRESS_FILE).unlink()  # an earlier run's says nothing of this one
        user = self._box(assignment, workdir, checkpoint_dir)
        cgroup = _make_cgroup(self._cgroups, wid, self._bounds(assignment))
        process, log_start, gate = await _spawn(argv, workdir, env, user, gated=bool(cgroup))
        cgroup = _enter_cgroup(cgroup, wid, process.pid, gate)
        record = {"pgid": process.pid, "gpus": list(assignment.gpu_indices), "cgroup": cgroup}
        (workdir / PGID_FILE).write_text(json.dumps(record))
        remember_run(self._logs, wid, (workdir / LOG_FILE, log_start))
        newest = latest_complete(checkpoint_dir)
        proc = self._procs[wid] = _Proc(
            assignment,
            process,
            workdir,
            checkpoint_dir,
            log_start,
            ManifestTail(checkpoint_dir, from_end=True),
            step=newest.step if newest is not None else 0,
            share=share,
            mig=mig,
        )
        proc.watcher = asyncio.create_task(self._follow(proc), name=f"manifest {wid}")
        logger.info("workload %s: started %s as pid %s", wid, argv[0], process.pid)

    def _box(self, assignment: Assignment, workdir: Path, checkpoint_dir: Path):
        """The (uid, gid) the run starts as: its tenant's own user, owning its working and
        checkpoint directories (0700: no other tenant's job, nor the agent's state, reads
        them); None, as the agent's own user, without `job_users` or a tenant."""
        if not self.job_users or assignment.tenant is None:
            return None
        uid, gid = tenant_user(assignment.tenant)
        for path in (self._state_dir, self._state_dir / "workloads"):
            path.chmod(0o711)  # each user reaches its own directories, lists nothing
        for path in (workdir, checkpoint_dir):
            if path == workdir or path.is_relative_to(workdir):
                os.chown(path, uid, gid)
                path.chmod(0o700)
        return uid, gid

    async def wait(self, workload_id: int) -> WorkloadExit:
        """Wait for the workload's main process to end; kill what is left of its group."""
        proc = self._procs[workload_id]
        # Shielded: a cancelled waiter (an agent shutting down) must not end the workload.
        exit_code = await asyncio.shield(proc.process.wait())
        if proc.watcher is not None:
            proc.watcher.cancel()
        self._read_manifest(proc)  # the saves it made just before it ended
        _signal_group(proc.process.pid, signal.SIGKILL)
        _end_cgroup(recorded_group(proc.workdir))  # ranks in sessions of their own too
        for request_id, waiter in proc.waiters.items():
            if not waiter.done():
                waiter.set_exception(
                    LookupError(f"workload {workload_id} ended before saving ({request_id})")
                )
        with contextlib.suppress(FileNotFoundError):
            (proc.workdir / PGID_FILE).unlink()
        self._procs.pop(workload_id, None)
        tail = log_tail(proc.workdir / LOG_FILE, proc.log_start, self._log_lines)
        return WorkloadExit(exit_code, proc.step, tail)

    async def stop(self, workload_id: int) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period; return once it ended."""
        proc = self._procs.get(workload_id)
        if proc is None or proc.process.returncode is not None:
            return
        _signal_group(proc.process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.process.wait()), self.grace_s)
        except TimeoutError:
            logger.warning(
                "workload %s: still running %g s after SIGTERM; killing it",
                workload_id,
                self.grace_s,
            )
            _signal_group(proc.process.pid, signal.SIGKILL)
            await asyncio.shield(proc.process.wait())

    async def checkpoint(
        self,
        workload_id: int,
        request_id: str | None = None,
        timeout_s: float = DEFAULT_CHECKPOINT_TIMEOUT_S,
        kind: str = "requested",
        reason: str = "",
    ) -> dict[str, Any]:
        """Ask the workload for a save (contract: request file + SIGUSR1) and wait for it."""
        proc = self._procs.get(workload_id)
        if proc is None or proc.process.returncode is not None:
            raise LookupError(f"workload {workload_id} is not running")
        request = CheckpointRequest(request_id or uuid.uuid4().hex, reason, kind)
        async with proc.request_lock:  # one request at a time: the request file holds one
            waiter = asyncio.get_running_loop().create_future()
            proc.waiters[request.request_id] = waiter
            try:
                write_request(proc.checkpoint_dir, request)
                signalled = signal_catchers(proc.process.pid, REQUEST_SIGNAL)
                logger.info("workload %s: checkpoint asked of pids %s", workload_id, signalled)
                entry = await asyncio.wait_for(waiter, timeout_s)
            except TimeoutError:
                raise TimeoutError(
                    f"no checkpoint of workload {workload_id} landed within {timeout_s:g} s"
                ) from None
            finally:
                proc.waiters.pop(request.request_id, None)
        if entry.status != COMPLETE:
            raise RuntimeError(f"the save failed: {entry.error or entry.status}")
        return entry.event_detail()

    def step(self, workload_id: int) -> int:
        """The step of the newest checkpoint the workload has saved (what the agent can know)."""
        return self._procs[workload_id].step

    def progress(self, workload_id: int) -> int | None:
        """The training step the workload reported in this run (the contract's progress file),
        or None when it reports none."""
        return read_progress(self._procs[workload_id].workdir / PROGRESS_FILE)

    def serving(self, workload_id: int) -> Serving | None:
        """A replica's server listens on its port of this machine; its load is what it last
        wrote to its load file, if it keeps one and wrote in the last LOAD_FRESH_S. None until
        the server first accepts a connection: a replica still loading is not ready."""
        proc = self._procs[workload_id]
        port = proc.assignment.serve_port
        if not port:
            return None
        if not proc.listening:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            except OSError:
                return None
            proc.listening = True
        host = self._machine.inventory().hostname
        path = proc.workdir / LOAD_FILE
        try:
            if time.time() - path.stat().st_mtime > LOAD_FRESH_S:
                return Serving(host, port)
            load = read_load(path)
        except OSError:
            return Serving(host, port)  # no load file (yet): the place only
        except ValueError as exc:  # the job's bad word costs its own load report, nothing else
            if not proc.bad_load:
                logger.warning("workload %s: its load is ignored: %s", workload_id, exc)
            proc.bad_load = True
            return Serving(host, port)
        proc.bad_load = False
        return Serving(host, port, *load) if load else Serving(host, port)

    # -- internals ----------------------------------------------------------------------------

    def output(self, workload_id: int, offset: int, limit_bytes: int) -> Output:
        """Lines of the newest run's log from `offset` (bytes into the run) on."""
        if workload_id not in self._logs:
            return Output((), offset)
        path, start = self._logs[workload_id]
        proc = self._procs.get(workload_id)
        ended = proc is None or proc.process.returncode is not None
        return read_output(path, start, offset, limit_bytes, ended)

    def share(self, workload_id: int) -> ShareLimits | None:
        proc = self._procs.get(workload_id)
        return proc.share if proc else None

    def _share_limits(self, assignment: Assignment) -> ShareLimits | None:
        """A share job's limits on its GPU: MPS's where a daemon runs, else time slicing.
        (Legacy MPS serves one user at a time: where jobs run as their tenants' users, two
        tenants' shares of one GPU take turns through the daemon.)"""
        if not assignment.slices:
            return None
        [index] = assignment.gpu_indices
        memory_mb = self._machine.inventory().gpus[index].memory_mb
        return ShareLimits.of(assignment.slices, self._mps(), memory_mb)

    def _mig_device(self, assignment: Assignment) -> str:
        """A MIG job's MIG device (its UUID), set up on its GPU by the machine, beside those
        this agent's running jobs hold; "" for any other job, its GPUs out of MIG mode (the
        engine gives one in MIG mode to other work only while no MIG job waits for it)."""
        if not assignment.mig:
            for index in assignment.gpu_indices:
                self._machine.mig_off(index)
            return ""
        taken = {p.mig for p in self._procs.values() if p.mig and p.process.returncode is None}
        [index] = assignment.gpu_indices
        return self._machine.mig_instance(index, assignment.mig, taken)

    def _check_gpus(self, assignment: Assignment) -> None:
        count = len(self.inventory().gpus)
        for index in assignment.gpu_indices:
            if not 0 <= index < count:
                raise ValueError(f"GPU index {index} does not exist on a node with {count} GPUs")
            if self._machine.lost(index):
                raise lost_gpu(index)

    def _check_tenant(self, assignment: Assignment) -> None:
        """An agent that runs every job as its own user keeps one tenant's work at a time."""
        if self.job_users or assignment.tenant is None:
            return
        others = {p.assignment.tenant for p in self._procs.values()} - {assignment.tenant}
        if others:
            raise ValueError(
                "this node runs another tenant's work and cannot keep tenants apart "
                "(its agent is not root)"
            )

    def _bounds(self, assignment: Assignment) -> Bounds:
        """The job's share of the node's memory and CPUs: its GPUs of the node's (one GPU's
        share for a job of none), a share or MIG job its part of its GPU's (`gpu_part`)."""
        inventory = self.inventory()
        gpus = max(1, len(assignment.gpu_indices))
        if assignment.slices or assignment.mig:
            [index] = assignment.gpu_indices
            gpus = gpu_part(assignment, inventory.gpus[index].memory_mb)
        share = gpus / max(1, len(inventory.gpus))
        return Bounds(inventory.facts.memory_mb * share, inventory.facts.cpu_count * share)

    async def _follow(self, proc: _Proc) -> None:
        while proc.process.returncode is None:
            await asyncio.sleep(self._poll_s)
            self._read_manifest(proc)

    def _read_manifest(self, proc: _Proc) -> None:
        wid = proc.assignment.workload_id
        try:
            entries = proc.manifest.poll()
        except OSError as exc:
            logger.warning("workload %s: cannot read its manifest: %s", wid, exc)
            return
        for entry in entries:
            if entry.status == COMPLETE:
                proc.step = max(proc.step, entry.step)
            if self._listener is not None:  # a failed save too: it must never count as newest
                self._listener(BackendEvent("checkpoint_saved", wid, entry.event_detail()))
            # After the event, so the agent reports the save before it acks the request.
            waiter = proc.waiters.get(entry.request_id or "")
            if waiter is not None and not waiter.done():
                waiter.set_result(entry)

    async def delete_saves(self, workload_id: int, locations: list[str]) -> int:
        """Remove these saves from the workload's checkpoint directory (the newest run's, which
        outlives it on this node); how many were there. A location outside that directory,
        which a job could write into its manifest, is refused and nothing is removed."""
        proc = self._procs.get(workload_id)
        home = (proc.checkpoint_dir if proc else self._state_dir / "workloads" / str(workload_id)
                / "checkpoints").resolve()  # fmt: skip
        paths = [Path(location).resolve() for location in locations]
        outside = [str(p) for p in paths if not p.is_relative_to(home) or p == home]
        if outside:
            raise ValueError(f"not in workload {workload_id}'s checkpoint directory: {outside[0]}")
        found = [p for p in paths if p.exists()]
        for path in found:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        return len(found)

    async def fence(self) -> list[int]:
        """Stop whatever an earlier agent process left running on this machine (killed, it
        left its workloads' process groups behind, their pgid files in its state directory);
        return those workloads. The agent does this before its first hello, so that the node
        returns to service with no GPU still in use by work the control plane has moved on."""
        wids = [wid for wid, _ in self._leftovers()]
        stopped = await asyncio.gather(*(self._stop_leftover(wid) for wid in wids))
        return sorted(wid for wid, ended in zip(wids, stopped, strict=True) if ended)

    def _leftovers(self) -> list[tuple[int, dict[str, Any]]]:
        """The workloads not running here whose process group an earlier agent process
        recorded (it ended without stopping them), with that record: {"pgid", "gpus"}."""
        found = []
        for path in (self._state_dir / "workloads").glob(f"*/{PGID_FILE}"):
            wid = int(path.parent.name) if path.parent.name.isdigit() else None
            if wid is None or wid in self._procs:
                continue
            record = recorded_group(path.parent)
            if record is not None and (
                _is_workload_group(record["pgid"], wid) or _cgroup_pids(record)
            ):
                found.append((wid, record))
        return found

    async def _stop_leftover(self, wid: int) -> bool:
        """Stop the process group an earlier agent process left for this workload, if any;
        whether there was one."""
        workdir = self._state_dir / "workloads" / str(wid)
        record = recorded_group(workdir)
        if record is None:
            return False
        pgid, stopped = record["pgid"], bool(_cgroup_pids(record))
        if _is_workload_group(pgid, wid):
            logger.warning("workload %s: stopping the processes an earlier agent left", wid)
            _signal_group(pgid, signal.SIGTERM)
            deadline = asyncio.get_running_loop().time() + self.grace_s
            while _group_alive(pgid) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
            _signal_group(pgid, signal.SIGKILL)
            stopped = True
        _end_cgroup(record)  # what escaped the group (ranks in sessions of their own)
        with contextlib.suppress(FileNotFoundError):
            (workdir / PGID_FILE).unlink()
        return stopped


# What a workload keeps of the agent's environment: names, or prefixes ending in "_". Where
# the MPS daemon's pipes are: a share job finds the daemon the agent saw (`mps_running`).
INHERITED = (
    "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "LANG", "LANGUAGE", "LC_", "TZ", "TMPDIR",
    "CUDA_HOME", "CUDA_PATH", "NCCL_", "NVIDIA_", "CUDA_MPS_PIPE_DIRECTORY",
)  # fmt: skip


def gpu_part(assignment: Assignment, gpu_memory_mb: int) -> float:
    """What a share or MIG job takes of its GPU, as the engine charges it: a share its eighths,
    a MIG instance the larger of its compute (slices of seven) and its memory ("3g.40gb":
    three sevenths, or 40 GB of the GPU's)."""
    if assignment.slices:
        return assignment.slices / 8  # eighths, as `ShareLimits`
    compute, memory_gb = re.fullmatch(r"(\d)g\.(\d+)gb", assignment.mig).groups()
    return min(1.0, max(int(compute) / COMPUTE_SLICES, int(memory_gb) * 1024 / gpu_memory_mb))


MPS_PREFIX = "CUDA_MPS_"  # the node's to set (`ShareLimits`), never a job's


def inherited(name: str) -> bool:
    return any(name.startswith(i) if i.endswith("_") else name == i for i in INHERITED)


def launch_env(
    assignment: Assignment, checkpoint_dir: Path, base: Mapping[str, str]
) -> dict[str, str]:
    """The environment a workload starts with; see the module docstring."""
    env = {k: v for k, v in base.items() if inherited(k)}
    # Python output straight to the log, in the order it was written, unless told otherwise.
    env["PYTHONUNBUFFERED"] = "1"
    own = {k: v for k, v in assignment.env.items() if not k.startswith(MPS_PREFIX)}
    if len(own) < len(assignment.env):
        # Its own pipe directory or limits would take a share job out of the node's MPS
        # daemon, and with it out of its limits: the node's own hold.
        logger.warning("workload %s: its CUDA_MPS_* variables ignored", assignment.workload_id)
    env.update(own)
    nproc = max(1, len(assignment.gpu_indices))
    master_addr = assignment.master_addr or "127.0.0.1"
    launch = {
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in assignment.gpu_indices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "MASTER_ADDR": master_addr,
        "NNODES": str(assignment.nnodes),
        "NODE_RANK": str(assignment.node_rank),
        "WORLD_SIZE": str(assignment.nnodes * nproc),
        "PET_NNODES": str(assignment.nnodes),
        "PET_NODE_RANK": str(assignment.node_rank),
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_MASTER_ADDR": master_addr,
        ENV_WORKLOAD_ID: str(assignment.workload_id),
        ENV_CHECKPOINT_DIR: str(checkpoint_dir),
    }
    if assignment.master_port:
        launch["MASTER_PORT"] = launch["PET_MASTER_PORT"] = str(assignment.master_port)
    if assignment.serve_port:
        launch["PORT"] = str(assignment.serve_port)
    env.update(launch)
    return env


def log_tail(path: Path, start: int, lines: int) -> tuple[str, ...]:
    """The last `lines` lines written to `path` after offset `start`, each cut to a length
    that keeps the event small."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            begin = max(start, size - _TAIL_BYTES)
            file.seek(begin)
            data = file.read()
    except OSError:
        return ()
    text = data.decode("utf-8", errors="replace")
    found = text.splitlines()
    if begin > start and found:
        found = found[1:]  # the read began in the middle of a line
    return tuple(line[:_LOG_LINE_CHARS] for line in found[-lines:]) if lines > 0 else ()


def read_output(path: Path, start: int, offset: int, limit: int, ended: bool) -> Output:
    """Whole lines of the log `path` from `start + offset` on, at most `limit` bytes of them;
    a line longer than `limit` comes in pieces, and once the writer has `ended` a last line
    without its newline counts too."""
    lines: list[str] = []
    try:
        with open(path, "rb") as file:
            written = file.seek(0, os.SEEK_END) - start
            if written - offset > OUTPUT_BEHIND_BYTES:
                skip_to = written - limit
                lines.append(f"[wanka-agent: {skip_to - offset} bytes of output skipped]")
                offset = skip_to
            file.seek(start + offset)
            data = file.read(limit)
    except OSError:
        return Output((), offset)
    cut = data.rfind(b"\n") + 1
    if (ended and len(data) < limit) or (cut == 0 and len(data) >= limit):
        cut = len(data)
    text = data[:cut].decode("utf-8", errors="replace")
    return Output((*lines, *map(output_line, text.splitlines())), offset + cut)


def signal_catchers(pgid: int, signum: int) -> list[int]:
    """Send `signum` to the processes of group `pgid` that catch it, and return their pids.

    Linux's /proc says which signals a process catches (`SigCgt`); a process that does not
    catch this one is spared rather than ended by the default action. Where /proc is missing,
    the whole group gets the signal.
    """
    proc = Path("/proc")
    if not (proc / "self" / "status").exists():
        _signal_group(pgid, signum)
        return [pgid]
    sent = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and _in_group(entry, pgid) and _catches(entry, signum):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signum)
                sent.append(int(entry.name))
    return sorted(sent)


def _in_group(proc_dir: Path, pgid: int) -> bool:
    try:
        stat = (proc_dir / "stat").read_text()
    except OSError:
        return False
    # Fields after the command name, which is in parentheses and may hold spaces:
    # state, ppid, pgrp, ...
    fields = stat[stat.rfind(")") + 2 :].split()
    return len(fields) > 2 and fields[2] == str(pgid)


def _catches(proc_dir: Path, signum: int) -> bool:
    try:
        status = (proc_dir / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def _argv(assignment: Assignment) -> list[str]:
    wid = assignment.workload_id
    try:
        argv = shlex.split(assignment.command)
    except ValueError as exc:
        raise ValueError(f"workload {wid}: cannot split its command: {exc}") from None
    if not argv:
        raise ValueError(f"workload {wid} has no command to run")
    return argv


def _reachable(state_dir: Path) -> bool:
    """Whether other users may pass through every directory above `state_dir` (to reach their
    own working directories under it)."""
    parents = [p for p in Path(state_dir).resolve().parents if p.exists()]
    return all(parent.stat().st_mode & 0o001 for parent in parents)


def _proc_hidden() -> bool:
    """Whether /proc hides other users' processes (mounted with hidepid 1 or 2)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    for fields in (line.split() for line in mounts):
        if len(fields) > 3 and fields[1] == "/proc" and fields[2] == "proc":
            options = fields[3].split(",")
            return any(o in options for o in HIDEPID)
    return False


HIDEPID = ("hidepid=1", "hidepid=2", "hidepid=noaccess", "hidepid=invisible")


def tenant_user(tenant: int) -> tuple[int, int]:
    """The uid and gid of the tenant's user on this machine, `wanka-t<tenant>`: a system user
    with no home and no shell, created the first time (the agent runs as root)."""
    name = f"wanka-t{tenant}"
    if name not in {entry.pw_name for entry in pwd.getpwall()}:
        create = ["useradd", "--system", "--no-create-home", "--user-group",
                  "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]  # fmt: skip
        done = subprocess.run(create, capture_output=True, text=True)
        if done.returncode not in (0, 9):  # 9: another start created it meanwhile
            raise ValueError(f"cannot create the user {name}: {done.stderr.strip()}")
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


async def _spawn(
    argv: list[str],
    workdir: Path,
    env: Mapping[str, str],
    user: tuple[int, int] | None,
    gated: bool = False,
) -> tuple[asyncio.subprocess.Process, int, int | None]:
    """Start the run, in a session of its own, its output appended to its log; with the
    log's size before it, and, `gated`, the pipe's end that lets it through its `GATE`."""
    log_path = workdir / LOG_FILE
    run_as = {} if user is None else {"user": user[0], "group": user[1], "extra_groups": []}
    gate = stdin = None
    if gated:
        program = str(workdir / argv[0]) if os.sep in argv[0] else argv[0]
        if shutil.which(program, path=env.get("PATH")) is None:  # the gate would say it late
            raise ValueError(f"cannot run {argv[0]!r}: no such program")
        stdin, gate = os.pipe()
    with open(log_path, "ab") as log:
        start = log.tell()
        try:
            process = await asyncio.create_subprocess_exec(
                *(GATE if gated else ()),
                *argv,
                cwd=workdir,
                env=dict(env),
                stdin=asyncio.subprocess.DEVNULL if stdin is None else stdin,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group, to signal as one
                **run_as,
            )
        except OSError as exc:
            if gate is not None:
                os.close(gate)
            raise ValueError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        finally:
            if stdin is not None:
                os.close(stdin)
    return process, start, gate


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (a zombie, dead but not yet reaped by its
    parent, does not count)."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    return any(
        entry.name.isdigit() and _in_group(entry, pgid) and _state(entry) not in ("Z", "X", "")
        for entry in proc.iterdir()
    )


def _state(proc_dir: Path) -> str:
    try:
        stat = (proc_dir / "stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2 :].split()[0]


def cgroup_home(name: str) -> str | None:
    """A cgroup (v2) of this agent's own, `wanka-<name>` at the top of the hierarchy, for its
    workloads' cgroups (created); None where the machine has no cgroup v2 hierarchy the agent
    may write (not root, or cgroup v1 only): then process groups alone say what a run is."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for fields in (line.split() for line in mounts):
        if len(fields) > 2 and fields[2] == "cgroup2":
            home = Path(fields[1]) / f"wanka-{name}"
            try:
                home.mkdir(exist_ok=True)
            except OSError:
                return None
            _enable_controllers(home)
            return str(home)
    return None


@dataclass(frozen=True)
class Bounds:
    """What a run's cgroup lets it use: memory (MiB) and CPUs."""

    memory_mb: float
    cpus: float

    def files(self) -> dict[str, str]:
        """The cgroup v2 files that say so (none for an unknown amount)."""
        found = {}
        if self.memory_mb > 0:
            found["memory.max"] = str(int(self.memory_mb * 2**20))
        if self.cpus > 0:  # microseconds per period of 100 ms, at least a hundredth of a CPU
            found["cpu.max"] = f"{max(1000, int(self.cpus * CPU_PERIOD_US))} {CPU_PERIOD_US}"
        return found


CPU_PERIOD_US = 100_000


def _enable_controllers(home: Path) -> None:
    """Let the runs' cgroups under `home` bound memory and CPU; where the hierarchy has not
    those controllers (they are on cgroup v1, say), runs are not bounded, and the log says so."""
    try:
        offered = set((home / "cgroup.controllers").read_text().split())
        for controller in CONTROLLERS & offered:
            (home / "cgroup.subtree_control").write_text(f"+{controller}")
    except OSError as exc:
        offered = set()
        logger.warning("cannot enable cgroup controllers in %s: %s", home, exc)
    if missing := sorted(CONTROLLERS - offered):
        logger.warning(
            "runs are not bounded in %s: no such cgroup v2 controller", ", ".join(missing)
        )


CONTROLLERS = {"memory", "cpu"}


def _make_cgroup(home: str | None, wid: int, bounds: Bounds) -> Path | None:
    """A cgroup of the run's own under `home`, bounded where the controllers are there; None
    without one."""
    if home is None:
        return None
    cgroup = Path(home) / f"workload-{wid}"
    try:
        cgroup.mkdir(exist_ok=True)
    except OSError as exc:
        logger.warning("workload %s: runs without a cgroup: %s", wid, exc)
        return None
    for name, value in bounds.files().items():
        with contextlib.suppress(OSError):  # no such controller: said once, at the start
            (cgroup / name).write_text(value)
    return cgroup


def _enter_cgroup(cgroup: Path | None, wid: int, pid: int, gate: int | None) -> str | None:
    """Put the run's main process in its cgroup (and so all it starts, whatever session), then
    let it through its gate; the cgroup's path, or None without one."""
    if cgroup is None:
        return None
    try:
        (cgroup / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        logger.warning("workload %s: runs without a cgroup: %s", wid, exc)
        cgroup = None
    if gate is not None:
        with contextlib.suppress(OSError):  # it ended already
            os.write(gate, b"\n")
        os.close(gate)
    return str(cgroup) if cgroup else None


def _cgroup_pids(record: Mapping[str, Any]) -> list[int]:
    """The processes still in the run's cgroup (none without one)."""
    if not record.get("cgroup"):
        return []
    try:
        return [int(pid) for pid in (Path(record["cgroup"]) / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _end_cgroup(record: Mapping[str, Any] | None) -> None:
    """Kill whatever is left in the run's cgroup (cgroup.kill, else each process), and remove
    it once empty."""
    if not record or not record.get("cgroup"):
        return
    cgroup = Path(record["cgroup"])
    try:
        (cgroup / "cgroup.kill").write_text("1")
    except OSError:
        for pid in _cgroup_pids(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for _ in range(50):  # the kernel empties it within a few milliseconds
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def recorded_group(workdir: Path) -> dict[str, Any] | None:
    """What the agent recorded of the run in a workload's working directory while it runs:
    {"pgid": its process group, "gpus": the GPUs it was given, "cgroup": its cgroup or None};
    None when there is none."""
    try:
        record = json.loads((workdir / PGID_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pgid"), int) else None


def _owner(pid: int, leaders: Mapping[int, int]) -> int | None:
    """The workload (of `leaders`: main pid -> workload) whose process `pid` descends from, or
    belongs to the group of: a launcher's ranks may run in sessions of their own. None for a
    process of none of them."""
    for _ in range(64):  # ancestors, up to init
        if pid in leaders:
            return leaders[pid]
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        ppid, pgrp = (int(f) for f in stat[stat.rfind(")") + 2 :].split()[1:3])
        if pgrp in leaders:
            return leaders[pgrp]
        if ppid <= 1:
            return None
        pid = ppid
    return None


def _is_workload_group(pgid: int, wid: int) -> bool:
    # The pid may have been reused since: only a process that carries this workload's id in
    # its environment is taken for the leftover.
    try:
        environ = Path(f"/proc/{pgid}/environ").read_bytes()
    except OSError:
        return False
    return f"{ENV_WORKLOAD_ID}={wid}".encode() in environ.split(b"\0")
