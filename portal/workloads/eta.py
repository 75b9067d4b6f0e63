"""Estimated starts of pending workloads: the engine run forward from the current snapshot
(`scheduler.sim.eta`), run times guessed from each submitter's finished jobs. A Celery task
refreshes them outside the scheduling cycle, one refresh at a time across workers."""

import time
from collections import defaultdict
from datetime import UTC, datetime

from django.utils import timezone
from redis import RedisError

from portal.core.live import publish_tenant
from portal.core.redis import client
from portal.workloads.choices import HOLDING, State
from portal.workloads.cycle import build_snapshot
from portal.workloads.models import Workload
from scheduler.sim.eta import Bounds, History, estimate

LOCK = "wanka:eta:lock"
UNTIL = "wanka:eta:until"  # the last refresh's time and its `Estimates.until`, Unix times
HISTORY_JOBS = 5000  # the newest finished jobs the guesses are made from
BOUNDS = Bounds()


def refresh_once() -> int | None:
    """`refresh` unless another worker is at it (then None)."""
    lock = client().lock(LOCK, timeout=60)
    if not lock.acquire(blocking=False):
        return None
    try:
        return refresh()
    finally:
        lock.release()


def refresh(now=None) -> int:
    """Estimate every pending workload's start and P90 bound and store them (None: later
    than the horizon); clear them on workloads no longer pending. Returns how many changed."""
    now = now or timezone.now()
    snapshot = build_snapshot(now)
    history = runtimes()
    keys = Workload.objects.filter(state__in=[State.PENDING, *HOLDING]).values_list(
        "id", "submitted_by_id", "queue_id", "gpus", "started_at"
    )
    guesses = {}
    for workload_id, user, queue, gpus, started in keys:
        ran = 0.0 if started is None else (now - started).total_seconds()
        guess = history.guess((user, queue, gpus), (user, queue), user, elapsed=ran)
        if guess is not None:
            guesses[workload_id] = guess
    result = estimate(snapshot, now.timestamp(), guesses, BOUNDS, clock=time.perf_counter)
    client().set(UNTIL, f"{now.timestamp()} {result.until}", ex=int(BOUNDS.horizon_s))
    changed = []
    for workload in Workload.objects.filter(state=State.PENDING).only(
        "tenant_id", "estimated_start", "estimated_start_p90"
    ):
        start = _moment(result.start.get(workload.pk))
        p90 = _moment(result.p90.get(workload.pk))
        if (workload.estimated_start, workload.estimated_start_p90) != (start, p90):
            workload.estimated_start, workload.estimated_start_p90 = start, p90
            changed.append(workload)
    changed.sort(key=lambda workload: workload.pk)  # rows locked in id order, as others do
    Workload.objects.bulk_update(changed, ["estimated_start", "estimated_start_p90"])
    _announce(changed)
    stale = Workload.objects.exclude(state=State.PENDING).exclude(estimated_start=None)
    return len(changed) + stale.update(estimated_start=None, estimated_start_p90=None)


def _announce(changed: list[Workload]) -> None:
    """Tell each tenant which of its jobs' estimates moved, in one event (their pages draw
    them again)."""
    ids = defaultdict(list)
    for workload in changed:
        ids[workload.tenant_id].append(workload.pk)
    for tenant_id, mine in ids.items():
        publish_tenant(tenant_id, "workload.estimate", {"ids": mine})


def last_refresh() -> tuple[datetime, datetime] | None:
    """When the estimates were last refreshed, and how far that refresh saw: a pending
    workload it saw without an estimate starts later (or is behind the first
    `BOUNDS.per_queue` of its queue); None when unknown."""
    try:
        seen = client().get(UNTIL)
    except RedisError:
        return None
    parts = (seen or "").split()
    if len(parts) != 2:  # none yet, or written by an older release
        return None
    at, until = parts
    return datetime.fromtimestamp(float(at), UTC), _moment(float(until))


def runtimes() -> History:
    """Run times of the newest finished jobs, by submitter, queue and GPUs."""
    history = History()
    rows = (
        Workload.objects.filter(started_at__isnull=False, finished_at__isnull=False)
        .order_by("-finished_at", "-id")
        .values_list("submitted_by_id", "queue_id", "gpus", "started_at", "finished_at")
    )[:HISTORY_JOBS]
    for user, queue, gpus, started, finished in reversed(rows):
        history.add((finished - started).total_seconds(), (user, queue, gpus), (user, queue), user)
    return history


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(round(seconds), UTC)
