"""Sia's heterogeneous evaluation (Jayaram Subramanya et al., SOSP 2023) as a simulation input.

`load_sia(name)` reads one of the artifact's workload sets in `data/sia/workloads/` (`philly`,
`saturn`, the paper's "Helios", and `newtrace`; each a few CSV files of columns `name`, `time`,
`application`, `num_replicas`, `batch_size`) with the per-GPU-type profiles of its five
models in `data/sia/profiles/` (see the README there for sources) and returns one trace per
file and the paper's 64-GPU cluster:

- the cluster: 6 nodes of 4 T4 (`aws` in the artifact), 3 of 8 RTX 2080 Ti (`rtx`) and 2 of 8
  A100 (`dgx-ext`), one queue `sia` whose quota is all of them;
- a job accepts all three models (those whose profile gives a step time for its shape), in the
  order the paper lists the cluster (T4, RTX 2080 Ti, A100), and runs rigid, on its GPU count
  with its batch size; its speed on a model is its throughput there over that on T4;
- its GPU count is rounded up to one the engine can place on every model (gangs above one
  node take whole nodes: 4 or fewer, 8, or a multiple of 8): 6 becomes 8, 10 to 14 become 16;
  it runs data-parallel on all of them, its batch spread over them;
- its work: the iterations its model's validation run at its batch size took to its last
  epoch (`validation-<batch>.csv`, linear between measured batch sizes, as the artifact's
  `Application.get_iteration`), each taking the profiled step time on the model at its GPU
  count and local batch (`placements-<type>.csv`, linear in the local batch; a local batch
  above the largest profiled is split into accumulation steps, one below the smallest takes
  the smallest's time), slowed by the artifact's calibration to real runs (`SLOWDOWNS`);
- submit times are the files' `time`; jobs are numbered 1, 2, ... in file order.

With `elastic`, each job instead runs from 1 GPU up to the most its profile makes worthwhile
(`most_gpus`), its work and speeds as above at that most, and carries its throughput at its
batch by GPU count on each type (`TraceJob.curves`, `Profiles.curves`): the simulator runs it
at that on whatever count and type the engine gives it. Its batch stays the trace's, spread
over however many GPUs it holds (Sia also changes the batch; Wanka does not).
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from pathlib import Path

from scheduler.sim.spec import ClusterSpec, parse_spec
from scheduler.sim.trace import TraceError, TraceJob

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "data" / "sia"
SETS = ("philly", "saturn", "newtrace")
QUEUE = "sia"
MOST_GPUS = 16  # the most an elastic job's profile is read for: two nodes of 8
# An elastic job grows only to counts where each GPU still adds this much of what one GPU does
# alone (`most_gpus`).
EFFICIENCY = 0.7


@dataclass(frozen=True)
class GpuType:
    """One of the cluster's GPU types: its name here, the artifact's and its nodes."""

    model: str
    profile: str  # the suffix of the artifact's `placements-<profile>.csv`
    nodes: int
    gpus_per_node: int


# The paper's Heterogeneous setting (section 4.3) as the artifact's `simulator_config.py` sets
# it (`cluster_nnodes`, `cluster_ngpus_per_node`), in the paper's order.
CLUSTER = (
    GpuType("T4", "aws", 6, 4),
    GpuType("RTX2080Ti", "rtx", 3, 8),
    GpuType("A100", "dgx-ext", 2, 8),
)
# The artifact's calibration of simulated throughput to real runs (`simulator_config.SLOWDOWNS`).
SLOWDOWNS = {"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2}


def load_sia(
    name: str, directory: str | Path = DEFAULT_DIR, elastic: bool = False
) -> tuple[list[list[TraceJob]], ClusterSpec]:
    """The traces of workload set `name` (one per file, by file number) and the cluster; with
    `elastic`, each job elastic (see the module docstring)."""
    if name not in SETS:
        raise ValueError(f"unknown Sia workload set {name!r}; known: {', '.join(SETS)}")
    directory = Path(directory)
    profiles = Profiles(directory / "profiles")
    files = sorted(
        (directory / "workloads" / name).glob("workload-*.csv"),
        key=lambda path: int(path.stem.split("-")[1]),
    )
    return [read_workload(path, profiles, elastic) for path in files], sia_cluster()


def sia_cluster() -> ClusterSpec:
    """The 64-GPU cluster of three GPU types, one pod each, and the queue `sia` over it all."""
    return parse_spec(
        {
            "name": "sia-heterogeneous",
            "datacenters": [
                {
                    "name": "dc1",
                    "pods": [
                        {
                            "name": gpu.profile.replace("-ext", ""),
                            "leaves": [
                                {
                                    "name": "l1",
                                    "nodes": gpu.nodes,
                                    "gpu_model": gpu.model,
                                    "gpus_per_node": gpu.gpus_per_node,
                                }
                            ],
                        }
                        for gpu in CLUSTER
                    ],
                }
            ],
            "queues": [
                {
                    "name": QUEUE,
                    "quotas": {gpu.model: gpu.nodes * gpu.gpus_per_node for gpu in CLUSTER},
                }
            ],
        }
    )


def read_workload(path: Path, profiles: Profiles, elastic: bool = False) -> list[TraceJob]:
    """One workload file as trace jobs (see the module docstring)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return [_job(number, row, profiles, path, elastic) for number, row in enumerate(rows, start=1)]


def placeable(gpus: int) -> int:
    """The fewest GPUs, at least `gpus`, the engine can place on 4- and on 8-GPU nodes."""
    return gpus if gpus <= 4 else math.ceil(gpus / 8) * 8


def _job(
    number: int, row: dict[str, str], profiles: Profiles, path: Path, elastic: bool
) -> TraceJob:
    try:
        app, gpus, batch = row["application"], int(row["num_replicas"]), int(row["batch_size"])
        submit = float(row["time"])
    except (KeyError, ValueError):
        raise TraceError(f"{path.name}, job {number}: bad row {row}") from None
    gpus = placeable(gpus)
    curves = profiles.curves(app, batch) if elastic else {}
    if curves:
        gpus = most_gpus(curves)
    times = {
        gpu.model: seconds
        for gpu in CLUSTER
        if (seconds := profiles.run_s(app, gpu, gpus, batch)) is not None
    }
    if not times:
        raise TraceError(f"{path.name}, job {number}: no GPU type's profile has {app}")
    first, *_ = times
    return TraceJob(
        number,
        submit,
        gpus,
        first,
        times[first],
        QUEUE,
        accepts=tuple(times),
        speeds=tuple((model, times[first] / seconds) for model, seconds in times.items()),
        min_gpus=1 if elastic and gpus > 1 else None,
        curves=tuple((model, curves[model]) for model in times) if curves else (),
    )


def most_gpus(curves: dict[str, tuple[tuple[int, float], ...]]) -> int:
    """An elastic job's most GPUs: the largest of 1, 2, 4, 8 and 16 (counts every type's nodes
    hold, profiled on each) at which its throughput per GPU is still at least EFFICIENCY of its
    throughput on one GPU, on every type it accepts."""
    counts = [gpus for gpus in (1, 2, 4, 8, 16) if all(gpus in dict(c) for c in curves.values())]
    return max(
        gpus
        for gpus in counts
        if all(dict(c)[gpus] >= EFFICIENCY * gpus * dict(c)[1] for c in curves.values())
    )


class Profiles:
    """The artifact's profiles of its models: step times per GPU type, iterations per batch."""

    def __init__(self, directory: Path) -> None:
        apps = sorted(path.name for path in directory.iterdir() if path.is_dir())
        self.placements = {
            (app, gpu.profile): _placements(directory / app / f"placements-{gpu.profile}.csv")
            for app in apps
            for gpu in CLUSTER
        }
        self.measured = {app: _iterations(directory / app) for app in apps}

    def run_s(self, app: str, gpu: GpuType, gpus: int, batch: int) -> float | None:
        """Seconds `app` runs rigid on `gpus` GPUs of `gpu` at global batch `batch`, or None
        when the profile lacks that shape."""
        step = self.step_s(app, gpu, gpus, batch)
        return None if step is None else self.iterations(app, batch) * step * SLOWDOWNS[app]

    def curves(self, app: str, batch: int) -> dict[str, tuple[tuple[int, float], ...]]:
        """Steps per second of `app` at global batch `batch` by GPU count (up to two 8-GPU
        nodes, on counts the engine places on the type's nodes) on each GPU type profiled."""
        found = {}
        for gpu in CLUSTER:
            points = []
            for gpus in range(1, MOST_GPUS + 1):
                if gpus > gpu.gpus_per_node and gpus % gpu.gpus_per_node:
                    continue
                step = self.step_s(app, gpu, gpus, batch)
                if step is not None:
                    points.append((gpus, 1 / step))
            if points:
                found[gpu.model] = tuple(points)
        return found

    def step_s(self, app: str, gpu: GpuType, gpus: int, batch: int) -> float | None:
        """One step's seconds, with accumulation when the local batch does not fit (as the
        artifact's `Application.get_throughput_with_accum`)."""
        shape = _shape(gpus, gpu.gpus_per_node)
        rows = self.placements.get((app, gpu.profile), {}).get(shape)
        if rows is None:
            return None
        local = math.ceil(batch / gpus)
        accumulations = math.ceil(local / rows[-1][0]) - 1
        step, sync = _between(rows, math.ceil(local / (accumulations + 1)))
        return step + (step - sync) * accumulations

    def iterations(self, app: str, batch: int) -> float:
        """Iterations to the last epoch at this global batch, linear between measured ones."""
        measured = self.measured[app]
        sizes = sorted(measured)
        batch = min(max(batch, sizes[0]), sizes[-1])
        upper = bisect.bisect_left(sizes, batch)
        if sizes[upper] == batch:
            return measured[batch]
        low, high = sizes[upper - 1], sizes[upper]
        share = (batch - low) / (high - low)
        return measured[low] + share * (measured[high] - measured[low])


def _placements(path: Path) -> dict[str, list[tuple[float, float, float]]]:
    """(local batch, step s, sync s) rows by placement (GPUs per node, e.g. `88`); none when the
    file is missing."""
    rows: dict[str, list[tuple[float, float, float]]] = {}
    if not path.exists():
        return rows
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["placement"], []).append(
                (float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"]))
            )
    return {shape: sorted(found) for shape, found in rows.items()}


def _iterations(directory: Path) -> dict[int, float]:
    """Iterations at the last epoch of each measured global batch."""
    found = {}
    for path in directory.glob("validation-*.csv"):
        with path.open(newline="") as f:
            *_, last = csv.DictReader(f)
        found[int(path.stem.split("-")[1])] = float(last["iteration"])
    return found


def _shape(gpus: int, per_node: int) -> str:
    """The artifact's placement of `gpus` GPUs on nodes of `per_node`: `4`, `44`, `88`."""
    if gpus <= per_node:
        return str(gpus)
    return str(per_node) * (gpus // per_node)


def _between(rows: list[tuple[float, float, float]], local: float) -> tuple[float, float]:
    """Step and sync seconds at this local batch, linear between profiled ones (clamped)."""
    sizes = [row[0] for row in rows]
    at = bisect.bisect_left(sizes, local)
    if at == 0 or at == len(rows):
        _, step, sync = rows[min(at, len(rows) - 1)]
        return step, sync
    (x0, s0, c0), (x1, s1, c1) = rows[at - 1], rows[at]
    share = (local - x0) / (x1 - x0)
    return s0 + share * (s1 - s0), c0 + share * (c1 - c0)
