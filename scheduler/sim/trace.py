"""Workload traces: the jobs a simulation replays, and the generic trace CSV format.

A trace is a list of `TraceJob`s, sorted by submit time. The generic CSV has one job per row
and a header naming its columns, in any order (unknown columns are ignored); the format is
documented in `docs/sim-trace-format.md`:

- required: `submit_s` (seconds from the start of the trace), `gpus` (its maximum when
  elastic; below 1, a share of one GPU rounded up to eighths: `0.25`), `gpu_model` (as in
  the cluster spec), `duration_s` (run time on `gpus` GPUs, or on its share, without faults
  or preemption), `queue` or `tenant` (the queue it is submitted to);
- optional: `id` (unique whole number; default the row's number), `priority` (default 0),
  `status` (the source's final status, kept for reports), `min_gpus` (elastic when below
  `gpus`), `checkpoint` (`periodic`, `async`, `triggered` or `none`, with an optional interval
  in seconds: `periodic:3600`; default the run's policy, interval from the advisor), `model`
  and `global_batch` (a model of `scheduler.parallelism.MODELS` and its batch: a shrunk job
  then runs at the planner's throughput for the GPUs it keeps, not in proportion to them),
  `accepts` (the GPU models it may run on, in order of preference, `gpu_model` first:
  `T4|RTX2080Ti|A100`) and `speeds` (its throughput per GPU on each of them relative to
  `gpu_model`: `T4:1|RTX2080Ti:1.6|A100:3.1`; its run time on a model is `duration_s` over that
  model's speed), `mig` (a MIG profile of its GPU model, e.g. `1g.10gb`, with `gpus` 1 and
  no `accepts` or `min_gpus`: it runs on one MIG instance of that profile, charged the profile's
  share of the GPU, `scheduler.mig`), `movable` (`false` for a job its submitter marked not
  to move while it runs: defragmentation leaves it; default `true`).

Empty optional cells take their default. A bad row raises `TraceError` naming the line and
column, e.g. `line 7, column gpus: 'eight' is not a whole number`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from scheduler.checkpointing import Policy, PolicyKind
from scheduler.engine.model import SLICES
from scheduler.mig import Profile
from scheduler.parallelism import MODELS
from scheduler.sim.spec import mig_profiles

REQUIRED = ("submit_s", "gpus", "gpu_model", "duration_s")
FLAGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


class TraceError(ValueError):
    """A trace file that cannot be read, with the line and column at fault."""


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace. Times are seconds from the start of the trace."""

    id: int
    submit_s: float
    gpus: int
    gpu_model: str
    duration_s: float
    queue: str
    priority: int = 0
    status: str = ""
    min_gpus: int | None = None  # None: `gpus` (not elastic)
    checkpoint: Policy | None = None  # None: the run's default policy
    model: str = ""  # a name of scheduler.parallelism.MODELS; "" for none
    global_batch: int | None = None  # sequences per step, with `model`
    accepts: tuple[str, ...] = ()  # GPU models it may run on, `gpu_model` first; (): only it
    # Its throughput per GPU on each accepted model relative to `gpu_model` (1 there): what
    # its run time on a model is divided by. (): the same on every model.
    speeds: tuple[tuple[str, float], ...] = ()
    # Its measured throughput (any unit, the same on every model) by GPU count on each model it
    # accepts, `(model, ((gpus, throughput), ...))`, one curve for each model, as a job reports
    # it while it runs: what its speed on a model and count follows (not a column of the CSV:
    # loaders such as `sia` give it). (): none measured (`speeds`, and a shrunk job's speed in
    # proportion to its GPUs or by the planner's curve).
    curves: tuple[tuple[str, tuple[tuple[int, float], ...]], ...] = ()
    slices: int = 0  # a share of one GPU in eighths (1-7), with `gpus` 1; 0: whole GPUs
    movable: bool = True  # False: marked not to move while it runs (`Workload.movable`)
    mig: Profile | None = None  # a MIG instance of one GPU of `gpu_model`, with `gpus` 1

    @property
    def fractional(self) -> bool:
        """Whether it takes part of one GPU: a share or a MIG instance."""
        return bool(self.slices or self.mig)

    @property
    def share(self) -> float:
        """What it holds when it runs, in GPUs: its share, its MIG profile's, or its GPUs."""
        if self.mig:
            return self.mig.charge
        return self.slices / SLICES if self.slices else self.gpus

    @property
    def fewest_gpus(self) -> int:
        return self.gpus if self.min_gpus is None else min(self.min_gpus, self.gpus)

    def curve_on(self, gpu_model: str) -> tuple[tuple[int, float], ...]:
        """Its measured throughput by GPU count on `gpu_model`; () when not measured there."""
        return dict(self.curves).get(gpu_model, ())

    def speed_on(self, gpu_model: str) -> float:
        """Its work per second on `gpu_model` relative to `gpu_model` of the trace."""
        return dict(self.speeds).get(gpu_model, 1.0)


def load_csv(path: str | Path, memory_gb: Mapping[str, int] | None = None) -> list[TraceJob]:
    """The jobs of a generic trace CSV (see the module docstring), sorted by submit time and
    id. Raises TraceError for a bad row or header."""
    with open(path, newline="") as f:
        return read_csv(f, memory_gb)


def read_csv(lines: Iterable[str], memory_gb: Mapping[str, int] | None = None) -> list[TraceJob]:
    """The jobs of a generic trace CSV given as lines of text; a `mig` cell names a profile of
    its GPU model with the memory `memory_gb` gives it (the cluster spec's `memory_gb`), else
    the planner's catalogue's."""
    reader = csv.DictReader(lines)
    header = reader.fieldnames or []
    missing = [name for name in REQUIRED if name not in header]
    if "queue" not in header and "tenant" not in header:
        missing.append("queue (or tenant)")
    if missing:
        raise TraceError(f"line 1: missing column(s) {', '.join(missing)}")
    jobs = [
        _job(row, reader.line_num, index, memory_gb) for index, row in enumerate(reader, start=1)
    ]
    _check_unique(jobs)
    return sorted(jobs, key=lambda job: (job.submit_s, job.id))


def _job(
    row: dict[str, str], line: int, index: int, memory_gb: Mapping[str, int] | None
) -> TraceJob:
    cell = _Cells(row, line)
    gpus, slices = cell.gpus("gpus")
    min_gpus = cell.whole("min_gpus", minimum=1, optional=True)
    if slices and min_gpus is not None:
        raise TraceError(f"line {line}, column min_gpus: a share of a GPU is not elastic")
    if min_gpus is not None and min_gpus > gpus:
        raise TraceError(f"line {line}, column min_gpus: {min_gpus} is more than gpus ({gpus})")
    queue = (row.get("queue") or "").strip() or (row.get("tenant") or "").strip()
    if not queue:
        raise TraceError(f"line {line}, column queue: empty (give a queue or a tenant)")
    given_id = cell.whole("id", minimum=0, optional=True)
    model, batch = cell.model("model", "global_batch")
    gpu_model = cell.text("gpu_model")
    accepts = cell.accepts("accepts", gpu_model)
    return TraceJob(
        id=index if given_id is None else given_id,
        submit_s=cell.number("submit_s"),
        gpus=gpus,
        gpu_model=gpu_model,
        duration_s=cell.number("duration_s", positive=True),
        queue=queue,
        priority=cell.whole("priority", optional=True) or 0,
        status=(row.get("status") or "").strip().lower(),
        min_gpus=min_gpus,
        checkpoint=cell.checkpoint("checkpoint"),
        model=model,
        global_batch=batch,
        accepts=accepts,
        speeds=cell.speeds("speeds", accepts or (gpu_model,)),
        slices=slices,
        mig=cell.mig("mig", gpu_model, memory_gb),
        movable=cell.flag("movable", default=True),
    )


def _check_unique(jobs: list[TraceJob]) -> None:
    seen: set[int] = set()
    for job in jobs:
        if job.id in seen:
            raise TraceError(f"column id: job id {job.id} appears twice")
        seen.add(job.id)


class _Cells:
    """Typed access to one row's cells, raising TraceError with line and column."""

    def __init__(self, row: dict[str, str], line: int) -> None:
        self.row = row
        self.line = line

    def _raw(self, column: str, optional: bool) -> str | None:
        value = (self.row.get(column) or "").strip()
        if value:
            return value
        if optional:
            return None
        raise self.error(column, "empty")

    def error(self, column: str, why: str) -> TraceError:
        return TraceError(f"line {self.line}, column {column}: {why}")

    def text(self, column: str) -> str:
        return self._raw(column, optional=False)  # type: ignore[return-value]

    def number(self, column: str, positive: bool = False) -> float:
        raw = self._raw(column, optional=False)
        try:
            value = float(raw)  # type: ignore[arg-type]
        except ValueError:
            raise self.error(column, f"{raw!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            bound = "more than 0" if positive else "0 or more"
            raise self.error(column, f"{raw!r} must be a finite number {bound}")
        return value

    def whole(self, column: str, minimum: int | None = None, optional: bool = False) -> int | None:
        raw = self._raw(column, optional)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise self.error(column, f"{raw!r} is not a whole number") from None
        if minimum is not None and value < minimum:
            raise self.error(column, f"{value} is less than {minimum}")
        return value

    def gpus(self, column: str) -> tuple[int, int]:
        """(GPUs, eighths of one): a whole number of GPUs, or a share of one below 1, rounded
        up to eighths (eight eighths are one GPU)."""
        raw = self._raw(column, optional=False)
        try:
            value = float(raw)  # type: ignore[arg-type]
        except ValueError:
            raise self.error(column, f"{raw!r} is not a whole number") from None
        if not math.isfinite(value) or value <= 0 or value.is_integer():
            return self.whole(column, minimum=1), 0  # type: ignore[return-value]
        if value > 1:
            raise self.error(column, f"{raw} is neither a whole number nor a share below 1")
        slices = math.ceil(value * SLICES - 1e-9)
        return 1, 0 if slices >= SLICES else slices

    def mig(
        self, column: str, gpu_model: str, memory_gb: Mapping[str, int] | None
    ) -> Profile | None:
        """A MIG profile of the job's GPU model, for a job of one whole GPU on that model."""
        name = self._raw(column, optional=True)
        if name is None:
            return None
        named = mig_profiles([gpu_model], memory_gb).get(gpu_model, {})
        if name not in named:
            known = f"its profiles are {', '.join(named)}" if named else "it has no MIG"
            raise self.error(column, f"{name!r} is not a MIG profile of {gpu_model} ({known})")
        if self.row.get("gpus", "").strip() != "1":
            raise self.error(column, "a MIG job takes an instance of one GPU: give gpus 1")
        for other in ("min_gpus", "accepts"):
            if (self.row.get(other) or "").strip():
                why = f"a MIG job runs on {gpu_model} alone: leave {other} empty"
                raise self.error(column, why)
        return named[name]

    def flag(self, column: str, default: bool) -> bool:
        """`true` or `false` (also `yes`/`no`, `1`/`0`); empty: `default`."""
        raw = self._raw(column, optional=True)
        if raw is None:
            return default
        value = FLAGS.get(raw.lower())
        if value is None:
            raise self.error(column, f"{raw!r} is neither true nor false")
        return value

    def checkpoint(self, column: str) -> Policy | None:
        raw = self._raw(column, optional=True)
        if raw is None:
            return None
        try:
            return parse_policy(raw)
        except ValueError as why:
            raise self.error(column, str(why)) from None

    def model(self, column: str, batch_column: str) -> tuple[str, int | None]:
        """A model of the planner's catalogue and its global batch, both or neither."""
        name = self._raw(column, optional=True) or ""
        batch = self.whole(batch_column, minimum=1, optional=True)
        if bool(name) != (batch is not None):
            raise self.error(
                column if not name else batch_column, "give both model and global_batch"
            )
        if name and name not in MODELS:
            raise self.error(
                column, f"{name!r} is not a model of the catalogue ({', '.join(MODELS)})"
            )
        return name, batch

    def accepts(self, column: str, gpu_model: str) -> tuple[str, ...]:
        """GPU models separated by `|`, the job's `gpu_model` first."""
        raw = self._raw(column, optional=True)
        if raw is None:
            return ()
        models = tuple(model.strip() for model in raw.split("|"))
        if models[0] != gpu_model or "" in models or len(set(models)) < len(models):
            raise self.error(
                column, f"{raw!r} must list distinct GPU models, {gpu_model!r} (gpu_model) first"
            )
        return models

    def speeds(self, column: str, models: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
        """`model:speed` pairs separated by `|`, one for each accepted model, 1 for the first."""
        raw = self._raw(column, optional=True)
        if raw is None:
            return ()
        speeds = {}
        for pair in raw.split("|"):
            model, _, number = pair.partition(":")
            try:
                speed = float(number)
            except ValueError:
                raise self.error(column, f"{pair!r} is not model:speed") from None
            if not math.isfinite(speed) or speed <= 0:
                raise self.error(column, f"{pair!r}: a speed must be a finite number above 0")
            speeds[model.strip()] = speed
        if sorted(speeds) != sorted(models) or speeds[models[0]] != 1.0:
            raise self.error(
                column,
                f"{raw!r} must give a speed for each of {', '.join(models)}, 1 for the first",
            )
        return tuple((model, speeds[model]) for model in models)


def parse_policy(text: str) -> Policy:
    """A checkpoint policy from `kind` or `kind:interval_s`, e.g. `periodic:3600`; the interval
    is left None (the advisor's) when not given."""
    kind_text, _, interval_text = text.strip().lower().partition(":")
    try:
        kind = PolicyKind(kind_text)
    except ValueError:
        known = ", ".join(k.value for k in PolicyKind)
        raise ValueError(f"{text!r} is not a checkpoint policy ({known})") from None
    if not interval_text:
        return Policy(kind)
    try:
        interval = float(interval_text)
    except ValueError:
        raise ValueError(f"{interval_text!r} is not an interval in seconds") from None
    if not math.isfinite(interval) or interval <= 0:
        raise ValueError(f"interval {interval_text!r} must be more than 0 seconds")
    return Policy(kind, interval)


def format_policy(policy: Policy | None) -> str:
    """The CSV cell for a checkpoint policy (the inverse of `parse_policy`)."""
    if policy is None:
        return ""
    if policy.interval_s is None:
        return policy.kind.value
    return f"{policy.kind.value}:{policy.interval_s:g}"


COLUMNS = (
    "id",
    "submit_s",
    "gpus",
    "gpu_model",
    "duration_s",
    "queue",
    "priority",
    "status",
    "min_gpus",
    "checkpoint",
    "model",
    "global_batch",
    "accepts",
    "speeds",
    "mig",
    "movable",
)


def write_csv(jobs: Iterable[TraceJob]) -> str:
    """The jobs as a generic trace CSV (every column), for saving a synthetic trace or an
    exported history; times read back exactly."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for job in jobs:
        writer.writerow(
            [
                job.id,
                _seconds(job.submit_s),
                job.share if job.slices else job.gpus,
                job.gpu_model,
                _seconds(job.duration_s),
                job.queue,
                job.priority,
                job.status,
                "" if job.min_gpus is None else job.min_gpus,
                format_policy(job.checkpoint),
                job.model,
                "" if job.global_batch is None else job.global_batch,
                "|".join(job.accepts),
                "|".join(f"{model}:{speed!r}" for model, speed in job.speeds),
                job.mig.name if job.mig else "",
                "" if job.movable else "false",
            ]
        )
    return out.getvalue()


def _seconds(value: float) -> str:
    """A time as short as it reads back the same: `3600`, `2591999.5` (not `:g`'s `2.592e+06`)."""
    return str(int(value)) if value.is_integer() else repr(value)
