from django.db.models import Sum
from django.utils import timezone

from portal.workloads.choices import HOLDING


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
