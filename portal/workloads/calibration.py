"""The fleet's measurements of its jobs' iteration times, and the calibration table they make
(`scheduler.calibration`): what a job's plan predicts is corrected by what the jobs of its
model family measured on the same GPUs at about its scale.

A job's seconds per iteration are measured from the training steps it reports in every
heartbeat (the contract's progress file), by the progress detector's looks at its current run
(`portal.agents.progress`): the steps made since the first look that saw one made, over the
time since. A run is one attempt from its start, so a restart, and the time a job waited or
recovered, never counts; only a run timed over `MEASURE_OVER_S` counts, and its plan's row is
updated at most every `MEASURE_EVERY_S`. The time includes what stalls the training loop in
that run (routine saves), as the job's real pace does.
"""

from django.utils import timezone

from portal.workloads.models import ParallelPlan, Workload
from scheduler import calibration

MEASURE_OVER_S = 120.0
MEASURE_EVERY_S = 120.0
KEEP = 2000  # the newest measurements the table rests on: one cheap query per cycle


def measure(workload: Workload, seen: dict, now: float) -> None:
    """Record the run's seconds per iteration on the workload's latest plan, from the progress
    detector's record of the run (`seen`: its "first" and "last" looks as [time, step], the
    last being the newest that saw a step made). The window opens at the first look that saw
    a step made, so the minutes a job loads before its first step are left out."""
    (_, first), (last_at, last) = seen["first"], seen["last"]
    if last <= first:
        return
    from_at, start = seen.setdefault("from", [last_at, last])
    if last_at - from_at < MEASURE_OVER_S or now - seen.get("measured", 0.0) < MEASURE_EVERY_S:
        return
    seen["measured"] = now
    latest = ParallelPlan.objects.filter(workload=workload).order_by("-id").first()
    if latest is not None and latest.plan:
        latest.measured_s = (last_at - from_at) / (last - start)
        latest.measured_at = timezone.now()
        latest.save(update_fields=["measured_s", "measured_at"])


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
    """The calibration table now: every bucket's factor and the runs it rests on."""
    return calibration.table(runs(), timezone.now().timestamp())
