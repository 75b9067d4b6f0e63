"""One scheduling cycle: a snapshot in, a plan out.

This first engine admits in one global order and never preempts: a workload that does not fit
waits with its reason and does not block the ones behind it (best-effort FIFO, like Kueue's
default), so a large gang can be overtaken by smaller jobs until backfill reserves room for it.
Queue weight is not read yet; fair sharing between queues will use it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from scheduler.engine.capacity import Capacity
from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import Admission, Pending, Plan, Snapshot, Workload
from scheduler.engine.ordering import queue_order
from scheduler.engine.quota import QuotaLedger


def plan(snapshot: Snapshot, now: float) -> Plan:
    """Decide which pending workloads start now, on which GPUs, and why the others wait.

    Pure and deterministic: the same snapshot gives the same plan whatever the order of its
    tuples. `now` is the cycle's time in seconds; the rules of this first engine do not depend
    on it, but the interface carries it for the ones that will (aging, preemption grace).
    """
    # 1. Account usage of running workloads: their GPUs are neither free nor quota headroom,
    #    even when a racy snapshot still lists them as free.
    ledger = QuotaLedger(snapshot.queues)
    capacity = Capacity(snapshot.nodes)
    for workload in snapshot.workloads:
        if workload.is_running:
            ledger.charge(workload.queue_id, workload.gpu_model, held_gpus(workload))
            capacity.take(workload.placements)

    # 2. Order pending workloads (see `queue_order` for the criteria).
    priority = {queue.id: queue.priority for queue in snapshot.queues}
    ordered = sorted((w for w in snapshot.workloads if not w.is_running),
                     key=lambda w: queue_order(w, priority.get(w.queue_id, 0)))

    admissions: list[Admission] = []
    waiting: list[tuple[Workload, str]] = []
    for workload in ordered:
        try:
            queue = ledger.queue(workload.queue_id)
            pool = capacity.pool(queue.region, workload.gpu_model)
            # A job no placement could ever satisfy hears so first, not a passing quota reason.
            pool.check_shape(workload.gpus)
            # 3. Check quota, counting what this plan has admitted so far.
            ledger.check(queue, workload.gpu_model, workload.gpus)
            # 4. Place the whole gang, or nothing.
            placements = pool.find(workload)
        except Inadmissible as why:
            # 5a. Record why it waits.
            waiting.append((workload, str(why)))
            continue
        # 5b. Record the admission and charge it, so later workloads see the GPUs gone.
        capacity.take(placements)
        ledger.charge(queue.id, workload.gpu_model, workload.gpus)
        admissions.append(Admission(workload.id, placements))

    usage = {key: gpus for key, gpus in sorted(ledger.usage.items()) if gpus}
    return Plan(admissions=admissions, pending=number_in_queues(waiting), usage=usage)


def held_gpus(workload: Workload) -> int:
    """GPUs a running workload holds, counted from its placements."""
    return sum(len(placement.gpu_indices) for placement in workload.placements)


def number_in_queues(waiting: Iterable[tuple[Workload, str]]) -> list[Pending]:
    """Pending entries in the order given, each numbered 1, 2, ... within its own queue."""
    seen: Counter[int] = Counter()
    pending = []
    for workload, reason in waiting:
        seen[workload.queue_id] += 1
        pending.append(Pending(workload.id, reason, seen[workload.queue_id]))
    return pending
