from django.db.models import Sum
from django.utils import timezone

from portal.workloads.choices import HOLDING
from portal.workloads.models import Allocation, UsageRecord


def gpu_hours(usage, workloads) -> float:
    """GPU-hours of finished stretches (`usage`, UsageRecords) plus what the `workloads` that
    hold GPUs now have used so far."""
    now = timezone.now()
    booked = usage.aggregate(n=Sum("gpu_hours"))["n"] or 0
    running = sum(
        w.gpus * (now - w.started_at).total_seconds() / 3600
        for w in workloads
        if w.state in HOLDING and w.started_at
    )
    return booked + running


def usage_by_queue(workloads, since, until) -> list[dict]:
    """GPUs in use now and GPU-hours used within [since, until] of the `workloads` (a
    queryset), per tenant, queue and GPU model: booked stretches (UsageRecords) pro rata for
    the part inside the window, and the GPUs held now from the later of the run's start and
    their own booking, as `allocations.book` will book them."""
    rows: dict[tuple[str, str, str], dict] = {}

    def row(tenant, queue, model):
        key = (tenant, queue, model)
        if key not in rows:
            rows[key] = {
                "tenant": tenant,
                "queue": queue,
                "gpu_model": model,
                "in_use": 0,
                "gpu_hours": 0.0,
            }
        return rows[key]

    booked = UsageRecord.objects.filter(
        workload__in=workloads, ended_at__gt=since, started_at__lt=until
    ).values_list(
        "tenant__name",
        "workload__queue__name",
        "gpu_model__name",
        "started_at",
        "ended_at",
        "gpu_hours",
    )
    for tenant, queue, model, start, end, hours in booked:
        span = (end - start).total_seconds()
        inside = (min(end, until) - max(start, since)).total_seconds()
        row(tenant, queue, model)["gpu_hours"] += hours * (inside / span if span > 0 else 1)
    now = timezone.now()
    held = Allocation.objects.filter(workload__in=workloads).values_list(
        "workload__tenant__name",
        "workload__queue__name",
        "workload__gpu_model__name",
        "created_at",
        "workload__started_at",
        "workload__admitted_at",
    )
    for tenant, queue, model, booked_at, started, admitted in held:
        entry = row(tenant, queue, model)
        entry["in_use"] += 1
        start = max(started or admitted or now, booked_at, since)
        entry["gpu_hours"] += max(0.0, (min(now, until) - start).total_seconds()) / 3600
    return sorted(rows.values(), key=lambda r: (r["tenant"], r["queue"], r["gpu_model"]))
