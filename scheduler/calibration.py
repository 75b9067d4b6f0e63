"""Calibrated by the fleet: how far the planner's predicted iteration time is from what jobs
measure, per model family, GPU model and scale, and the planner's predictions corrected by it.

Each measured run gives a ratio, measured seconds per iteration over the planner's (its own,
uncalibrated) prediction. A bucket's factor is the weighted mean of its runs' ratios in log
space (a run 20 % slow and one 20 % fast cancel out, as they would not in a plain mean):

- recent runs weigh more: a run's weight halves every `HALF_LIFE_S`, since kernels, drivers and
  the fleet change;
- a run more than `OUTLIER` times off its bucket's median is left out (a straggler the job ran
  with for hours, a script that counts steps its own way);
- the mean is pulled towards a prior worth `PRIOR_RUNS` runs, so one run moves a prediction
  only part of the way: for a scale bucket the prior is its family and GPU's factor over all
  scales, for that wider bucket it is 1 (the model as fitted).

Buckets: the model family (`family`), the GPU model, and the job's GPU count rounded down to a
power of two (`scale`); a prediction takes the factor of its own bucket where a run measured
one, else of its family and GPU at any scale, else none. Nothing here imports Django: the portal
hands in runs as `Run`s and reads back a plain dict.

A job the planner knows nothing of (no model named) has its speed on each GPU model measured
by its own earlier runs instead, the same step timing's steps per second per GPU
(`measured_speeds`).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace

from scheduler.parallelism import ParallelPlan

HALF_LIFE_S = 30 * 86400.0
OUTLIER = 2.0
PRIOR_RUNS = 1.0
ANY_SCALE = 0  # the scale of a bucket that holds a family and GPU's runs at every scale
RECENT_RUNS = 5  # a job's newest runs on a GPU model that its measured speed there rests on

# "llama3-70b" -> "llama3", "gpt3-1.3b" -> "gpt3", "megatron-1t" -> "megatron": the name less a
# trailing parameter count; a name without one is its own family.
_SIZE = re.compile(r"-\d+(\.\d+)?[kmbt]$", re.IGNORECASE)


@dataclass(frozen=True)
class Run:
    """One job's measurement on one plan: which model, GPUs and how many, and how far off."""

    model: str
    gpu: str
    gpus: int
    ratio: float  # measured over predicted (uncalibrated) seconds per iteration
    at: float  # when it was measured, seconds since the epoch


@dataclass(frozen=True)
class Factor:
    """What a bucket's predictions are multiplied by, and how many runs that rests on."""

    factor: float
    runs: int
    scale: int  # the bucket's power of two of GPUs, ANY_SCALE for the family and GPU's


Table = dict[tuple[str, str, int], Factor]


def family(model: str) -> str:
    """The model family a run counts for: its name less a trailing size ("llama3-8b" ->
    "llama3"), so that the 8B's runs inform the 70B's predictions on the same GPUs."""
    return _SIZE.sub("", model)


def scale(gpus: int) -> int:
    """The scale bucket of a GPU count: the power of two at or below it (896 -> 512)."""
    return 1 << (max(gpus, 1).bit_length() - 1)


def aggregate(runs: list[tuple[float, float]], now: float, prior: float = 1.0) -> Factor | None:
    """The factor of one bucket's (ratio, measured at) runs: see the module's docstring. None
    when no run is left."""
    logs = [(math.log(ratio), at) for ratio, at in runs if ratio > 0]
    if not logs:
        return None
    middle = statistics.median(log for log, _ in logs)
    kept = [(log, at) for log, at in logs if abs(log - middle) <= math.log(OUTLIER)]
    weights = [0.5 ** (max(now - at, 0.0) / HALF_LIFE_S) for _, at in kept]
    total = sum(w * log for w, (log, _) in zip(weights, kept, strict=True))
    mean = (total + PRIOR_RUNS * math.log(prior)) / (sum(weights) + PRIOR_RUNS)
    return Factor(math.exp(mean), len(kept), ANY_SCALE)


def table(runs: list[Run], now: float) -> Table:
    """Every bucket's factor, keyed (family, GPU, scale) with ANY_SCALE for the wider ones."""
    grouped: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    for run in runs:
        for size in (ANY_SCALE, scale(run.gpus)):
            grouped.setdefault((family(run.model), run.gpu, size), []).append((run.ratio, run.at))
    found: Table = {}
    for key in sorted(grouped, key=lambda k: k[2]):  # ANY_SCALE first: the others' prior
        wider = found.get((key[0], key[1], ANY_SCALE))  # None while building that one
        factor = aggregate(grouped[key], now, wider.factor if wider else 1.0)
        if factor is not None:
            found[key] = replace(factor, scale=key[2])
    return found


def lookup(factors: Table, model: str, gpu: str, gpus: int) -> Factor | None:
    """The factor for a prediction of `model` on `gpus` GPUs of `gpu`: its own bucket's, else
    its family and GPU's at any scale, else None (the model as fitted)."""
    name = family(model)
    return factors.get((name, gpu, scale(gpus))) or factors.get((name, gpu, ANY_SCALE))


def calibrated(plan: ParallelPlan, factor: Factor | None) -> ParallelPlan:
    """The plan with its predictions scaled by `factor`: iteration time up, tokens/s and MFU
    down by as much (memory is the model's own)."""
    if factor is None:
        return plan
    f = factor.factor
    return replace(
        plan, iteration_s=plan.iteration_s * f, tokens_per_s=plan.tokens_per_s / f, mfu=plan.mfu / f
    )


def calibrated_curve(curve: tuple, factors: Table, model: str, gpu: str) -> tuple:
    """A (GPUs, tokens/s) curve (`parallelism.curve`) with each size's tokens/s divided by the
    factor of its bucket: what the engine weighs resizes by, and the simulator runs jobs at."""
    found = ((gpus, rate, lookup(factors, model, gpu, gpus)) for gpus, rate in curve)
    return tuple((gpus, rate / (factor.factor if factor else 1.0)) for gpus, rate, factor in found)


def record(factor: Factor, uncalibrated_s: float) -> dict:
    """What a plan's JSON says of its calibration (under "calibration"): the factor, the runs
    it rests on, their scale, and the model's own prediction, which a new measurement is
    compared with (a factor is never compared with itself)."""
    return {
        "factor": round(factor.factor, 4),
        "runs": factor.runs,
        "scale": factor.scale,
        "uncalibrated_s": round(uncalibrated_s, 4),
    }


def measured_speeds(runs, accepts) -> tuple[tuple[tuple[str, float], ...], int]:
    """A job's speed on each GPU model it `accepts` that its earlier `runs` ((GPU model, steps
    per second per GPU), newest first) measured: the geometric mean of its newest
    `RECENT_RUNS` there; and how many runs that rests on. A model no run measured is left out:
    its speed is unknown."""
    rates: dict[str, list[float]] = {}
    for gpu, rate in runs:
        if gpu in accepts and rate > 0 and len(rates.setdefault(gpu, [])) < RECENT_RUNS:
            rates[gpu].append(rate)
    speeds = tuple((gpu, statistics.geometric_mean(found)) for gpu, found in rates.items())
    return speeds, sum(len(found) for found in rates.values())
