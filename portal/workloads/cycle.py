"""One scheduling cycle: snapshot the database, ask the engine for a plan, apply it.

`run_cycles` runs them one at a time under a Redis lock, for the `run_cycle` Celery task.
"""

import logging
import threading
import time
from collections import defaultdict
from dataclasses import replace

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from portal.cluster.choices import Health
from portal.cluster.models import Gpu, GpuModel, Node
from portal.core import measure
from portal.core.redis import client
from portal.quotas import engine as quota_engine
from portal.workloads import allocations, budgets, defrag, lifecycle, parallel, preemption, words
from portal.workloads import calibration as fleet
from portal.workloads.choices import (
    HOLDING,
    CheckpointPolicy,
    CheckpointStatus,
    RecoveryOutcome,
    RecoveryStep,
    State,
    Topology,
)
from portal.workloads.desired import nodes_changed
from portal.workloads.models import (
    Allocation,
    Checkpoint,
    IllegalTransition,
    Recovery,
    Workload,
    transition,
)
from portal.workloads.reasons import Reader
from scheduler import calibration, engine, mig

log = logging.getLogger(__name__)

LEVELS = {
    Topology.NODE: engine.TopologyLevel.NODE,
    Topology.LEAF: engine.TopologyLevel.LEAF,
    Topology.POD: engine.TopologyLevel.POD,
    Topology.DATACENTER: engine.TopologyLevel.DATACENTER,
    Topology.ANY: engine.TopologyLevel.ANY,
}


# A recovering workload's GPUs are spoken for: the engine must not pick it as a victim.
UNPREEMPTIBLE = 2**31


# Restarts on other GPUs the engine decided: a job is resized (or moved) again only so often.
RESIZED = [
    RecoveryOutcome.SHRUNK,
    RecoveryOutcome.GROWN,
    RecoveryOutcome.MOVED,
    RecoveryOutcome.DEFRAGMENTED,
]


def build_snapshot(now=None) -> engine.Snapshot:
    """The engine's view of the cluster at `now` (default: now): a handful of queries,
    whatever the cluster's size."""
    busy = defaultdict(set)
    placements = defaultdict(lambda: defaultdict(list))
    for workload_id, node_id, index in Allocation.objects.order_by(
        "workload_id", "node_rank", "gpu_index"
    ).values_list("workload_id", "node_id", "gpu_index"):
        busy[node_id].add(index)
        placements[workload_id][node_id].append(index)
    leaving = _leaving(placements)
    columns = (
        "id",
        "name",
        "gpu_model__name",
        "gpu_count",
        "health",
        "connected",
        "spare",
        "single_tenant",
        "leaf__name",
        "leaf__pod__name",
        "leaf__pod__datacenter__name",
        "leaf__pod__datacenter__region__name",
    )
    rows = list(Node.objects.values_list(*columns))
    # Whose work each single-tenant node holds: a query only where there are such nodes.
    single = [row[0] for row in rows if row[7]]
    tenant_on = dict(
        Allocation.objects.filter(node_id__in=single).values_list("node_id", "workload__tenant_id")
        if single
        else ()
    )
    # Tuples, not model instances: at 12,500 nodes the difference is most of the load time.
    nodes = tuple(
        engine.Node(
            id=node_id,
            name=name,
            gpu_model=model,
            gpus=gpus,
            region=region,
            datacenter=dc,
            pod=f"{dc}/{pod}",
            leaf=f"{dc}/{pod}/{leaf}",
            free=tuple(i for i in range(gpus) if i not in busy[node_id]),
            single_tenant=single,
            tenant=tenant_on.get(node_id),
            # Hot spares wait for recoveries (`recovery._spare_near`); no cycle places work there.
            schedulable=health == Health.READY and up and not spare,
        )
        for node_id, name, model, gpus, health, up, spare, single, leaf, pod, dc, region in rows
    )
    budget, factors = parallel.Budget(), fleet.factors()
    resized = dict(
        Recovery.objects.filter(outcome__in=RESIZED)
        .values("workload_id")
        .annotate(at=Max("started_at"))
        .values_list("workload_id", "at")
    )
    saved = dict(
        Checkpoint.objects.filter(status=CheckpointStatus.COMPLETE)
        .values("workload_id")
        .annotate(at=Max("created_at"))
        .values_list("workload_id", "at")
    )
    rows = list(
        Workload.objects.filter(state__in=[State.PENDING, *HOLDING]).order_by("id").values(*COLUMNS)
    )
    measured = fleet.measured({job for w in rows if len(w["accepts"]) > 1 and (job := _job(w))})
    mig_profiles = _mig_profiles()
    workloads = leaving + tuple(
        _engine_workload(
            w,
            placements[w["id"]],
            budget,
            saved.get(w["id"]),
            resized.get(w["id"]),
            factors,
            mig_profiles,
            measured.get(_job(w), ()),
        )
        for w in rows
    )
    now = now or timezone.now()
    return engine.Snapshot(
        nodes=nodes,
        queues=quota_engine.queues(),
        workloads=workloads,
        cohorts=quota_engine.cohorts(),
        grow_every_s=settings.WANKA["GROW_EVERY_S"],
        move_every_s=settings.WANKA["MOVE_EVERY_S"],
        budgets=budgets.engine_budgets(now),
        worth=quota_engine.worth(),
        defrag=defrag.due(now),
        mig_profiles=mig_profiles,
        mig_layouts=_mig_layouts(),
    )


def _mig_profiles() -> dict:
    """The MIG profiles of each GPU model that has them."""
    models = GpuModel.objects.values_list("name", "memory_gb")
    return {name: found for name, memory in models if (found := mig.profiles(name, memory))}


def _mig_layouts() -> dict[tuple[int, int], tuple[str, ...]]:
    """The profiles of the MIG instances of each GPU in MIG mode, as its agent last reported."""
    return {
        (node_id, index): tuple(device["profile"] for device in layout["devices"])
        for node_id, index, layout in Gpu.objects.exclude(mig={})
        .order_by()
        .values_list("node_id", "index", "mig")
        if layout["enabled"]
    }


COLUMNS = (
    "id", "queue_id", "gpu_model__name", "gpus", "submitted_at", "priority", "topology",
    "topology_required", "min_gpus", "max_gpus", "started_at", "time_limit_s", "state",
    "head_of_queue", "model_spec", "global_batch", "spread", "checkpoint_policy", "tenant_id",
    "accepts",
    "slices", "name", "movable", "mig",
)  # fmt: skip


def _job(w: dict) -> tuple[int, str] | None:
    """Which job a workload is again, for its measured speeds: its tenant and its name, for
    one the planner knows nothing of (`calibration.measured_speeds`)."""
    return None if w["model_spec"] else (w["tenant_id"], w["name"])


def _earlier_runs(w: dict) -> list:
    """One workload's earlier runs (`fleet.measured`), where they would give its speeds."""
    job = _job(w) if len(w["accepts"] or ()) > 1 else None
    return fleet.measured({job}).get(job, []) if job else []


def _engine_workload(
    w: dict,
    placed: dict,
    budget,
    saved,
    resized,
    factors: calibration.Table,
    mig_profiles: dict,
    runs=(),
) -> engine.Workload:
    """A workload as the engine sees it, from its `COLUMNS` and the GPUs it holds; the
    fleet's calibration `factors` correct its throughput curve, and its earlier `runs`
    (`fleet.measured`) give its speeds where the planner knows nothing of it; a MIG job is
    charged its profile's share (`mig_profiles`, per GPU model)."""
    speeds, measured = _speeds(w, budget, factors, runs)
    return engine.Workload(
        id=w["id"],
        queue_id=w["queue_id"],
        gpu_model=w["gpu_model__name"],
        gpus=w["gpus"],
        # Requeued after a fault: before the rest of its queue. Recovering: not a victim.
        submitted_at=0.0 if w["head_of_queue"] else w["submitted_at"].timestamp(),
        priority=UNPREEMPTIBLE if w["state"] == State.RECOVERING else w["priority"],
        topology=_topology(w, budget),
        topology_required=w["topology_required"],
        placements=tuple(
            engine.Placement(node_id, tuple(sorted(indices))) for node_id, indices in placed.items()
        ),
        # A recovering (or resizing) workload is not resized again meanwhile.
        min_gpus=None if w["state"] == State.RECOVERING else w["min_gpus"],
        max_gpus=None if w["state"] == State.RECOVERING else w["max_gpus"],
        started_at=_seconds(w["started_at"]),
        time_limit_s=w["time_limit_s"],
        last_checkpoint_at=_seconds(saved),
        saves=w["checkpoint_policy"] != CheckpointPolicy.NONE,
        preempting=w["state"] == State.PREEMPTING,
        throughput=_throughput(w, placed, budget, factors),
        resized_at=_seconds(resized),
        spread=w["spread"] or None,
        tenant=w["tenant_id"],
        accepts=tuple(w["accepts"]),
        speeds=speeds,
        measured=measured,
        slices=w["slices"],
        movable=w["movable"],
        mig=w["mig"],
        mig_charge=_charge(w, mig_profiles),
    )


def _charge(w: dict, mig_profiles: dict) -> float:
    """A MIG job's profile's share of its GPU; a whole GPU where its model lacks the profile
    (its memory changed since): the engine lets it wait, saying why."""
    if not w["mig"]:
        return 0.0
    profile = mig_profiles.get(w["gpu_model__name"], {}).get(w["mig"])
    return profile.charge if profile else 1.0


def _speeds(w: dict, budget: parallel.Budget, factors, runs) -> tuple[tuple, int]:
    """A job's speed per GPU on each GPU model it accepts, what the engine starts (and may
    move) it by, and how many of its earlier `runs` measured them: where it names its model,
    the planner's tokens/s (0 runs); else the steps/s its runs measured
    (`calibration.measured_speeds`). A model without one is unknown; until each has one, it takes
    its models in their listed order."""
    if len(w["accepts"]) < 2:
        return (), 0
    if not w["model_spec"]:
        return calibration.measured_speeds(runs, w["accepts"])
    if not budget.allows():
        return (), 0
    spec, gpus, batch = w["model_spec"], w["gpus"], w["global_batch"]
    return parallel.speeds(spec, w["accepts"], gpus, batch, factors), 0


def speeds_of(workload: Workload) -> tuple[tuple, int]:
    """`_speeds` of one workload, as the next cycle sees them: for its page."""
    w = {column: getattr(workload, column, None) for column in COLUMNS}
    return _speeds(w, parallel.Budget(), fleet.factors(), _earlier_runs(w))


def preview(
    workload: Workload, reader: Reader | None, snapshot: engine.Snapshot | None = None, now=None
) -> dict:
    """What the next cycle would do with `workload`, not yet saved: the engine's plan of the
    current snapshot (or `snapshot`, taken at `now`) with it added as the newest of its queue
    (`as_draft`), nothing written. `starts`, on how many nodes and, for a job that accepts
    several GPU models, on which and why (as `reason`); or why it would wait and its place in
    its queue. Reasons are read by `reader` (None: as the engine says them, for a page to
    read)."""
    if snapshot is None:
        now = timezone.now()
        snapshot = build_snapshot(now)
    added = as_draft(workload, snapshot, now)
    plan = engine.plan(replace(snapshot, workloads=(*snapshot.workloads, added)), now.timestamp())
    for admission in plan.admissions:
        if admission.workload_id == DRAFT:
            nodes = len({p.node_id for p in admission.placements})
            said = reader.read(admission.choice) if reader is not None else admission.choice
            return {"starts": True, "nodes": nodes, "reason": said, "position": None}
    waiting = next((p for p in plan.pending if p.workload_id == DRAFT), None)
    reason = waiting.reason.replace(f"workload {DRAFT}", "this job") if waiting else ""
    position = waiting.position if waiting else None
    said = reader.read(reason) if reader is not None else reason
    return {"starts": False, "nodes": 0, "reason": said, "position": position}


DRAFT = -1  # the engine's id of a workload previewed, not yet saved


def as_draft(workload: Workload, snapshot: engine.Snapshot, now) -> engine.Workload:
    """`workload`, not yet saved, as the engine would see it pending in `snapshot`: the newest
    of its queue, id `DRAFT`."""
    fields = {
        **{column: getattr(workload, column, None) for column in COLUMNS},
        "id": DRAFT,
        "queue_id": workload.queue_id,
        "gpu_model__name": workload.gpu_model.name,
        "state": State.PENDING,
        "submitted_at": now,
        "head_of_queue": False,
    }
    runs = _earlier_runs(fields)
    profiles = snapshot.mig_profiles
    return _engine_workload(fields, {}, parallel.Budget(), None, None, {}, profiles, runs)


def _leaving(placements: dict) -> tuple[engine.Workload, ...]:
    """GPUs a shrinking job gives back once its save is in (`recovery.save_then_shrink`),
    taken out of its placements and shown to the engine as a workload already stopping (of
    the job's queue, id the job's negated), so that its claimant waits for them and nothing
    else is stopped for it."""
    rows = Recovery.objects.exclude(step=RecoveryStep.DONE).exclude(release=[])
    found = []
    for workload_id, queue_id, model, release in rows.filter(
        workload__state=State.RECOVERING
    ).values_list("workload_id", "workload__queue_id", "workload__gpu_model__name", "release"):
        placed, going = placements[workload_id], []
        for node_id, indices in release:
            held = placed.get(node_id, [])
            leaving = tuple(sorted(i for i in indices if i in held))  # still booked to it
            placed[node_id] = [i for i in held if i not in leaving]
            if not placed[node_id]:
                placed.pop(node_id, None)
            if leaving:
                going.append(engine.Placement(node_id, leaving))
        if not going:
            continue
        gpus = sum(len(p.gpu_indices) for p in going)
        found.append(
            engine.Workload(
                -workload_id,
                queue_id,
                model,
                gpus,
                0.0,
                priority=UNPREEMPTIBLE,
                placements=tuple(going),
                preempting=True,
            )  # fmt: skip
        )
    return tuple(found)


def _topology(w: dict, budget: parallel.Budget) -> engine.TopologyLevel:
    """The job's level; a job with a model that may span data centers is kept in one when the
    planner says spanning would cost it much (`parallel.spans_datacenters`), or has not said
    yet."""
    level = LEVELS[w["topology"]]
    if level != engine.TopologyLevel.ANY or not w["model_spec"] or w["state"] != State.PENDING:
        return level
    if not budget.allows():
        return engine.TopologyLevel.DATACENTER
    spans = parallel.spans_datacenters(
        w["model_spec"], w["gpu_model__name"], w["gpus"], w["global_batch"]
    )
    return level if spans else engine.TopologyLevel.DATACENTER


def _throughput(w: dict, placed: dict, budget: parallel.Budget, factors) -> tuple:
    """The planner's throughput curve of a running elastic job with a model, from its fewest
    to its most GPUs, calibrated by the fleet: what its shrinks and grows are weighed by
    (linear until planned)."""
    held = sum(len(indices) for indices in placed.values())
    most = max(w["max_gpus"] or w["gpus"], held)
    if not (w["model_spec"] and w["min_gpus"] and held and w["min_gpus"] < most):
        return ()
    if not budget.allows():
        return ()
    return parallel.throughput(
        w["model_spec"], w["gpu_model__name"], w["global_batch"], w["min_gpus"], most, factors
    )


def _seconds(moment) -> float | None:
    return moment.timestamp() if moment else None


def apply(plan: engine.Plan) -> set[int]:
    """Write the plan in one transaction; return the ids of nodes whose desired state changed.

    Shrinks and preemptions first, then grows, then admissions. A workload cancelled since the
    snapshot is skipped. A GPU booked twice (which the engine never plans) fails the unique
    constraint, or `allocations.create`'s check of shares, and rolls the whole plan back.
    """
    ids = [a.workload_id for a in plan.admissions] + [p.workload_id for p in plan.pending]
    workloads = Workload.objects.select_related("gpu_model").in_bulk(ids)
    deadlines = dict(
        Workload.objects.filter(pk__in=[p.for_workload_id for p in plan.preemptions]).values_list(
            "pk", "queue__reclaim_deadline_s"
        )
    )
    victims = Workload.objects.in_bulk(
        [p.workload_id for p in plan.preemptions]
        + [s.workload_id for s in plan.shrinks]
        + [g.workload_id for g in plan.grows]
        + [m.workload_id for m in plan.moves]
    )
    datacenter = _datacenters(plan, workloads)
    chosen = _chosen_models(plan)
    planned = any(workloads[a.workload_id].model_spec for a in plan.admissions)
    factors = fleet.factors() if planned else {}
    touched: set[int] = set()
    with transaction.atomic():
        # Victims first: the GPUs they give back may be the ones the admissions below take.
        for shrunk in plan.shrinks:
            touched |= lifecycle.shrink(
                victims[shrunk.workload_id],
                [(p.node_id, p.gpu_indices) for p in shrunk.released],
                shrunk.reason,
            )
        for victim in plan.preemptions:
            deadline = deadlines.get(victim.for_workload_id)
            touched |= preemption.begin(victims[victim.workload_id], victim.reason, deadline)
        for grown in plan.grows:
            added = [(p.node_id, p.gpu_indices) for p in grown.added]
            touched |= lifecycle.grow(victims[grown.workload_id], added, grown.reason)
        if plan.moves:
            models = dict(GpuModel.objects.values_list("name", "pk"))
        for moved in plan.moves:
            placements = [(p.node_id, p.gpu_indices) for p in moved.placements]
            model = models[moved.gpu_model]
            outcome = RecoveryOutcome.DEFRAGMENTED if moved.pod else RecoveryOutcome.MOVED
            touched |= lifecycle.move(
                victims[moved.workload_id], model, placements, moved.reason, outcome
            )
        bookings = []
        for admission in plan.admissions:
            model = chosen.get(admission.workload_id)
            try:
                transition(
                    workloads[admission.workload_id],
                    State.ADMITTED,
                    reason=_placed(workloads[admission.workload_id], admission),
                    pending_reason="",
                    queue_position=None,
                    head_of_queue=False,
                    **({"gpu_model_id": model} if model else {}),
                )
            except IllegalTransition:
                continue
            for rank, placement in enumerate(admission.placements):
                touched.add(placement.node_id)
                bookings += [
                    Allocation(
                        workload_id=admission.workload_id,
                        node_rank=rank,
                        node_id=placement.node_id,
                        gpu_index=index,
                        slices=allocations.slices_of(workloads[admission.workload_id]),
                    )
                    for index in placement.gpu_indices
                ]
            gpus = sum(len(p.gpu_indices) for p in admission.placements)
            workload = workloads[admission.workload_id]
            if workload.model_spec:
                dcs = len({datacenter[p.node_id] for p in admission.placements})
                why = (
                    words.ADMITTED_ACROSS.format(gpus=gpus, datacenters=dcs)
                    if dcs > 1
                    else words.ADMITTED_ON.format(gpus=gpus)
                )
                parallel.replan(workload, gpus, workload.attempt, why, dcs, factors)
        allocations.create(bookings)
        changed = []
        for pending in plan.pending:
            workload = workloads[pending.workload_id]
            if (workload.pending_reason, workload.queue_position) != (
                pending.reason,
                pending.position,
            ):
                workload.pending_reason, workload.queue_position = pending.reason, pending.position
                changed.append(workload)
        Workload.objects.bulk_update(changed, ["pending_reason", "queue_position"])
        nodes_changed(touched)
    return touched


def _placed(workload: Workload, admission: engine.Admission) -> str:
    """Where an admission puts the workload, and on how few GPUs when it starts smaller."""
    nodes = len(admission.placements)
    placed = words.PLACED[nodes > 1].format(nodes=nodes)
    gpus = sum(len(p.gpu_indices) for p in admission.placements)
    if gpus < workload.gpus:
        placed = words.PLACED_SMALLER.format(placed=placed, gpus=gpus, asked=workload.gpus)
    if admission.choice:
        return words.PLACED_CHOSEN.format(placed=placed, choice=admission.choice)
    return placed


def _chosen_models(plan: engine.Plan) -> dict[int, int]:
    """The GPU model (id) each admitted workload that accepts several was placed on: its
    nodes'. No query when there is none."""
    first = {a.placements[0].node_id: a.workload_id for a in plan.admissions if a.choice}
    if not first:
        return {}
    models = Node.objects.filter(pk__in=first).values_list("pk", "gpu_model_id")
    return {first[node_id]: model for node_id, model in models}


def _datacenters(plan: engine.Plan, workloads: dict) -> dict[int, int]:
    """The data center of each node a job with a model is admitted on (its plan depends on
    how many it spans); no query when there is none."""
    nodes = {
        p.node_id
        for a in plan.admissions
        if a.workload_id in workloads and workloads[a.workload_id].model_spec
        for p in a.placements
    }
    if not nodes:
        return {}
    return dict(Node.objects.filter(pk__in=nodes).values_list("pk", "leaf__pod__datacenter"))


def scheduling_cycle() -> engine.Plan:
    """Expire time limits, snapshot, plan, apply; the agents of the nodes that changed hear
    once it commits."""
    lifecycle.expire_time_limits()
    started = time.perf_counter()
    now = timezone.now()
    snapshot = build_snapshot(now)
    planned = time.perf_counter()
    plan = engine.plan(snapshot, now=now.timestamp(), clock=time.perf_counter)
    applied = time.perf_counter()
    apply(plan)
    done = time.perf_counter()
    log.info(
        "cycle: %d admitted, %d preempted, %d shrunk, %d grown, %d pending, %d reservations; "
        "snapshot %.0f ms, plan %.0f ms (%s), apply %.0f ms",
        len(plan.admissions),
        len(plan.preemptions),
        len(plan.shrinks),
        len(plan.grows),
        len(plan.pending),
        len(plan.reservations),
        (planned - started) * 1e3,
        (applied - planned) * 1e3,
        ", ".join(f"{step} {seconds * 1e3:.1f} ms" for step, seconds in plan.timings.items()),
        (done - applied) * 1e3,
    )
    measure.record_cycle(done - started, planned - started, plan.timings)
    return plan


LOCK = "wanka:cycle:lock"
AGAIN = "wanka:cycle:again"
# The lock is a short lease its holder renews while it runs: a worker killed mid-cycle holds
# up scheduling for seconds, not for as long as the longest cycle could take.
LEASE_S = 10


def run_cycles() -> bool:
    """One scheduling cycle at a time, across workers. A trigger that arrives while a cycle
    runs is not lost: it sets a flag and the running cycle goes round once more. Returns
    whether a trigger came between the last round and the lock's release (the caller asks for
    another run)."""
    redis = client()
    lock = redis.lock(LOCK, timeout=LEASE_S, thread_local=False)  # renewed by another thread
    if not lock.acquire(blocking=False):
        redis.set(AGAIN, 1, ex=120)
        return False
    done = threading.Event()
    threading.Thread(target=_renew, args=(lock, done), daemon=True).start()
    try:
        while True:
            redis.delete(AGAIN)
            scheduling_cycle()
            if not redis.exists(AGAIN):
                break
    finally:
        done.set()
        lock.release()
    return bool(redis.exists(AGAIN))


def _renew(lock, done: threading.Event) -> None:
    while not done.wait(LEASE_S / 3):
        lock.reacquire()
