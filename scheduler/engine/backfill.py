"""Backfill: reservations that keep large gangs from starving (Slurm's backfill).

When a queue's head is a gang that cannot fit and no preemption makes room, the cycle reserves
the domain it will use: of the domains the gang may use, the one where enough whole nodes are
expected free soonest, judged by the time limits of the work on them. Criteria, in order: the
earliest expected start, then the most of the needed nodes free now, then the tighter level,
then the domain's name. The reserved nodes are the ones expected free soonest (ties by name).

The free GPUs of reserved nodes are held. A later workload of the same cycle may use them only
if the gang could preempt it when its turn comes (`preemptible_by`), or if, by its time limit,
it ends before the reservation's expected start; and never if a workload the reservations kept
off those GPUs earlier in the cycle could preempt it (`KeptOut`): that one would preempt it at
the next cycle, and the same reservation would let it back in after, a loop. Room held for a
claimant whose victims are stopping is never backfilled: it is needed at the next cycle.

At most `MAX_PER_POOL` reservations per pool and cycle, one per queue, in cycle order: like
Slurm's `bf_max_job_test`, this bounds what a cycle costs.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from scheduler.engine.capacity import Pool
from scheduler.engine.model import (
    Queue,
    ReclaimWithinCohort,
    Reservation,
    TopologyLevel,
    Workload,
)
from scheduler.engine.occupancy import Occupancy
from scheduler.engine.quota import QuotaLedger
from scheduler.engine.topology import (
    DEPTH,
    describe,
    domains_of,
    levels_up_to,
    plural,
    widest_level,
)
from scheduler.words import HOURS, MINUTES, SECONDS, phrase

MAX_PER_POOL = 4

RESERVED = phrase("reserved {where} for it: {free} of the {nodes} it needs free now")
RESERVED_UNTIMED = phrase(
    "reserved {where} for it: {free} of the {nodes} it needs free now, the rest busy with work "
    "that has no time limit"
)
RESERVED_UNTIL = phrase(
    "reserved {where} for it: {free} of the {nodes} it needs free now, the rest expected free "
    "in {after}"
)


@dataclass(slots=True)
class Hold:
    """A reservation and what decides who may backfill it (one a cycle, for each claimant
    and gang head that holds room: a plain record, as a frozen one is slower to make)."""

    reservation: Reservation
    owner: Workload
    queue: Queue
    within_nominal: bool  # the owner fits its queue's nominal quota, so it may reclaim
    backfill: bool = True  # False for room held while victims stop


def reserve(pool: Pool, occupancy: Occupancy, workload: Workload) -> Reservation | None:
    """The reservation for a gang that cannot start now (see the module docstring); None when
    no domain it may use has enough nodes.

    One walk over the busy nodes that have a known end, soonest first, tells every domain when
    its last needed node frees up, so the cost is that of the walk, not of every domain.
    """
    count = workload.gpus // pool.node_size
    widest = widest_level(workload)
    if widest == TopologyLevel.NODE:
        return None  # more than one node can never be one node
    level_of = {}
    needs = {}
    for level in levels_up_to(widest):
        for domain in pool.domains_at(DEPTH[level]):
            if pool.domain_size(domain) >= count:
                level_of[domain] = level
                needs[domain] = count - pool.whole(domain)
    if not needs:
        return None
    starts = _starts(pool, occupancy, needs)
    domain = min(needs, key=lambda d: (starts.get(d, math.inf), needs[d], level_of[d], d))
    start = starts.get(domain)
    nodes = _nodes(pool, occupancy, domain, count)
    free_now = count - needs[domain]
    reason = _reason(level_of[domain], domain, count, free_now, start, occupancy.now)
    return Reservation(workload.id, level_of[domain], domain, nodes, start, reason)


def _starts(pool: Pool, occupancy: Occupancy, needs: dict) -> dict:
    """When each domain has the nodes it still needs: the time its last one frees up.

    Only the soonest start matters (`reserve` picks a domain with the earliest one), so the walk
    stops at the first node freeing up after it; domains not started by then get none."""
    depths = sorted({len(domain) for domain in needs})
    seen: Counter = Counter()
    starts = {}
    soonest = math.inf
    for when, node in occupancy.soonest_free(pool):
        if when > soonest:
            break  # every domain left starts later than one that has started
        domains = pool.domains_of(node.id)
        for depth in depths:
            domain = domains[depth]
            if domain in needs and domain not in starts:
                seen[domain] += 1
                if seen[domain] >= needs[domain]:
                    starts[domain] = when
                    soonest = min(soonest, when)
        if len(starts) == len(needs):
            break  # every domain has its start
    return starts


def _nodes(pool: Pool, occupancy: Occupancy, domain, count: int) -> tuple[int, ...]:
    """The nodes to reserve, by name: whole free ones, then those with a known end, soonest
    first, then any other busy ones a gang may have (`Occupancy.no_gangs`)."""
    closed = occupancy.no_gangs
    whole = [n for n in pool.whole_nodes(domain) if n.id not in closed]  # leaves with some only
    picked = whole[:count]
    chosen = {n.id for n in picked}
    for _, node in occupancy.soonest_free(pool):
        if len(picked) >= count:
            break
        if node.id not in chosen and domains_of(node)[len(domain)] == domain:
            picked.append(node)
            chosen.add(node.id)
    for node in pool.domain_nodes(domain):
        if len(picked) >= count:
            break
        if node.id not in chosen and node.id not in closed and node.gpus == pool.node_size:
            picked.append(node)
            chosen.add(node.id)
    return tuple(n.id for n in sorted(picked, key=lambda n: (n.name, n.id)))


def _reason(level, domain, count: int, free_now: int, start_at: float | None, now: float) -> str:
    fields = {"where": describe(level, domain), "free": free_now, "nodes": plural(count, "node")}
    if free_now >= count:
        return RESERVED.format(**fields)
    if start_at is None:
        return RESERVED_UNTIMED.format(**fields)
    return RESERVED_UNTIL.format(after=duration(start_at - now), **fields)


def duration(seconds: float) -> str:
    """A span in words: "45 s", "12 min", "3.5 h"."""
    if seconds < 90:
        return SECONDS.format(n=f"{seconds:.0f}")
    if seconds < 90 * 60:
        return MINUTES.format(n=f"{seconds / 60:.0f}")
    return HOURS.format(hours=f"{seconds / 3600:.1f}")


class KeptOut:
    """What the workloads kept off reserved GPUs this cycle could preempt, summed up so that a
    check costs O(1): per queue the highest priority (priority rule), per cohort tree whether
    one may reclaim, and the highest priority bar below which one may evict borrowed work."""

    def __init__(self) -> None:
        self._priority: dict[int, int] = {}  # queue id -> highest priority kept out
        self._reclaim: dict = {}  # cohort root -> highest priority bar of the reclaim rule
        self._borrow: dict = {}  # cohort root -> highest priority bar of the borrow rule

    def adds(self, workload: Workload, queue: Queue, ledger: QuotaLedger, within: bool) -> bool:
        """Whether recording `workload` would widen what the kept-out could preempt."""
        policy = queue.preemption
        if policy.within_queue and workload.priority > self._priority.get(queue.id, -math.inf):
            return True
        if queue.cohort is None:
            return False
        root = ledger.root(queue)
        if within:
            return _reclaim_bar(workload, queue) > self._reclaim.get(root, -math.inf)
        bar = _borrow_bar(workload, queue)
        return bar is not None and bar > self._borrow.get(root, -math.inf)

    def add(self, workload: Workload, queue: Queue, ledger: QuotaLedger, within: bool) -> None:
        policy = queue.preemption
        if policy.within_queue:
            self._priority[queue.id] = max(
                workload.priority, self._priority.get(queue.id, -math.inf)
            )
        if queue.cohort is None:
            return
        root = ledger.root(queue)
        if within and policy.reclaim:
            self._reclaim[root] = max(
                _reclaim_bar(workload, queue), self._reclaim.get(root, -math.inf)
            )
        bar = None if within else _borrow_bar(workload, queue)
        if bar is not None:
            self._borrow[root] = max(bar, self._borrow.get(root, -math.inf))

    def threaten(self, workload: Workload, queue: Queue, ledger: QuotaLedger) -> bool:
        """Whether one of the kept-out workloads could preempt `workload` once admitted."""
        if workload.priority < self._priority.get(queue.id, -math.inf):
            return True
        if queue.cohort is None or not _borrowed(workload, queue, ledger):
            return False
        root = ledger.root(queue)
        return workload.priority < max(
            self._reclaim.get(root, -math.inf), self._borrow.get(root, -math.inf)
        )


def _borrow_bar(workload: Workload, queue: Queue) -> float | None:
    return queue.preemption.borrow_ceiling(workload.priority)


def _reclaim_bar(workload: Workload, queue: Queue) -> float:
    """The priority work it may reclaim must be below (-inf: none)."""
    policy = queue.preemption
    if policy.reclaim_within_cohort == ReclaimWithinCohort.ANY:
        return math.inf
    if policy.reclaim_within_cohort == ReclaimWithinCohort.LOWER_PRIORITY:
        return workload.priority
    return -math.inf


def _borrowed(workload: Workload, queue: Queue, ledger: QuotaLedger) -> bool:
    """Whether the workload, once admitted, would be borrowed work outside its guarantee."""
    quota = queue.quota(workload.gpu_model)
    used = ledger.staying(queue.id, workload.gpu_model)
    return used + workload.gpus > quota.nominal and used >= quota.guarantee


def may_backfill(
    hold: Hold, workload: Workload, queue: Queue, ledger: QuotaLedger, now: float
) -> bool:
    """Whether `workload` may start on GPUs held for `hold`'s owner (leaving aside the
    kept-out rule, which the cycle checks once for all reservations)."""
    if not hold.backfill:
        return False
    start = hold.reservation.start_at
    limit = workload.time_limit_s
    if limit is not None and start is not None and now + limit <= start:
        return True
    return preemptible_by(hold, workload, queue, ledger)


def preemptible_by(hold: Hold, workload: Workload, queue: Queue, ledger: QuotaLedger) -> bool:
    """Whether the owner of `hold` could preempt `workload` once it is admitted: lower
    priority in the owner's queue, or borrowed work of its cohort tree that the owner could
    reclaim (or evict under its borrow threshold)."""
    owner, owner_queue = hold.owner, hold.queue
    policy = owner_queue.preemption
    if queue.id == owner_queue.id:
        return policy.within_queue and workload.priority < owner.priority
    if queue.cohort is None or owner_queue.cohort is None:
        return False
    if ledger.root(queue) != ledger.root(owner_queue):
        return False
    if not _borrowed(workload, queue, ledger):
        return False
    if hold.within_nominal:
        return workload.priority < _reclaim_bar(owner, owner_queue)
    ceiling = policy.borrow_ceiling(owner.priority)
    return ceiling is not None and workload.priority < ceiling
