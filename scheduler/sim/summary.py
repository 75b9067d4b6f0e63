"""A run's figures, from what its recorder collected: a JSON-ready dict.

Definitions beyond those of `metrics`:
- queueing delay (`wait`): all the time a job spent pending, over every spell (a preempted job
  waits again), for the jobs that started; those that never did are counted apart
  (`never_started`), since their wait has no end.
- JCT: finish minus submit, for finished jobs. Makespan: the last finish minus the first submit.
- ETTR of a job: productive compute time (compute not lost to a fault or a preemption) over the
  wall time since its first admission; overall: the same sums weighted by the job's GPUs.
- finish-time fairness (Themis' rho): JCT over the job's JCT alone, estimated as its trace
  duration (what it needs on an empty cluster with no faults); 1 is ideal, larger is worse.
- GPU-hours lost to preemptions: the work lost since the victim's last checkpoint and its
  restart when it resumes; to faults: the work lost, triggered saves and restarts.
- size classes: by GPUs asked, bounds `SIZE_BOUNDS`; large gangs: jobs of at least
  `large_gang_gpus` GPUs (by default a power of two near 1 % of the cluster, at least 32).
Percentiles are nearest-rank; floats are rounded to 4 decimals (6 for fractions).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable

from scheduler.sim.metrics import Outcome, Recorder, Series

SIZE_BOUNDS = (1, 2, 8, 64, 512, 4096)
CDF_POINTS = 101


def size_class(gpus: int) -> str:
    """The size class of a job: "1", "2-7", "8-63", "64-511", "512-4095" or "4096+"."""
    for low, high in zip(SIZE_BOUNDS, SIZE_BOUNDS[1:], strict=False):
        if low <= gpus < high:
            return str(low) if high - low == 1 else f"{low}-{high - 1}"
    return f"{SIZE_BOUNDS[-1]}+"


def default_large_gang(cluster_gpus: int) -> int:
    """A power of two near 1 % of the cluster, at least 32 GPUs."""
    return max(32, 2 ** round(math.log2(max(1, cluster_gpus / 100))))


def percentile(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (not empty)."""
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def stats(values: Iterable[float]) -> dict[str, float | int]:
    """Count, mean, median, p95, p99 and max; zeros when there are no values."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "mean": 0.0, "median": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    return {
        "count": len(ordered),
        "mean": r4(math.fsum(ordered) / len(ordered)),
        "median": r4(percentile(ordered, 50)),
        "p95": r4(percentile(ordered, 95)),
        "p99": r4(percentile(ordered, 99)),
        "max": r4(ordered[-1]),
    }


def r4(value: float) -> float:
    return round(value, 4)


def _mean(values: Iterable[float]) -> float | None:
    """The mean to 4 places, None for no values."""
    values = list(values)
    return r4(sum(values) / len(values)) if values else None


def r6(value: float) -> float:
    return round(value, 6)


def summarize(
    recorder: Recorder,
    *,
    start: float,
    end: float,
    capacity: dict[str, int],
    nominal: dict[str, int],
    large_gang_gpus: int,
) -> dict:
    """Every figure of one run (see the module docstrings of this module and `metrics`)."""
    outcomes = sorted(recorder.outcomes, key=lambda o: o.id)
    finished = [o for o in outcomes if o.status == "finished"]
    started = [o for o in outcomes if o.first_start_s is not None]
    gpus = sum(capacity.values())
    span = max(end - start, 1e-9)
    last_finish = max((o.submit_s + o.jct_s for o in finished), default=start)
    return {
        "jobs": len(outcomes),
        "finished": len(finished),
        "running_at_end": sum(o.status == "running" for o in outcomes),
        "never_started": sum(o.status == "never-started" for o in outcomes),
        "makespan_s": r4(last_finish - start),
        "utilization": {
            "allocated": r6(recorder.allocated.integral_to(end) / (gpus * span)),
            "busy": r6(recorder.busy.integral_to(end) / (gpus * span)),
        },
        "wait_s": stats(o.wait_s for o in started),
        "jct_s": stats(o.jct_s for o in finished),
        "large_gangs": {
            "min_gpus": large_gang_gpus,
            "wait_s": stats(o.wait_s for o in started if o.gpus >= large_gang_gpus),
            "never_started": sum(
                o.first_start_s is None for o in outcomes if o.gpus >= large_gang_gpus
            ),
        },
        "by_size": _grouped(outcomes, lambda o: size_class(o.gpus)),
        "by_queue": _by_queue(recorder, outcomes, nominal, end, span),
        "preemptions": {
            "count": recorder.preemptions,
            "shrinks": recorder.shrinks,
            "grows": recorder.grows,
            "moves": recorder.moves,
            "defrag_moves": recorder.defrag_moves,
            "shrink_gpus_kept": _mean(g for g, _ in recorder.kept),
            "shrink_throughput_kept": _mean(t for _, t in recorder.kept),
            "gpu_hours_lost": r4(sum(o.lost_preemption_gpu_s for o in outcomes) / 3600),
        },
        "faults": {
            "count": sum(recorder.faults.values()),
            "by_kind": dict(sorted(recorder.faults.items())),
            "gpu_hours_lost": r4(sum(o.lost_fault_gpu_s for o in outcomes) / 3600),
        },
        "ettr": _ettr(outcomes),
        "fairness_rho": stats(_rho(o) for o in finished),
        "fragmentation": {
            "mean_gpus": r4(recorder.fragmented.integral_to(end) / span),
            "mean_share": r6(recorder.fragmented.integral_to(end) / (gpus * span)),
        },
        "guarantee": {
            "violations": sum(recorder.violations.values()),
            "longest_starved_s": r4(max(recorder.longest_starved.values(), default=0.0)),
        },
        "cycles": recorder.cycles,
        "series": _series(recorder, end, gpus),
        "wait_cdf_s": _cdf([o.wait_s for o in started]),
    }


def _rho(outcome: Outcome) -> float:
    return outcome.jct_s / outcome.duration_s  # type: ignore[operator]


def _ettr(outcomes: list[Outcome]) -> dict:
    started = [o for o in outcomes if o.ettr is not None]
    wall = math.fsum(o.wall_gpu_s for o in started)
    productive = math.fsum(o.productive_gpu_s for o in started)
    by_size: dict[str, list[Outcome]] = defaultdict(list)
    for o in started:
        by_size[size_class(o.gpus)].append(o)
    return {
        "overall": r6(productive / wall) if wall > 0 else None,
        "per_job": stats(o.ettr for o in started),  # type: ignore[misc]
        "by_size": {
            label: r6(
                math.fsum(o.productive_gpu_s for o in group)
                / max(1e-9, math.fsum(o.wall_gpu_s for o in group))
            )
            for label, group in _ordered_classes(by_size)
        },
    }


def _ordered_classes(groups: dict[str, list[Outcome]]) -> list[tuple[str, list[Outcome]]]:
    order = {size_class(b): i for i, b in enumerate(SIZE_BOUNDS)}
    return sorted(groups.items(), key=lambda item: order.get(item[0], 99))


def _grouped(outcomes: list[Outcome], key: Callable[[Outcome], str]) -> dict:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[key(o)].append(o)
    return {
        label: {
            "jobs": len(group),
            "never_started": sum(o.first_start_s is None for o in group),
            "wait_s": stats(o.wait_s for o in group if o.first_start_s is not None),
            "jct_s": stats(o.jct_s for o in group if o.jct_s is not None),
        }
        for label, group in _ordered_classes(groups)
    }


def _by_queue(
    recorder: Recorder, outcomes: list[Outcome], nominal: dict[str, int], end: float, span: float
) -> dict:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.queue].append(o)
    result = {}
    for queue in sorted(set(nominal) | set(groups)):
        group = groups.get(queue, [])
        series = recorder.queue_used.get(queue)
        used = series.integral_to(end) / span if series is not None else 0.0
        result[queue] = {
            "jobs": len(group),
            "guarantee_gpus": nominal.get(queue, 0),
            "mean_gpus": r4(used),
            "never_started": sum(o.first_start_s is None for o in group),
            "wait_s": stats(o.wait_s for o in group if o.first_start_s is not None),
            "jct_s": stats(o.jct_s for o in group if o.jct_s is not None),
            "fairness_rho_mean": stats(_rho(o) for o in group if o.jct_s is not None)["mean"],
            "guarantee_violations": recorder.violations.get(queue, 0),
            "longest_starved_s": r4(recorder.longest_starved.get(queue, 0.0)),
        }
    return result


def _series(recorder: Recorder, end: float, gpus: int) -> dict:
    allocated = recorder.allocated.averages(end)
    busy = recorder.busy.averages(end)
    return {
        "step_s": recorder.allocated.step_s,
        "t_s": [r4(t) for t, _ in allocated],
        "allocated": [r6(v / gpus) for _, v in allocated],
        "busy": [r6(v / gpus) for _, v in busy],
    }


def tide(series: dict[str, Series], end: float) -> dict:
    """The tide of a run with services: the mean GPUs their replicas held (`inference`) and
    the rest of the work held (`other`) over each step up to `end`; a last, partial step is
    averaged over the part of it the run covered. Every series starts and steps alike."""
    step = next(iter(series.values())).step_s
    result: dict = {"step_s": step}
    for kind, values in series.items():
        points = [(t, mean) for t, mean in values.averages(end) if t < end]
        result["t_s"] = [r4(t) for t, _ in points]
        result[kind] = [r4(mean * step / min(step, end - t)) for t, mean in points]
    return result


def _cdf(values: list[float]) -> list[float]:
    """The values at CDF_POINTS evenly spaced percentiles, 0 to 100."""
    ordered = sorted(values)
    if not ordered:
        return []
    return [
        r4(ordered[min(len(ordered) - 1, round(i / (CDF_POINTS - 1) * (len(ordered) - 1)))])
        for i in range(CDF_POINTS)
    ]
