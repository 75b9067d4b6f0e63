"""The checkpoint contract between the node agent and a training script, and a helper for scripts.

This module needs only the Python standard library, so a training script can import it (or copy
it) without installing anything else.

The contract
------------

The agent starts a workload with these variables in its environment:

- ``WANKA_CHECKPOINT_DIR``: a directory for checkpoints, the request file and the manifest.
  The control plane may name one (shared storage, say); otherwise the agent makes one per
  workload under its state directory, which outlives a restart of the workload on that node.
- ``WANKA_CHECKPOINT_INTERVAL_S`` (optional): seconds between periodic saves the script times
  itself. Under Wanka the control plane asks for routine saves at the job's interval instead.
- ``WANKA_CHECKPOINT_POLICY``: "periodic", "async", "triggered" or "none": the job's policy.
- ``WANKA_RESUME_FROM`` (optional): set by the control plane to the location of the newest
  complete checkpoint it knows of; the script resumes from it.
- ``WANKA_WORKLOAD_ID``: the workload's id.
- ``WANKA_PARALLEL_PLAN`` (a job that names its model): the parallel plan for the GPUs this
  attempt holds, as JSON (`scheduler.parallelism.ParallelPlan.as_json`): TP, PP, DP, the
  micro-batch size and the sequences of the global batch each replica takes. The agent also
  writes it to ``parallel_plan.json`` in the checkpoint directory, and every manifest line
  records the plan its save was made with, so a job resumed on another plan knows to reshard.

**Asking for a checkpoint.** The agent writes ``request.json`` in the checkpoint directory,
``{"request_id": "...", "reason": "...", "kind": "requested"}`` (atomically: a temporary file
renamed into place; ``kind`` is "triggered" when a fault forces the save),
then sends ``SIGUSR1`` to the workload's processes that catch it. (SIGUSR1's default action ends
a process, so the agent spares those that do not catch it, such as ``torchrun``'s launcher.) The
helper goes by the request file, read at every step: the signal reaches only the workload's own
process group, and a launcher such as torchrun starts its ranks in sessions of their own. The
script saves at its next step boundary and then removes the
request file.

**Reporting a save.** The script writes the checkpoint under a temporary name, renames it into
place once complete, and only then appends one line to ``manifest.jsonl`` in the checkpoint
directory::

    {"step": 1200, "path": "/ckpt/step-000001200.pt", "kind": "requested",
     "size_bytes": 18874368, "duration_s": 0.41, "request_id": "c-17", "status": "complete",
     "plan": {"tp": 1, "pp": 1, "dp": 4, ...}}

``kind`` is "periodic", "async", "triggered" (a save forced by a fault) or "requested";
``request_id`` names the request a save answers, else null. A save that fails appends a line
with ``"status": "failed"`` and an ``"error"`` instead, so the agent can answer the request at
once. A crash half-way through a save leaves only a temporary file, which is never in the
manifest. The agent follows the manifest and reports each complete line as a
``checkpoint_saved`` event; a ``checkpoint`` command is acknowledged once the line answering it
appears (or refused after a timeout).

**Reporting progress.** The agent names a file in ``WANKA_PROGRESS_FILE``, on the node's own
disk, new for each run. The script tells the agent which training step it has reached by
rewriting that file: the step as a decimal number and a newline, written under a temporary name
and renamed into place. The helper's ``ckpt.report(step)`` does it at most once every
``PROGRESS_EVERY_S`` (a clock read per step, a few bytes a second), and ``ckpt.due(step)``
reports too. Call ``report`` at every step on every node: in a loop where only rank 0 asks
``due``, the other ranks call ``report`` themselves. The agent puts the step in every heartbeat,
and the control plane judges hangs and stragglers by it. A job that never reports is judged only
by its processes being alive: it is never taken for hung because it saves rarely or never.

**Resuming.** From ``WANKA_RESUME_FROM`` when set; otherwise from the newest complete line of
the manifest whose file still exists (the highest step; a later line wins a tie). Nothing to
resume from means starting at step 0.

**Asynchronous saves.** A request of kind "async" (or, with no request, the async policy:
``ckpt.next_kind()``) asks for ``ckpt.save_async(step, snapshot_fn, persist_fn)``: training
waits only while ``snapshot_fn`` copies the state to host memory; ``persist_fn(copy, path)``
writes it on a background thread, and the manifest line, with ``"stall_s"``, the copy's part
of ``duration_s``, is appended once the file is in place. Call ``ckpt.wait_persisted()``
before exiting.

**Several ranks.** Every rank of a job gets the signal, but a save is a collective: let rank 0
decide (``ckpt.due(step)``) and broadcast the decision, and let one rank append the manifest
line.

The helper
----------

::

    from scheduler.agent.contract import Checkpointing

    ckpt = Checkpointing.from_env()
    start = ckpt.resume_step(lambda path: load(path))  # load returns the step it saved
    for step in range(start, total_steps):
        train_one_step()
        ckpt.report(step + 1)  # cheap: at most a small write a second
        if ckpt.due(step + 1):
            ckpt.save(step + 1, lambda path: save(path))  # save writes the file at path

Without ``WANKA_CHECKPOINT_DIR`` the helper is disabled: ``due`` is always false and
``resume_step`` returns 0 without loading anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ENV_CHECKPOINT_DIR = "WANKA_CHECKPOINT_DIR"
ENV_CHECKPOINT_INTERVAL_S = "WANKA_CHECKPOINT_INTERVAL_S"
ENV_RESUME_FROM = "WANKA_RESUME_FROM"
ENV_WORKLOAD_ID = "WANKA_WORKLOAD_ID"
ENV_CHECKPOINT_POLICY = "WANKA_CHECKPOINT_POLICY"
ENV_PARALLEL_PLAN = "WANKA_PARALLEL_PLAN"
# An inference replica may keep its load here, JSON {"in_flight": n, "requests_per_s": r},
# rewritten every second or so; the agent reads it for each heartbeat (`examples/serve_tiny.py`).
ENV_LOAD_FILE = "WANKA_LOAD_FILE"
# Where a training script reports the step it has reached (see "Reporting progress").
ENV_PROGRESS_FILE = "WANKA_PROGRESS_FILE"

REQUEST_FILE = "request.json"
MANIFEST_FILE = "manifest.jsonl"
PLAN_FILE = "parallel_plan.json"
PROGRESS_EVERY_S = 1.0  # the script rewrites its progress file at most this often
REQUEST_SIGNAL = signal.SIGUSR1

KINDS = ("periodic", "async", "triggered", "requested")
COMPLETE = "complete"
FAILED = "failed"


@dataclass(frozen=True)
class ManifestEntry:
    """One line of the manifest: one save, complete or failed."""

    step: int
    path: str
    kind: str
    size_bytes: int
    duration_s: float
    request_id: str | None
    status: str
    error: str = ""
    stall_s: float | None = None  # an async save: how long training waited for its copy
    plan: dict | None = None  # the parallel plan the save was made with

    def to_json(self) -> str:
        """The manifest line, without its newline."""
        fields = asdict(self)
        for name, empty in (("error", ""), ("stall_s", None), ("plan", None)):
            if fields[name] == empty:
                del fields[name]
        return json.dumps(fields, separators=(", ", ": "))

    @classmethod
    def from_json(cls, line: str) -> ManifestEntry | None:
        """Read one line; None for a line that is not a well-formed entry."""
        try:
            data = json.loads(line)
            entry = cls(
                step=int(data["step"]),
                path=str(data["path"]),
                kind=str(data["kind"]),
                size_bytes=int(data["size_bytes"]),
                duration_s=float(data["duration_s"]),
                request_id=None if data["request_id"] is None else str(data["request_id"]),
                status=str(data["status"]),
                error=str(data.get("error", "")),
                stall_s=None if data.get("stall_s") is None else float(data["stall_s"]),
                plan=data["plan"] if isinstance(data.get("plan"), dict) else None,
            )
        except (ValueError, KeyError, TypeError):
            return None
        return entry if entry.step >= 0 and entry.kind in KINDS else None

    def event_detail(self) -> dict[str, Any]:
        """The `detail` of the `checkpoint_saved` event that reports this save (a failed one
        too, so the control plane never takes it for the newest)."""
        detail = {
            "step": self.step,
            "location": self.path,
            "size_bytes": self.size_bytes,
            "duration_s": round(max(0.0, self.duration_s), 3),
            "kind": self.kind,
            "request_id": self.request_id,
            "status": self.status,
        }
        if self.stall_s is not None:
            detail["stall_s"] = round(max(0.0, self.stall_s), 6)
        return detail


@dataclass(frozen=True)
class CheckpointRequest:
    """What the agent asks for: a save of `kind` answering `request_id`."""

    request_id: str
    reason: str = ""
    kind: str = "requested"


# -- the agent's side ---------------------------------------------------------------------------


def write_request(directory: Path, request: CheckpointRequest) -> None:
    """Leave a request for the script, atomically (the script never reads half a file)."""
    data = {"request_id": request.request_id, "reason": request.reason, "kind": request.kind}
    _write_atomically(Path(directory) / REQUEST_FILE, json.dumps(data).encode())


def _plan(env: Mapping[str, str], directory: str | None) -> dict | None:
    """The attempt's parallel plan: from the environment, else from the file beside the
    checkpoints (a job started by hand in the same directory)."""
    if env.get(ENV_PARALLEL_PLAN):
        return json.loads(env[ENV_PARALLEL_PLAN])
    try:
        return json.loads((Path(directory) / PLAN_FILE).read_text()) if directory else None
    except (OSError, ValueError):
        return None


def write_plan(directory: Path, plan_json: str) -> None:
    """Leave the attempt's parallel plan beside the checkpoints, atomically."""
    _write_atomically(Path(directory) / PLAN_FILE, plan_json.encode())


def read_request(directory: Path) -> CheckpointRequest | None:
    """The pending request, or None when there is none (or it cannot be read)."""
    try:
        data = json.loads((Path(directory) / REQUEST_FILE).read_text())
        kind = str(data.get("kind", "requested"))
        return CheckpointRequest(
            str(data["request_id"]),
            str(data.get("reason", "")),
            kind if kind in KINDS else "requested",
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


# What the agent reads of a file a job writes: a job's bytes must never cost its node anything.
_SMALL_READ = 4096
_STEP_MAX = 2**63 - 1  # what a heartbeat's step field holds
_IN_FLIGHT_MAX = 2**31 - 1
_RATE_MAX = 1e9  # requests a second


def _read_small(path: Path) -> bytes:
    with open(path, "rb") as file:
        return file.read(_SMALL_READ)


def read_progress(path: Path) -> int | None:
    """The training step the script last reported in its progress file; None before it first
    does, or when the file holds no step a heartbeat can carry (the job's word, not trusted)."""
    try:
        step = int(_read_small(path))
    except (OSError, ValueError):
        return None
    return step if 0 <= step <= _STEP_MAX else None


def read_load(path: Path) -> tuple[int, float] | None:
    """An inference replica's load file: (requests in flight, requests a second); None when
    there is none. ValueError, saying why, for a file that holds no such load (not JSON, a
    negative, fractional, not finite or absurd value): the job wrote it, so it is checked."""
    try:
        load = json.loads(_read_small(path))
    except OSError:
        return None
    except ValueError:
        raise ValueError("the load file is not JSON") from None
    if not isinstance(load, dict):
        raise ValueError("the load file is not a JSON object")
    in_flight, rate = load.get("in_flight"), load.get("requests_per_s")
    if isinstance(in_flight, bool) or not isinstance(in_flight, int):
        raise ValueError(f"in_flight {in_flight!r} is not a whole number")
    if not 0 <= in_flight <= _IN_FLIGHT_MAX:
        raise ValueError(f"in_flight {in_flight} is out of range")
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        raise ValueError(f"requests_per_s {rate!r} is not a number")
    if not 0 <= rate <= _RATE_MAX:  # NaN fails this too
        raise ValueError(f"requests_per_s {rate} is out of range")
    return in_flight, float(rate)


def read_manifest(directory: Path) -> list[ManifestEntry]:
    """Every well-formed entry of the manifest, in file order; a torn last line is skipped."""
    try:
        text = (Path(directory) / MANIFEST_FILE).read_text(errors="replace")
    except OSError:
        return []
    lines = text.split("\n")[:-1]  # only lines that end in a newline are complete
    return [entry for line in lines if (entry := ManifestEntry.from_json(line)) is not None]


def latest_complete(directory: Path) -> ManifestEntry | None:
    """The newest complete save whose file still exists: highest step, later line on a tie."""
    best = None
    for entry in read_manifest(directory):
        newer = best is None or entry.step >= best.step
        if newer and entry.status == COMPLETE and os.path.exists(entry.path):
            best = entry
    return best


class ManifestTail:
    """Reads the lines appended to a manifest since the last `poll`, as `tail -f` would."""

    def __init__(self, directory: Path, from_end: bool = True) -> None:
        self.path = Path(directory) / MANIFEST_FILE
        self._offset = self._size() if from_end else 0

    def poll(self) -> list[ManifestEntry]:
        """The well-formed entries completed since the last call."""
        size = self._size()
        if size < self._offset:
            self._offset = 0  # the manifest was replaced: read it afresh
        if size == self._offset:
            return []
        with open(self.path, "rb") as file:
            file.seek(self._offset)
            chunk = file.read(size - self._offset)
        complete = chunk[: chunk.rfind(b"\n") + 1]  # leave a line still being written
        self._offset += len(complete)
        lines = complete.decode("utf-8", errors="replace").splitlines()
        return [entry for line in lines if (entry := ManifestEntry.from_json(line)) is not None]

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0


# -- the script's side --------------------------------------------------------------------------


class Checkpointing:
    """A training script's side of the contract: when to save, how to save, where to resume.

    Build it with `from_env()`. `due(step)` says whether to save now (a request arrived, or the
    periodic interval has passed); `save(step, save_fn)` saves atomically and records the save
    in the manifest; `resume_step(load_fn)` loads the checkpoint to resume from, if any.
    """

    def __init__(
        self,
        directory: Path | None,
        interval_s: float | None = None,
        resume_from: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        policy: str = "periodic",
        plan: dict | None = None,
        progress_file: Path | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.progress_file = Path(progress_file) if progress_file is not None else None
        self.interval_s = interval_s
        self.resume_from = resume_from or None
        self.policy = policy
        self.plan = plan
        self._persisting: threading.Thread | None = None  # the async save being written
        self._clock = clock
        self._last_save = clock()
        self._last_step: int | None = None
        self._reported_at: float | None = None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._remove_leftovers()

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, install_signal: bool = True
    ) -> Checkpointing:
        """Read the contract's variables; catch SIGUSR1 (from the main thread only)."""
        env = os.environ if environ is None else environ
        directory = env.get(ENV_CHECKPOINT_DIR) or None
        interval = env.get(ENV_CHECKPOINT_INTERVAL_S)
        helper = cls(
            Path(directory) if directory else None,
            interval_s=float(interval) if interval else None,
            resume_from=env.get(ENV_RESUME_FROM),
            policy=env.get(ENV_CHECKPOINT_POLICY) or "periodic",
            plan=_plan(env, directory),
            progress_file=env.get(ENV_PROGRESS_FILE) or None,
        )
        if install_signal and helper.enabled:
            helper.install_signal_handler()
        return helper

    @property
    def enabled(self) -> bool:
        """Whether the agent gave this run a checkpoint directory."""
        return self.directory is not None

    def install_signal_handler(self) -> bool:
        """Catch SIGUSR1, so that the agent's signal does not end the script; False where a
        handler cannot be installed (not the main thread). `due` reads the request file."""
        if threading.current_thread() is not threading.main_thread():
            return False
        # The request file says what is asked; the signal's default action would end us.
        signal.signal(REQUEST_SIGNAL, lambda signum, frame: None)
        return True

    def resume_step(self, load_fn: Callable[[str], int]) -> int:
        """Load the checkpoint to resume from and return the step `load_fn` says it holds;
        0, without calling `load_fn`, when there is none."""
        location = self.resume_location()
        return 0 if location is None else int(load_fn(location))

    def resume_location(self) -> str | None:
        """`WANKA_RESUME_FROM`, else the newest complete save in the manifest, else None."""
        if self.resume_from is not None:
            return self.resume_from
        if self.directory is None:
            return None
        entry = latest_complete(self.directory)
        return None if entry is None else entry.path

    def resume_plan(self) -> dict | None:
        """The parallel plan the checkpoint to resume from was saved with, if it says."""
        location = self.resume_location()
        if location is None or self.directory is None:
            return None
        saved = [e for e in read_manifest(self.directory) if e.path == location]
        return saved[-1].plan if saved else None

    @property
    def requested(self) -> bool:
        """Whether the agent has asked for a save that has not been made yet."""
        if self.directory is None:
            return False
        # The file, not the signal: a launcher such as torchrun starts its ranks in sessions of
        # their own, out of reach of the signal, and a signal may come after its request was
        # answered from the file.
        return (self.directory / REQUEST_FILE).exists()

    def report(self, step: int) -> None:
        """Tell the agent that training has reached `step`: the progress file is rewritten at
        most once every PROGRESS_EVERY_S, so a call at every step costs a clock read."""
        now = self._clock()
        if self.progress_file is None or (
            self._reported_at is not None and now - self._reported_at < PROGRESS_EVERY_S
        ):
            return
        self._reported_at = now
        path = self.progress_file
        temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        temporary.write_text(f"{int(step)}\n")
        os.replace(temporary, path)  # no fsync: a report lost in a crash is only a late one

    def due(self, step: int) -> bool:
        """Whether to save at `step`: asked to, or the interval has passed since the last save
        (never twice at the same step). It reports `step` as progress too."""
        self.report(step)
        if self.directory is None or step == self._last_step:
            return False
        if self.requested:
            return True
        return self.interval_s is not None and self._clock() - self._last_save >= self.interval_s

    def save(
        self,
        step: int,
        save_fn: Callable[[str], Any],
        kind: str | None = None,
        suffix: str = "",
    ) -> ManifestEntry:
        """Have `save_fn(path)` write the checkpoint (a file or a directory) at a temporary
        path, move it into place, and record it in the manifest. `kind` defaults to the
        pending request's ("requested", or "triggered" by a fault), else "periodic". A failure
        is recorded as a failed line and raised again; it never becomes the checkpoint to
        resume from."""
        self.wait_persisted()  # one save at a time: a save never overtakes an older one
        request, kind = self._claim(kind)
        final = self.directory / f"step-{step:09d}{suffix}"
        started = time.monotonic()
        try:
            size = self._write(final, save_fn)
        except BaseException as exc:
            self._record(step, final, kind, 0, started, request, FAILED, f"{exc!r}"[:500])
            raise
        entry = self._record(step, final, kind, size, started, request, COMPLETE, "")
        self._last_save, self._last_step = self._clock(), step
        return entry

    def next_kind(self) -> str:
        """The kind of save `due` asks for: the pending request's, else "async" under the
        async policy, else "periodic". A script saves asynchronously (`save_async`) when this
        says "async"."""
        request = read_request(self.directory) if self.directory and self.requested else None
        if request is not None:
            return request.kind
        return "async" if self.policy == "async" else "periodic"

    def save_async(
        self,
        step: int,
        snapshot_fn: Callable[[], Any],
        persist_fn: Callable[[Any, str], Any],
        suffix: str = "",
    ) -> None:
        """An asynchronous save: `snapshot_fn()` copies the state to host memory while training
        waits (the stall), then `persist_fn(copy, path)` writes it on a background thread.
        The manifest line (kind "async", with the stall) is appended only once the file is in
        place, so an unfinished save is never one to resume from. One save at a time: a new
        one first waits for the last to be persisted (that wait is part of its stall)."""
        started = time.monotonic()
        self.wait_persisted()
        request, _ = self._claim("async")
        copy = snapshot_fn()
        stall = time.monotonic() - started
        self._last_save, self._last_step = self._clock(), step
        final = self.directory / f"step-{step:09d}{suffix}"

        def persist() -> None:
            try:
                size = self._write(final, lambda path: persist_fn(copy, path))
            except BaseException as exc:
                self._record(
                    step, final, "async", 0, started, request, FAILED, f"{exc!r}"[:500], stall
                )
                return
            self._record(step, final, "async", size, started, request, COMPLETE, "", stall)

        self._persisting = threading.Thread(target=persist, name=f"persist step {step}")
        self._persisting.start()

    def wait_persisted(self) -> None:
        """Wait for the asynchronous save being written, if any (call before exiting)."""
        if self._persisting is not None:
            self._persisting.join()
            self._persisting = None

    def _claim(self, kind: str | None) -> tuple[CheckpointRequest | None, str]:
        """Take the pending request, if any, for the save about to be made; its kind."""
        if self.directory is None:
            raise RuntimeError(f"checkpointing is disabled: {ENV_CHECKPOINT_DIR} is not set")
        asked = self.requested
        request = read_request(self.directory) if asked else None
        kind = kind or (request.kind if request else "requested" if asked else "periodic")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return request, kind

    def _write(self, final: Path, save_fn: Callable[[str], Any]) -> int:
        temporary = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        _remove(temporary)
        try:
            save_fn(str(temporary))
            if not temporary.exists():
                raise FileNotFoundError(f"save_fn wrote nothing at {temporary}")
            _fsync_tree(temporary)
            _remove(final)  # a save of the same step again replaces the old one
            os.replace(temporary, final)
            _fsync_dir(final.parent)
        except BaseException:
            _remove(temporary)
            raise
        return _size_of(final)

    def _record(
        self,
        step: int,
        path: Path,
        kind: str,
        size: int,
        started: float,
        request: CheckpointRequest | None,
        status: str,
        error: str,
        stall_s: float | None = None,
    ) -> ManifestEntry:
        assert self.directory is not None
        request_id = request.request_id if request is not None else None
        duration = time.monotonic() - started
        entry = ManifestEntry(
            step, str(path), kind, size, duration, request_id, status, error, stall_s, self.plan
        )
        _append_line(self.directory / MANIFEST_FILE, entry.to_json())
        if request is not None:
            self._answered(request)
        return entry

    def _answered(self, request: CheckpointRequest) -> None:
        assert self.directory is not None
        # A newer request may have replaced this one during the save: that one stays pending.
        if read_request(self.directory) == request:
            _remove(self.directory / REQUEST_FILE)

    def _remove_leftovers(self) -> None:
        assert self.directory is not None
        for leftover in self.directory.glob(".step-*.tmp-*"):
            _remove(leftover)  # from a run that died mid-save


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def _append_line(path: Path, line: str) -> None:
    # One write() of one line with O_APPEND: a reader sees the whole line or none of it.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be synced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
