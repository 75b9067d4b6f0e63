"""GPU-hours: the stretches booked as GPUs are freed (UsageRecords) and the GPUs held now, over
any window, grouped as a report asks and priced at the GPU models' rates."""

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from math import ceil

from django.db.models import (
    Case,
    DateTimeField,
    ExpressionWrapper,
    F,
    FloatField,
    Q,
    Sum,
    When,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Substr
from django.utils import timezone

from portal.cluster.summary import held_eighths
from portal.quotas.models import GpuRate, PriorityFactor
from portal.workloads.models import Allocation, UsageRecord
from scheduler.engine.model import SLICES
from scheduler.mig import COMPUTE_SLICES, MEMORY_SLOTS

# What usage can be grouped by: paths from a workload.
KEYS = {
    "tenant": "tenant__name",
    "queue": "queue__name",
    "gpu_model": "gpu_model__name",
    "user": "submitted_by__username",
    "priority": "priority",
    "kind": "kind",
    "tenant_id": "tenant_id",
    "queue_id": "queue_id",
}
# What an allocation takes of its GPU, in GPUs: a whole GPU, a share's eighths, a MIG
# instance's memory slots (of eight), so that a GPU's bookings never pass one.
OCCUPIED = ExpressionWrapper(Cast(held_eighths(), FloatField()) / SLICES, output_field=FloatField())
# What an allocation is charged, in GPUs, as quota, budgets and bills count it: what it
# occupies, but a MIG instance its profile's charge (`scheduler.mig.Profile.charge`: the
# larger of its compute sevenths, the first digit of "3g.40gb", and its memory slots).
CHARGED = Case(
    When(workload__mig="", then=OCCUPIED),
    default=Greatest(
        Cast(Substr("workload__mig", 1, 1), FloatField()) / COMPUTE_SLICES,
        Cast("slices", FloatField()) / MEMORY_SLOTS,
    ),
    output_field=FloatField(),
)
REPORT_KEYS = ("tenant", "queue", "gpu_model", "user")  # what people group reports by
BY_QUEUE = ("tenant", "queue", "gpu_model")


def gpu_hours(usage, workloads) -> float:
    """GPU-hours of finished stretches (`usage`, UsageRecords) plus what the GPUs the
    `workloads` hold now have used so far."""
    return booked(usage) + held_now(workloads)[1]


def booked(usage) -> float:
    """GPU-hours of finished stretches (`usage`, UsageRecords)."""
    return usage.aggregate(n=Sum("gpu_hours"))["n"] or 0.0


def held_now(workloads) -> tuple[float, float]:
    """GPUs the `workloads` hold now, each counted (a share as its share; not those they asked
    for), and the GPU-hours those have used so far."""
    rows = list(held(Allocation.objects.filter(workload__in=workloads)))
    return sum(gpus for *_, gpus in rows), sum(hours for *_, hours, _ in rows)


def held(allocations, keys=(), now=None):
    """(values of `keys`, start, end, GPU-hours, GPUs) of the GPUs held now, each from the
    later of its run's start and its own booking until now, as `allocations.book` will book
    it: in one query, those booked before their run started summed per workload, the others
    (a grow's, a spare's) per booking."""
    now = now or timezone.now()
    paths = _paths(keys)
    run = Coalesce("workload__started_at", "workload__admitted_at")
    begun = Case(
        When(workload__started_at=None, workload__admitted_at=None, then=None),  # from now
        When(created_at__lte=run, then=run),
        default=F("created_at"),
        output_field=DateTimeField(),
    )
    rows = (
        allocations.annotate(begun=begun)
        .values("workload_id", *paths, "begun")
        .annotate(charged=Sum(CHARGED))
        .order_by()
        .values_list("workload_id", *paths, "begun", "charged")
    )
    for _, *values, begun_at, charged in rows:
        begun_at = begun_at or now
        gpus = as_gpus(charged)
        yield tuple(values), begun_at, now, gpus * (now - begun_at).total_seconds() / 3600, gpus


def as_gpus(gpus: float) -> int | float:
    """GPUs summed (`CHARGED`, `OCCUPIED`): a whole number an int (as whole GPUs always were;
    seven sevenths sum to a hair over one)."""
    whole = round(gpus)
    return whole if abs(gpus - whole) < 1e-9 else gpus


def _paths(keys, booked: bool = False) -> list[str]:
    """Paths to `keys` from an allocation, or from a UsageRecord (`booked`): a booked stretch
    is of the GPU model it ran on, which a workload that moved to another model no longer
    names."""
    return [
        "gpu_model__name" if booked and key == "gpu_model" else f"workload__{KEYS[key]}"
        for key in keys
    ]


def _records(workloads, since, until):
    """The booked stretches of the `workloads` (a queryset) that overlap [since, until]."""
    return UsageRecord.objects.filter(
        workload__in=workloads, ended_at__gt=since, started_at__lt=until
    )


def _stretches(workloads, since, until, keys, holding=None):
    """(key values, start, end, GPU-hours, GPUs held now) of each booked stretch of the
    `workloads` that overlaps [since, until], and of the GPUs they hold now (or `holding`,
    `held`'s rows for them)."""
    paths = _paths(keys, booked=True)
    booked = _records(workloads, since, until)
    for *values, start, end, hours in booked.values_list(
        *paths, "started_at", "ended_at", "gpu_hours"
    ):
        yield tuple(values), start, end, hours, 0
    if holding is None:
        holding = held(Allocation.objects.filter(workload__in=workloads), keys)
    yield from holding


def _inside(start, end, hours, since, until) -> float:
    """The part of a stretch's GPU-hours inside [since, until], pro rata."""
    span = (end - start).total_seconds()
    if span <= 0:
        return hours if since < end and start < until else 0.0
    inside = (min(end, until) - max(start, since)).total_seconds()
    return hours * max(0.0, inside) / span


def usage_rows(workloads, since, until, keys=BY_QUEUE, now=None) -> list[dict]:
    """GPUs held now (`in_use`) and GPU-hours used within [since, until] (`gpu_hours`) of the
    `workloads` (a queryset), one row per value of `keys`: booked stretches (summed by the
    database where they lie wholly inside the window, pro rata where they straddle an end)
    and the GPUs held `now` (default: now)."""
    return usage_windows(workloads, [since], until, keys, now)[since]


def usage_windows(workloads, sinces, until, keys=BY_QUEUE, now=None, holding=None) -> dict:
    """`usage_rows` of several windows ending at `until` (this week, this month), by their
    start: the GPUs held now are read once for all of them (or given, as `holding`: the rows
    of `held` for these `workloads` and `keys`)."""
    if not sinces:
        return {}
    paths = _paths(keys, booked=True)
    if holding is None:
        holding = list(held(Allocation.objects.filter(workload__in=workloads), keys, now))
    windows = {}
    for since in sinces:
        rows: dict[tuple, dict] = {}

        def add(values, hours, gpus=0, rows=rows):
            row = rows.get(values)
            if row is None:
                row = rows[values] = {**dict(zip(keys, values, strict=True)), "in_use": 0}
                row["gpu_hours"] = 0.0
            row["in_use"] += gpus
            row["gpu_hours"] += hours

        booked = _records(workloads, since, until)
        inside = Q(started_at__gte=since, ended_at__lte=until)
        summed = booked.filter(inside).values(*paths).annotate(hours=Sum("gpu_hours")).order_by()
        for *values, hours in summed.values_list(*paths, "hours"):
            add(tuple(values), hours)
        straddling = booked.exclude(inside).values_list(
            *paths, "started_at", "ended_at", "gpu_hours"
        )
        for *values, start, end, hours in straddling:
            add(tuple(values), _inside(start, end, hours, since, until))
        for values, start, end, hours, gpus in holding:
            add(values, _inside(start, end, hours, since, until), gpus)
        windows[since] = [rows[key] for key in sorted(rows, key=_order)]
    return windows


def _order(values: tuple) -> list[str]:
    return ["" if value is None else str(value) for value in values]


def prices() -> tuple[dict[str, float], dict[int, float]]:
    """The price of a GPU-hour per GPU model (0 where none is set) and the factor per
    priority class (1 where none is set)."""
    rates = GpuRate.objects.values_list("gpu_model__name", "price")
    return {model: float(price) for model, price in rates}, dict(
        PriorityFactor.objects.values_list("priority", "factor")
    )


def _priced(group_by) -> tuple[str, ...]:
    """The keys a report of `group_by` reads: also those its prices depend on."""
    return (*group_by, *(key for key in ("gpu_model", "priority") if key not in group_by))


def report(workloads, since, until, group_by=BY_QUEUE, now=None, holding=None) -> list[dict]:
    """`usage_rows` grouped by `group_by`, each row with its `cost`: GPU-hours x the GPU
    model's price x the priority class's factor, at today's prices. A job whose submitter is
    gone counts under user "". `holding`: `held`'s rows for the `workloads`, when read."""
    rates, factors = prices()
    rows: dict[tuple, dict] = {}
    windows = usage_windows(workloads, [since], until, _priced(group_by), now, holding)
    for fine in windows[since]:
        key = tuple("" if fine[k] is None else fine[k] for k in group_by)
        row = rows.get(key)
        if row is None:
            row = rows[key] = {**dict(zip(group_by, key, strict=True)), "in_use": 0}
            row.update(gpu_hours=0.0, cost=0.0)
        row["in_use"] += fine["in_use"]
        row["gpu_hours"] += fine["gpu_hours"]
        price = rates.get(fine["gpu_model"], 0.0) * factors.get(fine["priority"], 1.0)
        row["cost"] += fine["gpu_hours"] * price
    return list(rows.values())


def report_and_series(workloads, since, until, group_by, step: timedelta):
    """`report` and the `series` of its first key, for the usage page: the GPUs held now are
    read once for both."""
    now = timezone.now()
    holding = list(held(Allocation.objects.filter(workload__in=workloads), _priced(group_by), now))
    first = [((values[0],), *rest) for values, *rest in holding]
    return (
        report(workloads, since, until, group_by, now, holding),
        series(workloads, since, until, group_by[0], step, first),
    )


def series(workloads, since, until, key: str, step: timedelta, holding=None) -> dict:
    """GPU-hours within [since, until] per slice of `step` (whole hours or days of UTC) and
    value of `key`, for charts: `{"starts": [slice starts], "series": {value: [GPU-hours]}}`.
    A stretch's first and last slices get their part of it; the whole slices between them,
    the same share each, are added through a difference array, so a long stretch costs no
    more than a short one. `holding`: `held`'s rows by `key`, when read."""
    origin = datetime.fromtimestamp(
        since.timestamp() // step.total_seconds() * step.total_seconds(), UTC
    )
    count = max(1, ceil((until - origin) / step))
    starts = [origin + i * step for i in range(count)]
    found: dict[str, list[float]] = defaultdict(lambda: [0.0] * count)
    steps: dict[str, list[float]] = defaultdict(lambda: [0.0] * (count + 1))
    for (value,), start, end, hours, _ in _stretches(workloads, since, until, (key,), holding):
        name = "" if value is None else str(value)
        first = max(0, int((start - origin) / step))
        last = min(count - 1, int((end - origin) / step))
        ends = range(first, last + 1) if last - first < 2 else (first, last)
        for i in ends:
            part = _inside(start, end, hours, max(starts[i], since), min(starts[i] + step, until))
            found[name][i] += part
        if last - first >= 2:  # whole slices, all inside [since, until] and the stretch
            share = hours * (step / (end - start))
            steps[name][first + 1] += share
            steps[name][last] -= share
    for name, changes in steps.items():
        level = 0.0
        for i in range(count):
            level += changes[i]
            found[name][i] += level
    return {"starts": starts, "series": dict(sorted(found.items()))}


def tide(workloads, since, until, step: timedelta = timedelta(minutes=15)) -> dict:
    """GPUs the `workloads` held on average per slice of `step`, inference apart from the rest
    (training and fine-tuning): `{"starts": [...], "inference": [...], "training": [...]}`."""
    hours = series(workloads, since, until, "kind", step)
    per_slice = step.total_seconds() / 3600
    gpus = {kind: [h / per_slice for h in values] for kind, values in hours["series"].items()}
    zero = [0.0] * len(hours["starts"])
    training = [sum(v) for v in zip(*(gpus.get(k, zero) for k in ("training", "sft")), strict=True)]
    return {
        "starts": hours["starts"],
        "inference": gpus.get("inference", zero),
        "training": training,
    }
