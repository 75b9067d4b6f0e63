"""The Microsoft Philly trace (Jeon et al., ATC 2019) as a simulation input.

`load_philly(directory)` reads the job list `philly_pollux.csv` (columns `timestamp`,
`duration`, `num_gpus`, `gpu_time`, `cluster`) and the virtual-cluster sizes
`philly_vc_nodes.csv` (columns `vc`, `node num`) of `data/traces/philly/` (see its README for
their sources) and returns the trace and its own cluster:

- every virtual cluster (VC) is a queue, all in one cohort `philly`, so idle quota is lent and
  reclaimed; a VC's nominal quota is its nodes x 8 GPUs (its guarantee in the reports); the
  engine's never-lent guarantee is 0. VCs of the job list missing from the size list (4 VCs,
  18 jobs) get a quota of 0: they only borrow;
- the nodes, 352 of 8 GPUs (the sum of the VC sizes), are laid out as one data center of pods
  of `leaves_per_pod` leaves of `nodes_per_leaf` nodes (the trace has no placement data);
- submit times are seconds since the first submission; jobs are numbered 1, 2, ... in submit
  order (ties in file order); jobs of 8 GPUs or more are rounded up to whole nodes, since the
  engine places such gangs by whole nodes (7 jobs of 12 GPUs become 16);
- the trace has no priorities, final status or checkpoint policies: the run's defaults apply.
"""

from __future__ import annotations

import csv
import math
from datetime import datetime
from pathlib import Path

from scheduler.sim.spec import ClusterSpec, layout, parse_spec
from scheduler.sim.trace import TraceError, TraceJob

GPU_MODEL = "PHILLY"  # Philly's 8-GPU nodes as the Helios artifact reconstructs them
NODE_GPUS = 8
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "data" / "traces" / "philly"


def load_philly(
    directory: str | Path = DEFAULT_DIR,
    *,
    nodes_per_leaf: int = 32,
    leaves_per_pod: int = 4,
    scale: float = 1.0,
) -> tuple[list[TraceJob], ClusterSpec]:
    """The Philly trace and its cluster (see the module docstring). `scale` resizes every VC
    (at least one node each), for what-ifs on a smaller or larger cluster."""
    directory = Path(directory)
    sizes = {
        vc: max(1, round(nodes * scale))
        for vc, nodes in read_vc_nodes(directory / "philly_vc_nodes.csv").items()
    }
    trace = read_jobs(directory / "philly_pollux.csv")
    return trace, philly_cluster(
        sizes,
        sorted({job.queue for job in trace}),
        nodes_per_leaf=nodes_per_leaf,
        leaves_per_pod=leaves_per_pod,
    )


def read_vc_nodes(path: Path) -> dict[str, int]:
    """Nodes per virtual cluster, in file order."""
    sizes = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            try:
                sizes[row["vc"].strip()] = int(row["node num"])
            except (KeyError, ValueError):
                raise TraceError(f"{path.name}: bad row {row}") from None
    return sizes


def read_jobs(path: Path) -> list[TraceJob]:
    """The Philly job list as trace jobs (see the module docstring)."""
    rows = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        for index, row in enumerate(reader):
            if not any((value or "").strip() for value in row.values()):
                continue  # the file ends with a blank line
            rows.append((_submit(row, reader.line_num), index, row, reader.line_num))
    rows.sort(key=lambda item: (item[0], item[1]))
    first = rows[0][0] if rows else 0.0
    return [
        _job(number, submit - first, row, line)
        for number, (submit, _, row, line) in enumerate(rows, start=1)
    ]


def _submit(row: dict[str, str], line: int) -> float:
    try:
        return datetime.fromisoformat(row["timestamp"].strip()).timestamp()
    except (KeyError, ValueError):
        raise TraceError(
            f"line {line}, column timestamp: {row.get('timestamp')!r} is not "
            "a time like 2017-10-03 12:00:00"
        ) from None


def _job(number: int, submit_s: float, row: dict[str, str], line: int) -> TraceJob:
    try:
        gpus = int(row["num_gpus"])
        duration = float(row["duration"])
    except (KeyError, ValueError):
        raise TraceError(f"line {line}: num_gpus and duration must be numbers") from None
    if gpus < 1 or not duration > 0:
        raise TraceError(f"line {line}: needs at least 1 GPU and a duration above 0")
    if gpus > NODE_GPUS:
        gpus = math.ceil(gpus / NODE_GPUS) * NODE_GPUS
    return TraceJob(number, submit_s, gpus, GPU_MODEL, duration, row["cluster"].strip())


def philly_cluster(
    vc_nodes: dict[str, int], vcs: list[str], *, nodes_per_leaf: int = 32, leaves_per_pod: int = 4
) -> ClusterSpec:
    """One data center holding the VCs' nodes in leaves and pods; a queue per VC (those of
    `vc_nodes` first, in its order, then the others of `vcs` by name), all in one cohort."""
    names = list(vc_nodes) + sorted(set(vcs) - set(vc_nodes))
    return parse_spec(
        {
            "name": "philly",
            "datacenters": layout(
                sum(vc_nodes.values()),
                gpu_model=GPU_MODEL,
                nodes_per_leaf=nodes_per_leaf,
                leaves_per_pod=leaves_per_pod,
                gpus_per_node=NODE_GPUS,
            ),
            "cohorts": [{"name": "philly"}],
            "queues": [
                {
                    "name": vc,
                    "cohort": "philly",
                    "quotas": {GPU_MODEL: vc_nodes.get(vc, 0) * NODE_GPUS},
                }
                for vc in names
            ],
        }
    )
