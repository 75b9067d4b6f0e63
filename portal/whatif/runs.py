"""Running a what-if simulation for the portal: inputs from the run's row (or this cluster's
own nodes, queues and history), progress on the row and live to operators, the report on
disk."""

import json
import logging
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta

from django.db.models import F, Sum
from django.utils import timezone

from portal.cluster.models import GpuModel
from portal.core.live import OPS_GROUP, publish, send_now
from portal.core.redis import client
from portal.whatif.choices import ClusterSource, RunState, TraceSource
from portal.whatif.models import WhatIfRun
from scheduler.checkpointing import Policy, PolicyKind
from scheduler.engine import Node
from scheduler.engine.model import SLICES
from scheduler.mig import Profile, profiles
from scheduler.sim.defrag import Defrag, parse_when
from scheduler.sim.philly import load_philly
from scheduler.sim.runner import run
from scheduler.sim.simulator import SimConfig
from scheduler.sim.spec import ClusterSpec, SpecError, parse_spec
from scheduler.sim.synthetic import mixed_month
from scheduler.sim.trace import TraceError, TraceJob, read_csv, write_csv
from scheduler.words import phrase

log = logging.getLogger(__name__)

# How often progress is written down and pushed: a month of a 100,000-GPU site reports
# progress tens of thousands of times.
PROGRESS_EVERY_S = 0.5


def current_cluster() -> ClusterSpec:
    """This cluster as the simulator sees it: its nodes, all free, its queues and cohorts, its
    budgets with what their windows have used so far, its GPU models' memory (which names
    their MIG profiles) and their worth to fair sharing, as the engine counts it here."""
    from portal.workloads.budgets import replayed
    from portal.workloads.cycle import build_snapshot

    now = timezone.now()
    snapshot = build_snapshot(now)
    nodes = tuple(
        Node(
            id=n.id,
            name=n.name,
            gpu_model=n.gpu_model,
            datacenter=n.datacenter,
            pod=n.pod,
            leaf=n.leaf,
            gpus=n.gpus,
            free=tuple(range(n.gpus)),
            region=n.region,
        )
        for n in snapshot.nodes
    )
    return ClusterSpec(
        name="this cluster",
        nodes=nodes,
        queues=_plain(snapshot.queues),
        cohorts=snapshot.cohorts,
        budgets=replayed(now),
        memory_gb=tuple(GpuModel.objects.order_by("name").values_list("name", "memory_gb")),
        worth=snapshot.worth,
    )


def _plain(queues) -> tuple:
    """Queues by the names traces use: `llm` where only one tenant has a queue of that name,
    `acme/llm` where several do."""
    plain = Counter(q.name.split("/", 1)[-1] for q in queues)
    return tuple(
        replace(q, name=q.name.split("/", 1)[-1]) if plain[q.name.split("/", 1)[-1]] == 1 else q
        for q in queues
    )


class Mismatch(TraceError):
    """A trace that asks for queues or GPU models its cluster lacks: it could never run."""


def inputs(whatif: WhatIfRun) -> tuple[list[TraceJob], ClusterSpec]:
    """The trace and cluster the run names. Raises TraceError or SpecError naming the fault,
    Mismatch when the trace does not fit the cluster."""
    own = None
    if whatif.trace in (TraceSource.CSV, TraceSource.HISTORY) and (
        whatif.cluster == ClusterSource.TRACE
    ):
        raise SpecError("a trace CSV needs a cluster: this cluster or a spec JSON")
    if whatif.trace == TraceSource.PHILLY:
        jobs, own = load_philly()
    elif whatif.trace == TraceSource.SYNTHETIC:
        jobs, own = mixed_month(
            gpus=whatif.gpus or 100_000, days=whatif.days or 30.0, seed=whatif.seed
        )
    if whatif.cluster == ClusterSource.CURRENT:
        spec = current_cluster()
    elif whatif.cluster == ClusterSource.JSON:
        try:
            spec = parse_spec(json.loads(whatif.cluster_json))
        except json.JSONDecodeError as error:
            raise SpecError(
                f"cluster spec: not JSON ({error.msg} at line {error.lineno})"
            ) from None
    else:
        spec = own
    if whatif.trace in (TraceSource.CSV, TraceSource.HISTORY):  # uploaded, or `take_history`'s
        jobs = read_csv(whatif.trace_csv.splitlines(), dict(spec.memory_gb))
    if whatif.days and whatif.trace in (TraceSource.PHILLY, TraceSource.CSV):
        first = min((job.submit_s for job in jobs), default=0.0)
        jobs = [job for job in jobs if job.submit_s - first < whatif.days * 86400]
    check_fits(jobs, spec)
    return jobs, spec


def check_fits(jobs: list[TraceJob], spec: ClusterSpec) -> None:
    """Raise Mismatch when a job names a queue the cluster lacks, or a GPU model of which its
    queue's region has no nodes (the engine runs a queue's work only in its own region)."""
    missing = sorted({job.queue for job in jobs} - set(spec.queue_ids))
    if missing:
        has = ", ".join(sorted(spec.queue_ids)[:10]) or "none"
        raise Mismatch(
            f"the trace submits to queues the cluster lacks: {_some(missing)} (it has {has})"
        )
    region = {queue.name: queue.region for queue in spec.queues}
    models = defaultdict(set)
    for node in spec.nodes:
        models[node.region].add(node.gpu_model)
    lacking = sorted(
        {
            f"{job.gpu_model} in {job.queue}"
            for job in jobs
            if job.gpu_model not in models[region[job.queue]]
        }
    )
    if lacking:
        has = ", ".join(sorted(spec.capacity)) or "none"
        raise Mismatch(
            f"the trace asks for GPU models its queues' regions lack: {_some(lacking)} "
            f"(the cluster has {has})"
        )


def _some(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if names[5:] else "")


HISTORY_DAYS = 7  # a history run's window when the form leaves it empty
MAX_HISTORY_DAYS = 30  # the longest window the form takes
TYPICAL_S = 3600.0  # a pending job's run time when nothing says it and no job finished


def take_history(whatif: WhatIfRun, now=None) -> int:
    """Export this cluster's last `whatif.days` days (default `HISTORY_DAYS`) into the run's
    trace CSV, once, when the run is asked for: a worker that runs it later, or again, replays
    the same jobs. Its own cluster is this one. Returns how many jobs were exported."""
    whatif.days = whatif.days or HISTORY_DAYS
    if whatif.cluster == ClusterSource.TRACE:
        whatif.cluster = ClusterSource.CURRENT
    jobs = history(whatif.days, now)
    whatif.trace_csv = write_csv(jobs)
    return len(jobs)


def history(days: float, now=None) -> list[TraceJob]:
    """The workloads submitted to this cluster in the `days` before `now` (default now), as a
    trace for `current_cluster()`: submit times in seconds from the window's start, the GPUs
    it asked for (an elastic job's most, and its fewest), GPU model, queue (named as
    `current_cluster` names it), priority, checkpoint policy, and its final state as status.

    Its run time (`duration_s`, the time on its whole gang):

    - one that ended after running: the GPU-hours booked to it over its GPUs, so that
      preemptions' gaps do not count and a shrunk stretch counts in proportion (work redone
      after a fault does count); its end less its first start when nothing was booked;
    - one that ended without running (cancelled or failed while pending): left out, it held
      nothing;
    - one still pending or running: the run time it says it needs (its simulated duration, or
      else its time limit), else the median of the window's ended jobs (an hour when none
      ended); at least as long as it has run so far.
    """
    from portal.quotas.engine import queues
    from portal.workloads.choices import TERMINAL
    from portal.workloads.models import UsageRecord, Workload

    now = now or timezone.now()
    since = now - timedelta(days=days)
    window = Workload.objects.filter(submitted_at__gte=since, submitted_at__lt=now)
    booked = dict(
        UsageRecord.objects.filter(workload__in=window)
        .values("workload_id")
        .annotate(hours=Sum("gpu_hours"))
        .values_list("workload_id", "hours")
    )
    names = {queue.id: queue.name for queue in _plain(queues())}
    rows = list(
        window.order_by("submitted_at", "id").values(
            "id", "queue_id", "gpu_model__name", "gpus", "min_gpus", "max_gpus", "priority",
            "state", "submitted_at", "started_at", "finished_at", "simulated_duration_s",
            "time_limit_s", "checkpoint_policy", "checkpoint_interval_s", "slices", "accepts",
            "mig", "gpu_model__memory_gb", "movable",
        )
    )  # fmt: skip
    ended = {
        row["id"]: _ran_s(row, booked.get(row["id"])) for row in rows if row["state"] in TERMINAL
    }
    typical = (
        statistics.median([s for s in ended.values() if s]) if any(ended.values()) else TYPICAL_S
    )
    jobs = []
    for row in rows:
        if row["state"] in TERMINAL:
            duration = ended[row["id"]]
        else:
            ran = (now - row["started_at"]).total_seconds() if row["started_at"] else 0.0
            duration = max(ran, row["simulated_duration_s"] or row["time_limit_s"] or typical)
        if duration:
            jobs.append(
                _trace_job(row, (row["submitted_at"] - since).total_seconds(), duration, names)
            )
    return jobs


def _ran_s(row: dict, gpu_hours: float | None) -> float:
    """How long an ended workload ran on its whole gang (see `history`); 0 if it never ran."""
    if gpu_hours:  # a share's and a MIG job's are their share of their GPU's
        mig = _mig(row)
        held = row["slices"] / SLICES if row["slices"] else row["max_gpus"] or row["gpus"]
        return gpu_hours * 3600 / (mig.charge if mig else held)
    if row["started_at"] and row["finished_at"]:
        return max(0.0, (row["finished_at"] - row["started_at"]).total_seconds())
    return 0.0


def _trace_job(row: dict, submit_s: float, duration_s: float, names: dict[int, str]) -> TraceJob:
    gpus, model = row["max_gpus"] or row["gpus"], row["gpu_model__name"]
    return TraceJob(
        id=row["id"],
        submit_s=submit_s,
        gpus=gpus,
        gpu_model=model,
        duration_s=duration_s,
        queue=names[row["queue_id"]],
        priority=row["priority"],
        status=row["state"],
        min_gpus=row["min_gpus"] if row["min_gpus"] and row["min_gpus"] < gpus else None,
        checkpoint=Policy(PolicyKind(row["checkpoint_policy"]), row["checkpoint_interval_s"]),
        slices=row["slices"],
        # The models it accepts, the one it ran on first (its run time is from there); no
        # speeds, so the same run time on each.
        accepts=tuple(dict.fromkeys((model, *row["accepts"]))) if row["accepts"] else (),
        mig=_mig(row),
        movable=row["movable"],
    )


def _mig(row: dict) -> Profile | None:
    """A MIG workload's profile; None for another, or where its model no longer has it (its
    memory changed since): it then replays on a whole GPU, as the portal charges it."""
    if not row["mig"]:
        return None
    return profiles(row["gpu_model__name"], row["gpu_model__memory_gb"]).get(row["mig"])


def service_share(whatif: WhatIfRun) -> float | None:
    """The share of the cluster the added service's peak needs, None without one; the runner
    then stops the run a day after the trace's first submission (see `scheduler.sim.runner`)."""
    return whatif.service_percent / 100 if whatif.service_percent else None


def defragmentation(whatif: WhatIfRun) -> Defrag | None:
    """The run's scheduled defragmentation of every pod, None where it has none; ValueError
    naming what does not read."""
    if not whatif.defrag:
        return None
    scattered, at = parse_when(whatif.defrag)
    return Defrag((), whatif.defrag_moves, scattered, at)


def execute(run_id: int) -> None:
    """Run the simulation of a pending run (a second worker given the same run does nothing).
    While it runs, its worker keeps a liveness key fresh, so that `requeue_stale` can tell a
    run whose worker died from a long one."""
    with alive(run_id) as claimed:
        if not claimed:
            return
        whatif = WhatIfRun.objects.get(pk=run_id)
        try:
            jobs, spec = inputs(whatif)
            results = run(
                jobs,
                spec,
                whatif.policies,
                config=SimConfig(seed=whatif.seed, defrag=defragmentation(whatif)),
                on_progress=_reporter(run_id),
                service_share=service_share(whatif),
            )
        except (TraceError, SpecError, ValueError) as error:
            _finish(run_id, RunState.FAILED, str(error)[:300])
            return
        except Exception:
            log.exception("what-if %s failed", run_id)
            _finish(run_id, RunState.FAILED, SIM_FAILED)
            raise
        ran = RAN.format(jobs=f"{len(jobs):,}", gpus=f"{spec.gpus:,}")
        _finish(run_id, RunState.DONE, ran, results=results)


# Where a run stands, as its page shows it.
LOADING = phrase("loading the inputs")
REQUEUED = phrase("its worker stopped; queued to run again")
SIM_FAILED = phrase("the simulation failed; the worker's log says why")
RAN = phrase("{jobs} jobs on {gpus} GPUs")
ALIVE = "wanka:whatif:alive:"  # Redis key per running run, kept fresh by its worker
ALIVE_TTL_S = 30
REFRESH_S = 5


@contextmanager
def alive(run_id: int) -> Iterator[bool]:
    """Claim a pending run and keep its liveness key fresh until the block ends; yields
    whether the claim was won."""
    redis, key = client(), f"{ALIVE}{run_id}"
    redis.set(key, 1, ex=ALIVE_TTL_S)  # before the claim: a sweep never sees it keyless
    claimed = WhatIfRun.objects.filter(pk=run_id, state=RunState.PENDING).update(
        state=RunState.RUNNING, started_at=timezone.now(), message=LOADING
    )
    done = threading.Event()
    if claimed:
        threading.Thread(target=_keep_alive, args=(key, done), daemon=True).start()
    try:
        yield bool(claimed)
    finally:
        done.set()
        redis.delete(key)


def _keep_alive(key: str, done: threading.Event) -> None:
    while not done.wait(REFRESH_S):
        client().set(key, 1, ex=ALIVE_TTL_S)


def requeue_stale() -> list[int]:
    """Runs marked running whose worker is gone (no liveness key): back to pending, to be run
    again. Returns their ids."""
    redis = client()
    running = WhatIfRun.objects.filter(state=RunState.RUNNING).values_list("pk", flat=True)
    stale = [pk for pk in running if not redis.exists(f"{ALIVE}{pk}")]
    return [
        pk
        for pk in stale
        if WhatIfRun.objects.filter(pk=pk, state=RunState.RUNNING).update(
            state=RunState.PENDING, message=REQUEUED
        )
    ]


def _reporter(run_id: int):
    last = 0.0

    def report(fraction: float, message: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < PROGRESS_EVERY_S:
            return
        last = now
        WhatIfRun.objects.filter(pk=run_id).update(progress=fraction, message=message[:300])
        send_now(
            OPS_GROUP,
            {
                "type": "live.event",
                "event": "whatif.progress",
                "payload": {
                    "id": run_id,
                    "state": RunState.RUNNING,
                    "progress": fraction,
                    "message": message,
                },
            },
        )

    return report


def _finish(run_id: int, state: RunState, message: str, results=None) -> None:
    WhatIfRun.objects.filter(pk=run_id).update(
        state=state,
        message=message,
        results=results,
        finished_at=timezone.now(),
        progress=1.0 if state == RunState.DONE else F("progress"),
    )
    publish(
        OPS_GROUP,
        "whatif.progress",
        {
            "id": run_id,
            "state": state,
            "message": message,
            "progress": 1.0 if state == RunState.DONE else None,
        },
    )
