"""Estimated starts of pending workloads: the engine run forward from the current snapshot
(`scheduler.sim.eta`), run times guessed from each submitter's finished jobs. A Celery task
refreshes them outside the scheduling cycle, one refresh at a time across workers."""

import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

from django.utils import timezone
from redis import RedisError

from portal.core.live import publish_tenant
from portal.core.redis import client
from portal.workloads import cycle
from portal.workloads.choices import HOLDING, State
from portal.workloads.cycle import DRAFT, as_draft, build_snapshot
from portal.workloads.models import Workload
from portal.workloads.reasons import Reader
from scheduler.sim.eta import Bounds, Guess, History, estimate

LOCK = "wanka:eta:lock"
UNTIL = "wanka:eta:until"  # the last refresh's time and its `Estimates.until`, Unix times
HISTORY_JOBS = 5000  # the newest finished jobs the guesses are made from
BOUNDS = Bounds()
PREVIEW = Bounds(budget_s=1.0)  # per GPU model a job previewed accepts


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
    guesses = _guesses(runtimes(), now)
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


def _guesses(history: History, now) -> dict[int, Guess]:
    """Run-time guesses of the pending and running work, by workload id."""
    keys = Workload.objects.filter(state__in=[State.PENDING, *HOLDING]).values_list(
        "id", "submitted_by_id", "queue_id", "gpus", "started_at"
    )
    guesses = {}
    for workload_id, user, queue, gpus, started in keys:
        ran = 0.0 if started is None else (now - started).total_seconds()
        guess = history.guess((user, queue, gpus), (user, queue), user, elapsed=ran)
        if guess is not None:
            guesses[workload_id] = guess
    return guesses


def preview(workload: Workload, user_id: int | None, reader: Reader | None) -> dict:
    """`cycle.preview` of a job not yet submitted, with `models`: for one that accepts several
    GPU models, when it would start on each (`starts_by_model`); else empty."""
    now = timezone.now()
    snapshot = build_snapshot(now)
    answer = cycle.preview(workload, reader, snapshot, now)
    several = len(workload.accepts or ()) > 1
    answer["models"] = starts_by_model(workload, user_id, snapshot, now) if several else []
    return answer


def starts_by_model(workload: Workload, user_id: int | None, snapshot, now) -> list[dict]:
    """For a job not yet submitted (`cycle.as_draft`) that accepts several GPU models: per
    model, in its submitter's order, when it would start there were that its only model, as
    pending work's estimates are made (the engine run forward from `snapshot`, taken at `now`,
    within `PREVIEW`). `start` and `start_p90` are None where that is later than the run
    looked (`until`); `now`, whether the next cycle would start it there."""
    history = runtimes()
    guesses = _guesses(history, now)
    key = (user_id, workload.queue_id)
    guess = history.guess((*key, workload.gpus), key, user_id)
    if guess is not None:
        guesses[DRAFT] = guess
    draft = as_draft(workload, snapshot, now)
    starts = []
    for model in dict.fromkeys(workload.accepts):
        alone = replace(draft, gpu_model=model, accepts=())
        added = replace(snapshot, workloads=(*snapshot.workloads, alone))
        result = estimate(added, now.timestamp(), guesses, PREVIEW, clock=time.perf_counter)
        start = result.start.get(DRAFT)
        starts.append(
            {
                "gpu_model": model,
                "now": start is not None and start <= now.timestamp(),
                "start": _moment(start),
                "start_p90": _moment(result.p90.get(DRAFT)),
                "until": _moment(result.until),
            }
        )
    return starts


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
