"""The fleet's measurements of its jobs' iteration times, and the calibration table they make
(`scheduler.calibration`): what a job's plan predicts is corrected by what the jobs of its
model family measured on the same GPUs at about its scale.

A job's seconds per iteration are measured from the training steps it reports in every
heartbeat (the contract's progress file), by the progress detector's looks at its current run
(`portal.agents.progress`): the steps made since the first look that saw one made, over the
time since. A run is one attempt from its start, so a restart, and the time a job waited or
recovered, never counts; only a run timed over `MEASURE_OVER_S` counts, and its plan's row is
updated at most every `MEASURE_EVERY_S` (all of a look's measurements in one write). The time
includes what stalls the training loop in that run (routine saves), as the job's real pace
does.

Every run's pace is kept as well (`RunPace`: its GPU model and GPUs), plan or none: a job the
planner knows nothing of gets its speed on each GPU model it accepts from the runs of its
tenant's workloads of the same name, its own attempts among them (`measured`).
"""

from collections import defaultdict

from django.core.cache import cache
from django.db.models import Count, Max
from django.utils import timezone

from portal.workloads.models import ParallelPlan, RunPace, Workload
from scheduler import calibration

MEASURE_OVER_S = 120.0
MEASURE_EVERY_S = 120.0
KEEP = 2000  # the newest measurements the table rests on
CACHE_KEY = "wanka:calibration"


def pace(seen: dict, now: float) -> float | None:
    """The run's seconds per iteration, when it is due to be recorded, from the progress
    detector's record of the run (`seen`: its "first" and "last" looks as [time, step], the
    last being the newest that saw a step made). The window opens at the first look that saw
    a step made, so the minutes a job loads before its first step are left out."""
    (_, first), (last_at, last) = seen["first"], seen["last"]
    if last <= first:
        return None
    from_at, start = seen.setdefault("from", [last_at, last])
    if last_at - from_at < MEASURE_OVER_S or now - seen.get("measured", 0.0) < MEASURE_EVERY_S:
        return None
    seen["measured"] = now
    return (last_at - from_at) / (last - start)


def record(paces: dict[int, float]) -> None:
    """Write each workload's measured seconds per iteration on its current run's `RunPace`
    and on its latest plan (the plan that run was handed; none where no layout fit): three
    queries and two writes for any number."""
    if not paces:
        return
    now = timezone.now()
    runs = Workload.objects.filter(pk__in=paces).annotate(held=Count("allocations"))
    RunPace.objects.bulk_create(
        [
            RunPace(
                workload_id=pk,
                attempt=attempt,
                gpu_model_id=model,
                gpus=held,
                step_s=paces[pk],
                measured_at=now,
            )
            for pk, attempt, model, held in runs.values_list("pk", "attempt", "gpu_model", "held")
            if held
        ],
        update_conflicts=True,
        unique_fields=["workload", "attempt"],
        update_fields=["gpu_model", "gpus", "step_s", "measured_at"],
    )
    latest = (
        ParallelPlan.objects.filter(workload_id__in=paces)
        .values("workload_id")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    rows = [row for row in ParallelPlan.objects.filter(pk__in=list(latest)) if row.plan]
    for row in rows:
        row.measured_s, row.measured_at = paces[row.workload_id], now
    ParallelPlan.objects.bulk_update(rows, ["measured_s", "measured_at"])
    cache.delete(CACHE_KEY)


def runs() -> list[calibration.Run]:
    """The newest `KEEP` measurements as runs of the calibration: each against the model's own
    prediction for its plan (the uncalibrated one, where a factor was applied)."""
    rows = (
        ParallelPlan.objects.filter(measured_s__isnull=False)
        .order_by("-measured_at")
        .values_list(
            "plan__model",
            "plan__gpu",
            "gpus",
            "plan__predicted__iteration_s",
            "plan__calibration__uncalibrated_s",
            "measured_s",
            "measured_at",
        )[:KEEP]
    )
    return [
        calibration.Run(model, gpu, gpus, measured / (uncalibrated or predicted), at.timestamp())
        for model, gpu, gpus, predicted, uncalibrated, measured, at in rows
    ]


def factors() -> calibration.Table:
    """The calibration table: every bucket's factor and the runs it rests on. Kept in the
    process for as long as measurements take to change (the cycle asks for it every time),
    and dropped by `record` in the process that writes them."""
    return cache.get_or_set(CACHE_KEY, _table, timeout=MEASURE_EVERY_S)


def _table() -> calibration.Table:
    return calibration.table(runs(), timezone.now().timestamp())


def measured(jobs: set[tuple[int, str]]) -> dict[tuple[int, str], list[tuple[str, float]]]:
    """The measured runs of each job, keyed (tenant, name): the runs of that tenant's workloads
    of that name, as (GPU model, steps per second per GPU), newest first; one query for any
    number of jobs, none for none."""
    if not jobs:
        return {}
    rows = (
        RunPace.objects.filter(
            workload__tenant_id__in={tenant for tenant, _ in jobs},
            workload__name__in={name for _, name in jobs},
        )
        .order_by("-measured_at")
        .values_list("workload__tenant_id", "workload__name", "gpu_model__name", "gpus", "step_s")
    )
    found = defaultdict(list)
    for tenant, name, gpu, gpus, step_s in rows:
        if (tenant, name) in jobs:
            found[tenant, name].append((gpu, 1 / (step_s * gpus)))
    return found
