"""Effective training time from the database: each workload's events, checkpoint stalls and
recovery losses fed to `scheduler.ettr`, per job, per tenant and cluster-wide, over any window.
Three queries for any number of workloads."""

from collections import defaultdict
from datetime import datetime

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from portal.workloads.models import Checkpoint, Recovery, Workload, WorkloadEvent
from scheduler.ettr import STATE_PHASES, Phase, Span, pieces, ratio, split, totals


def timelines(workloads: list[Workload], until: datetime | None = None) -> dict[int, list[Span]]:
    """Each workload's spans, in seconds since the epoch."""
    end = (until or timezone.now()).timestamp()
    ids = [w.pk for w in workloads]
    states = defaultdict(list)
    losses = defaultdict(list)
    for workload_id, at, state, lost in (
        WorkloadEvent.objects.filter(workload_id__in=ids)
        .order_by("at", "id")
        .values_list("workload_id", "at", "to_state", "lost_s")
    ):
        states[workload_id].append((at.timestamp(), state))
        if lost > 0:  # a preemption with no save since: the work before it is redone
            losses[workload_id].append((at.timestamp(), lost))
    stalls = defaultdict(list)
    for workload_id, created, duration, stall in Checkpoint.objects.filter(
        workload_id__in=ids, stall_s__gt=0
    ).values_list("workload_id", "created_at", "duration_s", "stall_s"):
        stalls[workload_id].append((created.timestamp() - duration, stall))
    for workload_id, started, fault_at, lost in Recovery.objects.filter(
        workload_id__in=ids, lost_s__gt=0
    ).values_list("workload_id", "started_at", "fault__occurred_at", "lost_s"):
        losses[workload_id].append(((fault_at or started).timestamp(), lost))
    return {
        w.pk: split(
            [(w.submitted_at.timestamp(), "pending"), *states[w.pk]],
            end,
            stalls[w.pk],
            losses[w.pk],
        )
        for w in workloads
    }


def job_report(workload: Workload) -> dict:
    """One workload's ETTR, seconds per phase and spans, for its page and the API."""
    spans = timelines([workload])[workload.pk]
    seconds = totals(spans)
    return {
        "ettr": ratio(seconds),
        "seconds": seconds,
        "spans": [{"phase": s.phase, "start": s.start, "end": s.end} for s in spans],
    }


def _active(workloads, since: datetime, until: datetime) -> list[Workload]:
    """The workloads that were in the system during [since, until) and ever left the queue
    (before their first admission a job has no ETTR)."""
    left_the_queue = WorkloadEvent.objects.filter(
        workload=OuterRef("pk"), to_state__in=[s for s in STATE_PHASES if s != "pending"]
    )
    return list(
        workloads.select_related(None)
        .select_related("gpu_model")  # its name and memory: a MIG job's charge
        .filter(submitted_at__lt=until)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))
        .filter(Exists(left_the_queue))
        .only(
            "pk", "gpus", "slices", "mig", "submitted_at", "gpu_model__name", "gpu_model__memory_gb"
        )
    )


def _aggregate(jobs: list[Workload], spans: dict[int, list[Span]], lo: float, hi: float) -> dict:
    seconds = dict.fromkeys(Phase, 0.0)
    useful = held = 0.0
    counted = 0
    for job in jobs:
        mine = totals(spans[job.pk], lo, hi)
        if not sum(mine.values()):
            continue
        counted += 1
        for phase, value in mine.items():
            seconds[phase] += value
        useful += job.charged * mine[Phase.PRODUCTIVE]
        held += job.charged * (sum(mine.values()) - mine[Phase.QUEUED])
    return {
        "jobs": counted,
        "ettr": ratio(seconds),
        "goodput": useful / held if held else None,
        "seconds": seconds,
    }


def window_report(workloads, since: datetime, until: datetime) -> dict:
    """ETTR and goodput over [since, until) of the given workloads (a queryset): productive
    time over wall time since first admission, and productive GPU-hours over GPU-hours held."""
    jobs = _active(workloads, since, until)
    spans = timelines(jobs, until)
    return {
        "since": since,
        "until": until,
        **_aggregate(jobs, spans, since.timestamp(), until.timestamp()),
    }


def series(workloads, since: datetime, until: datetime, buckets: int = 24) -> list[dict]:
    """ETTR and goodput per equal slice of [since, until): the cluster's or a tenant's over
    time, each job's spans split over the slices in one pass."""
    jobs = _active(workloads, since, until)
    spans = timelines(jobs, until)
    lo, width = since.timestamp(), (until - since).total_seconds() / buckets
    seconds = [dict.fromkeys(Phase, 0.0) for _ in range(buckets)]
    useful, held, counted = [0.0] * buckets, [0.0] * buckets, [0] * buckets
    for job in jobs:
        touched = set()
        for i, phase, part in pieces(spans[job.pk], lo, width, buckets):
            touched.add(i)
            seconds[i][phase] += part
            if phase == Phase.PRODUCTIVE:
                useful[i] += job.charged * part
            if phase != Phase.QUEUED:
                held[i] += job.charged * part
        for i in touched:
            counted[i] += 1
    return [
        {
            "start": lo + i * width,
            "ettr": ratio(seconds[i]),
            "goodput": useful[i] / held[i] if held[i] else None,
            "jobs": counted[i],
        }
        for i in range(buckets)
    ]
