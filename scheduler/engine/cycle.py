"""One scheduling cycle: a snapshot in, a plan out.

`plan()` reads top to bottom in numbered steps. The per-workload decision (`Cycle.decide`) tries, in
order: admit on free GPUs (or backfill GPUs held for a reservation that allows it); make room by
shrinking elastic work and preempting (`preemption`); start an elastic workload smaller on free GPUs
where it ends sooner so than by waiting for its size; make room by shrinking elastic work of its own
queue and priority where the GPUs do more for it (`Resizing.shrink_for`); reserve a domain for a
gang head that must wait (`backfill`); otherwise wait, with a reason a person can act on. Step 5,
what changes for the running work (grows, moves, defragmentation), is `resizing.Resizing`.
"""

from __future__ import annotations

import gc
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from enum import IntEnum
from itertools import chain
from operator import attrgetter
from typing import Protocol

from scheduler.engine.backfill import MAX_PER_POOL, Hold, KeptOut, may_backfill, reserve
from scheduler.engine.budget import BudgetLedger
from scheduler.engine.capacity import Capacity, NodeIndex, Pool
from scheduler.engine.errors import Inadmissible, refusal
from scheduler.engine.explain import (
    awaited_reason,
    claim_reason,
    kept_off_reason,
    left_reason,
    model_reason,
    none_free_reason,
    preemption_reason,
    shrink_reason,
    size_awaited_reason,
)
from scheduler.engine.gains import Contender, Gains
from scheduler.engine.mig import MigInstances
from scheduler.engine.model import (
    Admission,
    Grow,
    Move,
    Pending,
    Placement,
    Plan,
    Preemption,
    Queue,
    Reservation,
    Shrink,
    Snapshot,
    Strategy,
    TopologyLevel,
    Workload,
)
from scheduler.engine.moves import Claim, Claimant, MoveKind, Rule
from scheduler.engine.moves import Move as Step
from scheduler.engine.occupancy import Occupancy
from scheduler.engine.ordering import Heads
from scheduler.engine.preemption import SEARCHES_PER_QUEUE, VictimSearch
from scheduler.engine.quota import NOT_IN_SNAPSHOT, QuotaLedger
from scheduler.engine.resizing import Resizing
from scheduler.engine.shares import Shares
from scheduler.engine.stopping import stopping_room
from scheduler.engine.topology import DEPTH, widest_level
from scheduler.words import AND_SO, phrase


class Clock(Protocol):
    """Where step timings come from (e.g. `time.perf_counter`); the plan never depends on it."""

    def __call__(self) -> float: ...


BEHIND_HEAD = phrase("waits behind workload {workload}, the head of strict-FIFO queue {queue}")


class Outcome(IntEnum):
    """What deciding one workload came to; a larger value is a better outcome."""

    NO_FIT = 0  # waits with its reason (and perhaps a reservation)
    PREEMPT = 1  # waits while the work it preempts stops; its room is held
    FIT = 2  # admitted now


def plan(
    snapshot: Snapshot, now: float, clock: Clock | None = None, index: NodeIndex | None = None
) -> Plan:
    """Decide which pending workloads start now, on which GPUs, what makes room for them, and
    why the others wait.

    Pure and deterministic: the same snapshot gives the same plan whatever the order of its
    tuples. `now` is the cycle's time in seconds (lost work, time limits, reservations).
    `clock`, when given, only times the steps into `Plan.timings`. `index`, when given, is
    kept by a caller that plans one snapshot of a fleet after another, so that each cycle
    indexes only the nodes that changed (`NodeIndex`); the plan is the same without it.

    Python's cyclic garbage collector is paused for the cycle (and restored as it was): the
    cycle makes many short-lived objects, all freed by reference counting, and each collection
    they would trigger walks the snapshot's tens of thousands of objects in vain.
    """
    with paused_collector():
        return _plan(snapshot, now, clock, index)


@contextmanager
def paused_collector() -> Iterator[None]:
    """No automatic cyclic collections in the block (the collector is restored as it was)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan(snapshot: Snapshot, now: float, clock: Clock | None, index: NodeIndex | None) -> Plan:
    """The steps of `plan`."""
    timer = StepTimer(clock)
    # 1. Take stock: charge running work to quota, take its GPUs, index who holds each node.
    with timer("1. take stock"):
        cycle = Cycle(snapshot, now, index)
    # 2. Queue the pending work: one FIFO per queue, in queue order.
    with timer("2. queue"):
        heads = Heads(cycle.ledger, cycle.pending)
        for workload in heads.unknown():
            cycle.wait(workload, NOT_IN_SNAPSHOT.format(queue=workload.queue_id))
    # 3. Nominate the best head across queues (fair-share order), then
    # 4. admit it, make room for it by preemption, or reserve room; strict FIFO queues stop
    #    at a head that waits.
    with timer("3-4. nominate and decide"):
        while (head := heads.next()) is not None:
            queue, workload, within = head
            if cycle.decide(queue, workload, within) == Outcome.PREEMPT and cycle.touched_queues:
                heads.refresh(cycle.touched_queues)
            if queue.strategy == Strategy.STRICT_FIFO and cycle.waits(workload):
                cycle.wait_behind(workload, queue, heads.drain(queue.id))
    # 5. Grow: free GPUs no waiting work can use go to elastic work below its most, then move
    #    work that accepts several GPU models to a much faster one where they are free, and
    #    small work within pods due for defragmentation so that waiting gangs fit there.
    with timer("5. grow"):
        cycle.grow()
        cycle.move()
        cycle.defragment()
    # 6. Requeue the rest: each waiting workload's reason and position in its queue.
    with timer("6. explain"):
        pending = cycle.number_in_queues()
    # 7. Usage after the plan: preempted work gone, resizes applied, admissions added.
    with timer("7. usage"):
        usage = cycle.usage_after()
    return Plan(
        admissions=cycle.admissions,
        pending=pending,
        usage=usage,
        preemptions=cycle.preemptions,
        shrinks=cycle.shrinks,
        grows=cycle.grows,
        moves=cycle.moves,
        reservations=[hold.reservation for hold in cycle.holds.values()],
        timings=timer.timings,
    )


class StepTimer:
    """Seconds per step, read from an optional clock."""

    def __init__(self, clock: Clock | None) -> None:
        self.clock = clock
        self.timings: dict[str, float] = {}

    @contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        if self.clock is None:
            yield
            return
        started = self.clock()
        try:
            yield
        finally:
            self.timings[step] = self.clock() - started


@dataclass
class RoomMemo:
    """What the cycle has learnt about making room, so that it never searches in vain twice."""

    # Per queue, the smallest size of a kind of workload that found no room (see `find_room`).
    no_victims: dict[int, dict[tuple, int]] = field(default_factory=dict)
    searches: Counter[int] = field(default_factory=Counter)  # searches per queue that failed
    claimed: set[int] = field(default_factory=set)  # queues that made room this cycle
    queues_waiting: set[int] = field(default_factory=set)  # queues with a workload waiting
    borrowers_waiting: set[int] = field(default_factory=set)  # ... one that must borrow
    # Why claimants wait that only wait for stopping work (most claims of a cycle that evicts:
    # `stopping_room`), worded once per count of stopping workloads, level and domain.
    stopping_reasons: dict[tuple, str] = field(default_factory=dict)
    # GPUs of share and MIG jobs taken back this cycle, and (queue, GPU model) that found none
    # (`reclaim_shares`).
    reclaimed_gpus: set[tuple[int, int]] = field(default_factory=set)
    no_share_gpu: set[tuple[int, str]] = field(default_factory=set)


@dataclass
class ReserveMemo:
    """The cycle's reservations so far, and what they keep off the GPUs they hold."""

    queues: set[int] = field(default_factory=set)  # queues that reserved for their head
    backfillable: dict[Pool, list[int]] = field(default_factory=dict)  # owners, per pool
    kept_off: dict[tuple, str] = field(default_factory=dict)  # reasons already worded
    kept_out: KeptOut = field(default_factory=KeptOut)  # what kept-off work could preempt


class Cycle(Resizing):
    """The state of one cycle: quota, free GPUs, occupancy and the plan so far."""

    def __init__(self, snapshot: Snapshot, now: float, index: NodeIndex | None = None) -> None:
        self.now = now
        self.grow_every_s = snapshot.grow_every_s
        self.move_every_s = snapshot.move_every_s
        self.defrag = snapshot.defrag
        self.budgets = BudgetLedger(snapshot.budgets, snapshot.workloads, now)
        queues = self.budgets.soften(snapshot.queues)
        self.ledger = QuotaLedger(queues, snapshot.cohorts, snapshot.worth)
        self.capacity = Capacity(snapshot.nodes, index)
        self.occupancy = Occupancy(self.capacity, now)
        running: list[Workload] = []
        self.pending: list[Workload] = []
        for workload in snapshot.workloads:
            (running if workload.placements else self.pending).append(workload)
        running.sort(key=attrgetter("id"))
        self.running = running
        self.capacity.take(chain.from_iterable(w.placements for w in running))
        # Share and MIG jobs are no victims of the search: stopping one frees part of a GPU, no
        # whole one (a GPU of them is taken back whole: `reclaim_shares`).
        self.occupancy.add_running(w for w in running if not w.fraction)
        self.shares = Shares(running, snapshot)
        self.spread: defaultdict[str, set[int]] = defaultdict(set)  # group -> nodes it is on
        charges: dict[tuple[int, str], int] = {}
        for workload in running:
            if workload.spread:
                self.spread[workload.spread].update(p.node_id for p in workload.placements)
            if not workload.preempting:  # a stopping workload's quota is free already
                key = (workload.queue_id, workload.gpu_model)
                charges[key] = charges.get(key, 0) + workload.held
        # Charged once per queue and model: the sum is what charging each workload gives.
        for (queue_id, gpu_model), gpus in charges.items():
            self.ledger.charge(queue_id, gpu_model, gpus)
        # Free GPUs in MIG mode are kept for the MIG jobs whose quota lets them start now.
        self.mig = MigInstances(running, filter(self._may_slice, self.pending), snapshot)
        self.capacity.take(Placement(node_id, (index,)) for node_id, index in self.mig.spare)
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.shrinks: list[Shrink] = []
        self.grows: list[Grow] = []
        self.moves: list[Move] = []
        # For `_worth_waiting`: per (region, GPU model), running work's (end, GPUs), and the
        # GPUs workloads chose to wait for there this cycle.
        self._ends: dict[tuple[str, str], list[tuple[float, int]]] = {}
        self._awaited: Counter[tuple[str, str]] = Counter()
        # The free GPUs `_free_now` found for a workload: (id, GPU model, GPUs, placements),
        # taken as they are when the same workload is admitted next.
        self._found: tuple | None = None
        self._choices: dict[tuple, str] = {}  # see `_say_model`
        self.gains = Gains(self.pending, self.ledger)
        self.holds: dict[int, Hold] = {}
        self.claims: Counter[tuple[int, str]] = Counter()  # quota charged for claimants
        self.touched_queues: set[int] = set()
        self._waiting: dict[int, tuple[Workload, str]] = {}
        self.rooms = RoomMemo()
        self.reserving = ReserveMemo()
        # For `shrink_for`: the elastic work it may shrink (made when first asked), and the
        # kinds of waiting work it found no shrink for.
        self._shrinkable: dict[tuple[int, str, int], list[Workload]] | None = None
        self._no_yield: set[tuple] = set()
        self._fractions: dict[Pool, dict[tuple[int, int], list[Workload]]] = {}  # see its use
        # Elastic work that waits for its size (`_start_smaller`): when that is expected free.
        self._sized: dict[int, float] = {}

    def _may_slice(self, workload: Workload) -> bool:
        """Whether the pending workload is a MIG job its queue's quota lets start now."""
        if not workload.mig:
            return False
        queue = self.ledger.queue_or_none(workload.queue_id)
        return queue is not None and self.ledger.allows(queue, workload.gpu_model, workload.share)

    # -- outcomes ----------------------------------------------------------------------------

    def wait(self, workload: Workload, reason: str) -> None:
        self._waiting[workload.id] = (workload, reason)
        self.rooms.queues_waiting.add(workload.queue_id)

    def waits(self, workload: Workload) -> bool:
        return workload.id in self._waiting

    def wait_behind(self, head: Workload, queue: Queue, rest: Iterable[Workload]) -> None:
        for workload in rest:
            self.wait(
                workload,
                BEHIND_HEAD.format(workload=head.id, queue=queue.name),
            )

    def number_in_queues(self) -> list[Pending]:
        """Pending entries in decision order, each numbered 1, 2, ... within its queue."""
        seen: dict[int, int] = {}
        pending = []
        for workload, reason in self._waiting.values():
            position = seen[workload.queue_id] = seen.get(workload.queue_id, 0) + 1
            pending.append(Pending(workload.id, reason, position))
        return pending

    def usage_after(self) -> dict[tuple[int, str], int]:
        usage = self.ledger.usage - self.claims - self.ledger.stopping
        return {key: gpus for key, gpus in sorted(usage.items()) if gpus > 0}

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, queue: Queue, workload: Workload, within: bool) -> Outcome:
        """Admit, preempt for, reserve for, or hold back one workload (`within`: whether it
        fits in its queue's nominal quota). A workload that accepts several GPU models is
        decided on the one it is best placed on now (`_choose_model`), or waits for a faster
        one (`_worth_waiting`); a share of a GPU runs on its one model."""
        free, left = None, []
        self.gains.decided.add(workload.id)
        if len(workload.accepts) > 1 and not workload.fraction:
            workload, within, free, left = self._choose_model(queue, workload)
            given = {contender.faster for contender in left}
            if free and (awaited := self._worth_waiting(queue, workload, given)) is not None:
                model, start_in_s = awaited
                self._awaited[queue.region, model] += workload.gpus
                reason = awaited_reason(workload, model, workload.gpu_model, start_in_s)
                return self._no_fit(workload.on(model), reason)
        outcome = self._decide(queue, workload, within)
        if outcome != Outcome.FIT and not within:
            self.rooms.borrowers_waiting.add(queue.id)
        if outcome == Outcome.NO_FIT and not workload.fraction:  # ahead of later ones that may
            self._awaited[queue.region, workload.gpu_model] += workload.gpus  # wait for them
        if free is not None:
            self._say_model(workload, outcome, free, left[0] if left else None)
        return outcome

    def _choose_model(
        self, queue: Queue, workload: Workload
    ) -> tuple[Workload, bool, bool, list[Contender]]:
        """For a workload that accepts several GPU models: the best of them (`Workload.models`:
        the fastest where its speeds are known, else its submitter's order) that its quota and
        budgets allow and free GPUs hold now, but for one it leaves to waiting work that gains
        more there (`Gains`: the cluster's effective throughput, as Gavel's and Sia's); else
        the best it leaves to none, to make room or reserve for, or wait. With whether it fits
        in its queue's nominal quota there, whether it was free, and the work it left faster
        models to, the fastest model first."""
        models = workload.models
        left: list[Contender] = []
        for model, slower in zip(models, models[1:] + (None,), strict=True):
            candidate = workload.on(model)
            if not self._free_now(queue, candidate):
                continue
            if slower is not None:
                contender = self.gains.contender(
                    workload, queue.region, model, slower, self._may_take_free
                )
                if contender is not None:
                    left.append(contender)
                    continue
            within = self.ledger.within_nominal(queue, model, workload.gpus)
            return candidate, within, True, left
        given = {contender.faster for contender in left}
        best = workload.on(next(model for model in models if model not in given))
        within = self.ledger.within_nominal(queue, best.gpu_model, best.gpus)
        return best, within, False, left

    def _may_take_free(self, workload: Workload) -> bool:
        """Whether the workload's quota and budgets allow it to start now, and its pool has as
        many GPUs free as it needs (its shape aside)."""
        queue = self.ledger.queue_or_none(workload.queue_id)
        if queue is None or self.waits(workload):  # not in the snapshot, or behind a FIFO head
            return False
        pool = self.capacity.pool(queue.region, workload.gpu_model)
        return workload.gpus <= pool.free_gpus() and self._allowed(queue, workload)

    def _worth_waiting(
        self, queue: Queue, workload: Workload, given: set[str]
    ) -> tuple[str, float] | None:
        """A faster model than the one the workload could start on now (`gpu_model`), other
        than those it left to work that gains more there (`given`), and when it is expected to
        start there, where it would still end sooner there: judged from its time limit
        (`Workload.run_s`) and when the running work of that model ends by its own
        (`_expected_start`). None when starting now ends soonest, or nothing is known."""
        here = workload.run_s(workload.gpu_model)
        if here is None:
            return None
        for model in workload.models:
            if model == workload.gpu_model:
                return None  # the faster ones are behind us
            if model in given:
                continue
            if queue.quota(model).nominal < workload.gpus and queue.cohort is None:
                continue  # its queue can never hold it there
            start_in_s = self._expected_start(queue.region, model, workload.gpus)
            if start_in_s is not None and start_in_s + workload.run_s(model) < here:
                return model, start_in_s
        return None

    def _expected_start(self, region: str, gpu_model: str, gpus: int) -> float | None:
        """Seconds until `gpus` GPUs of the pool are free, counting those free now, those the
        pool's running work gives back when it ends by its time limit (its run time there),
        and those workloads chose to wait for this cycle; None when that never comes."""
        key = (region, gpu_model)
        ends = self._ends.get(key)
        if ends is None:
            ends = self._ends[key] = sorted(
                (w.started_at + run_s, w.held)
                for w in self.running
                if w.gpu_model == gpu_model
                and w.started_at is not None
                and (run_s := w.run_s(gpu_model)) is not None
                and (queue := self.ledger.queue_or_none(w.queue_id)) is not None
                and queue.region == region
            )
        try:
            have = self.capacity.pool(region, gpu_model).free_gpus()
        except Inadmissible:
            return None
        need = gpus + self._awaited[key]
        if have >= need:
            return None  # free, yet it did not fit (its shape): no telling when it will
        for end, held in ends:
            have += held
            if have >= need:
                return max(0.0, end - self.now)
        return None

    def _free_now(self, queue: Queue, workload: Workload) -> bool:
        """Whether the workload could start now on free GPUs of its `gpu_model` (quota, budgets
        and room; nothing is taken)."""
        if not self._allowed(queue, workload):
            return False
        pool = self.capacity.pool(queue.region, workload.gpu_model)
        try:
            placements = self._placements(pool, workload)
        except Inadmissible:
            return False
        self._found = (workload.id, workload.gpu_model, workload.gpus, placements)
        return True

    def _allowed(self, queue: Queue, workload: Workload) -> bool:
        """Whether the workload's quota and budgets allow it to start now."""
        if not self.ledger.allows(queue, workload.gpu_model, workload.gpus):
            return False
        if self.budgets:
            gpus, seconds = workload.gpus, workload.time_limit_s
            borrows = not self.ledger.within_nominal(queue, workload.gpu_model, gpus)
            if refusal(self.budgets.check, queue, workload, gpus, seconds, borrows) is not None:
                return False
        return True

    def _say_model(
        self, workload: Workload, outcome: Outcome, free: bool, left: Contender | None
    ) -> None:
        """Say which GPU model a workload that accepts several starts on and why, or why none
        of them would do now: none has room, or it left one to work that gains more there."""
        if outcome == Outcome.FIT:
            admission = self.admissions[-1]
            if left is not None:
                choice = left_reason(left, workload.gpu_model)
            else:
                # Worded once per kind of choice: many workloads accept the same models at
                # the same speeds.
                key = (workload.models, workload.speeds, workload.measured, workload.gpu_model)
                choice = self._choices.get(key)
                if choice is None:
                    choice = self._choices[key] = model_reason(workload, workload.gpu_model)
            self.admissions[-1] = Admission(admission.workload_id, admission.placements, choice)
        elif not free and self.waits(workload):
            reason = self._waiting[workload.id][1]
            if left is not None:
                reason = left_reason(left, workload.gpu_model, reason)
            else:
                reason = none_free_reason(workload, reason)
            self._waiting[workload.id] = (workload, reason)

    def _decide(self, queue: Queue, workload: Workload, within: bool) -> Outcome:
        """Kueue's processEntry, as early returns: a shape no placement could ever give waits
        with that reason (not a passing quota one), and so does work a budget does not allow
        (no preemption makes budget); work its quota allows that fits on free GPUs starts;
        else room is made by preemption where the rules allow; else an elastic one starts
        smaller on free GPUs; else room is made by shrinking elastic work of its queue and
        priority that gains less from the GPUs (`shrink_for`); else it waits, a gang head
        perhaps with a reservation. `within`: whether it fits in its queue's nominal quota."""
        if workload.fraction:
            return self._decide_share(queue, workload, within)
        try:
            pool = self.capacity.pool(queue.region, workload.gpu_model)
            pool.check_shape(workload.gpus)
        except Inadmissible as why:
            return self._no_fit(workload, str(why))
        if self.budgets:
            gpus, seconds = workload.gpus, workload.time_limit_s
            budget = refusal(self.budgets.check, queue, workload, gpus, seconds, not within)
            if budget is not None:
                return self._no_fit(workload, budget)
        quota = self.ledger.refusal(queue, workload.gpu_model, workload.gpus)
        room = None if quota else self.admit(pool, queue, workload)
        if quota is None and room is None:
            return Outcome.FIT
        claim = self.find_room(pool, queue, workload, within, quota is not None)
        if claim is not None:
            self.apply_claim(pool, queue, workload, claim)
            return Outcome.PREEMPT
        if quota is None and self.reclaim_shares(pool, queue, workload, within):
            return Outcome.PREEMPT
        if self._start_smaller(pool, queue, workload):
            return Outcome.FIT
        if self.shrink_for(pool, queue, workload):
            return Outcome.PREEMPT
        reason = quota if quota is not None else self.maybe_reserve(pool, queue, workload, room)
        if workload.id in self._sized:
            reason = size_awaited_reason(reason, workload, self._sized[workload.id])
        return self._no_fit(workload, reason)

    def _decide_share(self, queue: Queue, workload: Workload, within: bool) -> Outcome:
        """A share or MIG job starts on a GPU with room for it (`Shares`, `MigInstances`) where
        its budgets and quota allow its share; else room is made for it as for a one-GPU job
        where the rules allow; else it waits (nothing is reserved for it)."""
        share, seconds = workload.share, workload.time_limit_s
        if workload.mig and (never := self.mig.unknown(workload)):
            return self._no_fit(workload, never)
        if self.budgets:
            budget = refusal(self.budgets.check, queue, workload, share, seconds, not within)
            if budget is not None:
                return self._no_fit(workload, budget)
        quota = self.ledger.refusal(queue, workload.gpu_model, share)
        if quota is not None:
            return self._no_fit(workload, quota)
        try:
            pool = self.capacity.pool(queue.region, workload.gpu_model)
        except Inadmissible as why:
            return self._no_fit(workload, str(why))
        placer = self.mig if workload.mig else self.shares
        try:
            placement = self._share_apart(pool, workload) or placer.find(pool, workload)
        except Inadmissible as why:
            # No room: a GPU's room is made as for a one-GPU job (reclaim, or within its
            # queue), held for it, and it takes its share there next cycle.
            whole = replace(workload, slices=0, mig="")
            claim = self.find_room(pool, queue, whole, within, False)
            if claim is None:
                if self.reclaim_shares(pool, queue, workload, within):
                    return Outcome.PREEMPT
                return self._no_fit(workload, str(why))
            self.apply_claim(pool, queue, whole, claim)
            return Outcome.PREEMPT
        if not workload.mig:
            [placement] = self.mig.sliced_last(pool, (placement,))
        placer.take(pool, placement, workload)
        if workload.spread:
            self.spread[workload.spread].add(placement.node_id)
        self.ledger.charge(queue.id, workload.gpu_model, share)
        self.budgets.charge(queue.id, workload.gpu_model, share, seconds)
        self.admissions.append(Admission(workload.id, (placement,)))
        return Outcome.FIT

    def _start_smaller(self, pool: Pool, queue: Queue, workload: Workload) -> bool:
        """An elastic workload that can neither start at its size nor have room made for it
        starts at the largest size its quota allows and free GPUs hold (never by preempting),
        the largest first, down to the fewest on which it still ends sooner than by waiting
        for its size (`_fewest_sooner`)."""
        if not workload.is_elastic or workload.fewest_gpus >= workload.gpus:
            return False
        node, widest = pool.node_size, max(widest_level(workload), TopologyLevel.LEAF)
        largest = max(pool.best_whole(DEPTH[widest]) * node, pool.most_free(workload.tenant))
        largest = min(largest, workload.gpus - 1)
        if largest < workload.fewest_gpus:
            return False
        start_in_s = self._expected_start(queue.region, workload.gpu_model, workload.gpus)
        fewest = _fewest_sooner(workload, start_in_s)
        if fewest is None or fewest > largest:
            self._sized[workload.id] = start_in_s  # fewer are free, but it ends sooner waiting
            return False
        tries = 3  # placing can still fail (reservations keep it off): a few sizes more
        for gpus in _sizes_down(largest, fewest, node):
            if not self.ledger.allows(queue, workload.gpu_model, gpus):
                continue
            if self.admit(pool, queue, replace(workload, gpus=gpus)) is None:
                return True
            tries -= 1
            if not tries:
                break
        return False

    def _no_fit(self, workload: Workload, reason: str) -> Outcome:
        self.wait(workload, reason)
        return Outcome.NO_FIT

    def admit(self, pool: Pool, queue: Queue, workload: Workload) -> str | None:
        """Place the whole gang on free GPUs, or on held ones it may backfill; take them and
        charge the quota. The reason when there is no room, else None."""
        found, self._found = self._found, None
        if found is not None and found[:3] == (workload.id, workload.gpu_model, workload.gpus):
            self._book(pool, queue, workload, found[3])  # `_free_now` just found them
            return None
        no_room = pool.known_no_room(workload.gpus, workload.tenant)  # none has room
        if no_room is None:
            try:
                placements = self._placements(pool, workload)
            except Inadmissible as why:
                no_room = str(why)  # only the reason goes on: a frame holding `why` would be in
                # a reference cycle with it (exception, traceback, frame) until a collection
            else:
                self._book(pool, queue, workload, placements)
                return None
        return self._backfill(pool, queue, workload, no_room)

    def _placements(self, pool: Pool, workload: Workload) -> tuple[Placement, ...]:
        """Free GPUs for the workload (away from its spread group, by FGD where shares are
        about, else best-fit), or Inadmissible; takes nothing."""
        return (
            self._apart(pool, workload)
            or self.shares.find_small(pool, workload)
            or (pool.find(workload))
        )

    def _apart(self, pool: Pool, workload: Workload) -> tuple[Placement, ...]:
        """Room away from the other members of its spread group, or none."""
        used = self.spread.get(workload.spread) if workload.spread else None
        return pool.find_apart(workload, used) if used else ()

    def _share_apart(self, pool: Pool, workload: Workload) -> Placement | None:
        """A share's GPU away from the other members of its spread group (replicas of one
        service), or None."""
        used = self.spread.get(workload.spread) if workload.spread and workload.slices else None
        return self.shares.find_apart(pool, workload, used) if used else None

    def _backfill(self, pool: Pool, queue: Queue, workload: Workload, no_room: str) -> str | None:
        """Place the workload on GPUs held for reservations it may use, lent for the moment
        ("try, then restore"), or say why not, naming the reservations that keep it off."""
        reserved = [o for o in self.reserving.backfillable.get(pool, ()) if pool.held_nodes(o)]
        if not reserved:
            return no_room
        owners = []
        if not self.reserving.kept_out.threaten(workload, queue, self.ledger):
            owners = [
                owner
                for owner in reserved
                if may_backfill(self.holds[owner], workload, queue, self.ledger, self.now)
            ]
        if owners and self._fits_lent(pool, workload, owners, book=queue):
            return None
        kept_off = tuple((o, pool.held_nodes(o)) for o in reserved if o not in owners)
        self._keep_out(pool, queue, workload, [o for o, _ in kept_off])
        key = (no_room, kept_off)
        reason = self.reserving.kept_off.get(key)
        if reason is None:
            reason = self.reserving.kept_off[key] = kept_off_reason(no_room, dict(kept_off))
        return reason

    def _fits_lent(
        self, pool: Pool, workload: Workload, owners: list[int], book: Queue | None = None
    ) -> bool:
        """Whether the workload fits with the GPUs held for `owners` lent; booked there when
        `book` (its queue) is given."""
        with ExitStack() as stack:
            for owner in owners:
                stack.enter_context(pool.lent(owner))
            try:
                placements = pool.find(workload)
            except Inadmissible:
                return False
            if book is not None:
                self._book(pool, book, workload, placements)
            return True

    def _keep_out(self, pool: Pool, queue: Queue, workload: Workload, owners: list[int]) -> None:
        """Record a workload that reservations kept off GPUs it would fit on (see `KeptOut`)."""
        within = self.ledger.within_nominal(queue, workload.gpu_model, workload.gpus)
        if (
            owners
            and self.reserving.kept_out.adds(workload, queue, self.ledger, within)
            and (
                # It found no room: a small one would find it on the held nodes only.
                pool.fits_lent(workload.gpus, workload.tenant, owners)
                if workload.gpus < pool.node_size
                else self._fits_lent(pool, workload, owners)
            )
        ):
            self.reserving.kept_out.add(workload, queue, self.ledger, within)

    def _book(
        self, pool: Pool, queue: Queue, workload: Workload, placements: tuple[Placement, ...]
    ) -> None:
        placements = self.mig.sliced_last(pool, placements)
        for placement in placements:
            pool.take(placement, workload.tenant)
        self.ledger.charge(queue.id, workload.gpu_model, workload.gpus)
        self.budgets.charge(queue.id, workload.gpu_model, workload.gpus, workload.time_limit_s)
        self.occupancy.add_admitted(workload, placements)
        self.admissions.append(Admission(workload.id, placements))
        if workload.spread:
            self.spread[workload.spread].update(p.node_id for p in placements)

    # -- making room -------------------------------------------------------------------------

    def find_room(
        self, pool: Pool, queue: Queue, workload: Workload, within: bool, over_quota: bool
    ) -> Claim | None:
        """The cheapest set of moves that would let the workload start, or None (`within`:
        whether it fits in its queue's nominal quota).

        A queue makes room for one workload a cycle, or for several while each fits in its
        nominal quota (counting the room made before it): a queue far under its quota gets it
        back in one cycle, not one job a cycle. Skipped when the queue has used its searches
        that found nothing this cycle, when a workload as large of the same kind found no room
        earlier in the cycle (room only shrinks as it goes), and for quota when the queue is
        over what its quota allows even without the workload: preemption makes room for a
        workload, it does not enforce a lowered quota.
        """
        rooms = self.rooms
        if rooms.searches.get(queue.id, 0) >= SEARCHES_PER_QUEUE or (
            queue.id in rooms.claimed and not within
        ):
            return None
        if over_quota and not self.ledger.allows(queue, workload.gpu_model, 0):
            return None  # the queue is over its quota already: not this workload's to fix
        reclaims = queue.preemption.reclaim and (
            within or self._within_after_own(pool, queue, workload)
        )
        # Whether it may take from other queues (see `preemption`): to reclaim, no workload of
        # its queue that must borrow waits before it; to borrow, none at all.
        others = queue.id not in (rooms.borrowers_waiting if reclaims else rooms.queues_waiting)
        failed = rooms.no_victims.get(queue.id)
        if failed and workload.gpus >= failed.get(
            _room_kind(pool, workload, within, reclaims, others, over_quota), 1 << 62
        ):
            return None
        # A node's stopping work may seat a smaller job (shared with later ones).
        small = workload.gpus < pool.node_size
        room = stopping_room(pool, self.occupancy, workload.gpus) if small else None
        if room is not None and not over_quota:
            return room  # what the search would find, without it
        needed = workload.gpus - pool.free_gpus()
        if room is None and not self._could_free(pool, queue, workload, reclaims, needed):
            return None
        claimant = Claimant(workload, queue, workload.gpus, within, others, reclaims)
        claim = self._claim(pool, claimant, over_quota)
        if reclaims and not within:
            # It may also start by borrowing idle quota, evicting its own queue's work only:
            # the cheaper room wins (the one that leaves other queues alone, if as cheap).
            own = self._claim(pool, replace(claimant, takes_from_others=False), over_quota)
            if own is not None and (claim is None or own.cost <= claim.cost):
                claim = own
        if claim is None:
            rooms.searches[queue.id] += 1
            kind = _room_kind(pool, workload, within, reclaims, others, over_quota)
            failed = rooms.no_victims.setdefault(queue.id, {})
            failed[kind] = min(workload.gpus, failed.get(kind, 1 << 62))
        return claim

    def _within_after_own(self, pool: Pool, queue: Queue, workload: Workload) -> bool:
        """Whether the workload fits in its queue's nominal quota once the queue's own work of
        a lower priority is gone (so it may reclaim from others; Kueue, too, takes both)."""
        if not queue.preemption.within_queue:
            return False
        model = workload.gpu_model
        spare = self.ledger.nominal_room(queue, model)
        if spare <= 0:
            return False  # at its nominal quota already: it borrows, as in Kueue
        for victim in self.occupancy.ordered(pool, queue.id):
            if victim.priority >= workload.priority:
                break  # in value order: lowest priority first
            spare += victim.held
            if spare >= workload.gpus:
                return True
        return False

    def reclaim_shares(self, pool: Pool, queue: Queue, workload: Workload, within: bool) -> bool:
        """Take back a GPU that share and MIG jobs of borrowing queues hold, for a workload of
        one GPU or less that fits in its queue's nominal quota, which may reclaim (the victim
        search leaves such jobs out: stopping one frees part of a GPU, no whole one). Every
        job on the GPU goes, each of a queue of its cohort that borrows that model at the time
        and stays within its guarantee without it (so a lender's quota lent to a notebook
        comes back, as any lent quota), saving first as any preemption; a GPU whose jobs all
        stop already is waited for. The GPU with the fewest jobs to stop wins, then by node
        name and index. The workload waits while they stop, its quota charged; True if a GPU
        was found."""
        if not within or not queue.preemption.reclaim or queue.cohort is None:
            return False
        model = workload.gpu_model
        if workload.gpus > 1 or (queue.id, model) in self.rooms.no_share_gpu:
            return False
        root, best = self.ledger.root(queue), None
        for (node_id, index), jobs in self._fraction_gpus(pool).items():
            if (node_id, index) in self.rooms.reclaimed_gpus:
                continue
            moves, used = [], Counter()
            for job in jobs:
                if job.preempting:
                    moves.append(Step(MoveKind.RELEASING, Rule.RELEASING, job, {node_id: 1}))
                    continue
                other = self.ledger.queue_or_none(job.queue_id)
                if other is None or other.id == queue.id or self.ledger.root(other) != root:
                    break
                if self.ledger.borrowing(other, model, used[other.id]) <= 0:
                    break  # no longer borrowing: what it holds is its own
                used[other.id] += job.held
                staying = self.ledger.staying(other.id, model) - used[other.id]
                if staying < other.quota(model).guarantee:
                    break  # never below its guarantee, as `preemption`'s victims
                moves.append(Step(MoveKind.EVICT, Rule.RECLAIM, job, {node_id: 1}))
            else:
                key = (sum(m.kind == MoveKind.EVICT for m in moves), pool.node(node_id).name)
                if best is None or (key, index) < best[0]:
                    best = ((key, index), node_id, index, moves)
        if best is None:
            self.rooms.no_share_gpu.add((queue.id, model))
            return False
        _, node_id, index, moves = best
        self.rooms.reclaimed_gpus.add((node_id, index))
        claim = Claim(moves, TopologyLevel.LEAF, pool.domains_of(node_id)[-1], (node_id,))
        reason = self._claim_reason(queue, workload, claim)
        self.touched_queues = set()
        for move in moves:
            victim = move.workload
            if move.kind == MoveKind.EVICT:
                why = preemption_reason(self.ledger, move, queue, workload)
                self.preemptions.append(Preemption(victim.id, why, workload.id))
                self.ledger.stop(victim.queue_id, victim.gpu_model, victim.held)
                self.touched_queues.add(victim.queue_id)
        self.ledger.charge(queue.id, model, workload.share)
        self.budgets.charge(queue.id, model, workload.share, workload.time_limit_s)
        self.claims[queue.id, model] += workload.share
        self.rooms.claimed.add(queue.id)
        self.wait(workload, reason)
        return True

    def _fraction_gpus(self, pool: Pool) -> dict[tuple[int, int], list[Workload]]:
        """The pool's GPUs that share and MIG jobs hold, with those jobs (worked out once)."""
        found = self._fractions.get(pool)
        if found is None:
            found = self._fractions[pool] = defaultdict(list)
            for job in self.running:
                if job.fraction and job.gpu_model == pool.gpu_model:
                    [placement] = job.placements
                    if pool.node(placement.node_id) is not None:
                        found[placement.node_id, placement.gpu_indices[0]].append(job)
        return found

    def _claim(self, pool: Pool, claimant: Claimant, over_quota: bool) -> Claim | None:
        """The claimant's cheapest room under its queue's fair-sharing strategies, in turn."""
        policy = claimant.queue.preemption
        strategies = policy.fair_sharing.strategies
        for strategy in strategies if policy.borrows_over_others else strategies[:1]:
            search = VictimSearch(pool, self.ledger, self.occupancy, claimant, strategy)
            claim = self._search(search, pool, claimant.workload, over_quota)
            if claim is not None:
                return claim
        return None

    def _could_free(
        self, pool: Pool, queue: Queue, workload: Workload, reclaims: bool, needed: int
    ) -> bool:
        """Whether preemption could free `needed` GPUs for the workload, by a quick bound that
        spares a search which cannot succeed."""
        model = workload.gpu_model
        bound = self.occupancy.releasing_gpus(pool)
        policy = queue.preemption
        if policy.within_queue:
            bound += self.ledger.staying(queue.id, model)
        if bound >= needed:
            return True
        nested = len(self.ledger.path(queue)) > 2  # it may reclaim at a cohort's quota
        if queue.cohort is not None and (
            reclaims or policy.borrows_over_others or (nested and policy.reclaim)
        ):
            for other, used in self.ledger.borrowers(queue, model):
                if other.id != queue.id:
                    # Whole workloads go while their queue borrows: all above its guarantee.
                    bound += used - other.quota(model).guarantee
        return bound >= needed

    def _search(
        self, search: VictimSearch, pool: Pool, workload: Workload, over_quota: bool
    ) -> Claim | None:
        if not search.quota_in_reach():
            return None
        if over_quota:
            try:
                placements = pool.find(workload)
            except Inadmissible:
                pass  # no room either: the searches below free room and quota together
            else:
                return search.for_quota(tuple(p.node_id for p in placements))
        if workload.gpus < pool.node_size:
            return search.for_small()
        count = workload.gpus // pool.node_size
        if count > 1 and widest_level(workload) == TopologyLevel.NODE:
            return None  # no room made could ever put several nodes' GPUs on one node
        return search.for_gang(count)

    def apply_claim(self, pool: Pool, queue: Queue, workload: Workload, claim: Claim) -> None:
        """Record the claim's preemptions and shrinks, charge the claimant's quota and hold its
        room until its victims have stopped.

        The victims' quota stays charged for the rest of the cycle (marked as stopping), so that
        no other workload counts on quota that is not free yet.
        """
        reason = self._claim_reason(queue, workload, claim)
        self.touched_queues = set()
        evictions = [m for m in claim.moves if m.kind == MoveKind.EVICT]
        shrinks = [m for m in claim.moves if m.kind == MoveKind.SHRINK]
        evicted = {m.workload.id for m in evictions}
        shrunk: dict[int, list] = {}
        for move in evictions:
            why = preemption_reason(self.ledger, move, queue, workload)
            self.preemptions.append(Preemption(move.workload.id, why, workload.id))
        for move in shrinks:
            if move.workload.id not in evicted:
                shrunk.setdefault(move.workload.id, []).append(move)
        for moves in shrunk.values():
            self._shrink(moves, queue, workload)
        for move in evictions:
            victim = move.workload
            self.ledger.stop(victim.queue_id, victim.gpu_model, victim.held)
            self.touched_queues.add(victim.queue_id)
        for move in shrinks:
            self.occupancy.claim(pool, move.workload)
        self.ledger.charge(queue.id, workload.gpu_model, workload.gpus)
        self.budgets.charge(queue.id, workload.gpu_model, workload.gpus, workload.time_limit_s)
        self.claims[queue.id, workload.gpu_model] += workload.gpus
        small = workload.gpus < pool.node_size
        if not small:
            self.occupancy.hold(pool, workload.id, claim.nodes)
        for move in evictions:
            self.occupancy.evicted(pool, move.workload)
        if small:  # its victims' GPUs are room for it first, the rest for later claimants
            (node_id,) = claim.nodes
            self.occupancy.promise(pool, workload.id, node_id, workload.gpus)
        reservation = Reservation(
            workload.id, claim.level, claim.domain, claim.nodes, self.now, reason
        )
        self.holds[workload.id] = Hold(reservation, workload, queue, True, backfill=False)
        self.rooms.claimed.add(queue.id)
        self.wait(workload, reason)

    def _claim_reason(self, queue: Queue, workload: Workload, claim: Claim) -> str:
        """`claim_reason`; for a claim that only waits for stopping work, worded once per kind
        (it names neither the claimant nor its queue then)."""
        if any(move.kind != MoveKind.RELEASING for move in claim.moves):
            return claim_reason(self.ledger, claim, queue, workload)
        stopping = len({move.workload.id for move in claim.moves})
        key = (stopping, claim.level, claim.domain)
        reason = self.rooms.stopping_reasons.get(key)
        if reason is None:
            reason = claim_reason(self.ledger, claim, queue, workload)
            self.rooms.stopping_reasons[key] = reason
        return reason

    def _shrink(self, moves: list, queue: Queue, workload: Workload) -> None:
        victim = moves[0].workload
        freed: Counter[int] = Counter()
        for move in moves:
            freed.update(move.frees)
        released = [
            Placement(p.node_id, p.gpu_indices[-freed[p.node_id] :])
            for p in victim.placements
            if freed[p.node_id]
        ]
        gpus = sum(len(p.gpu_indices) for p in released)
        keep = victim.held - gpus
        reason = shrink_reason(self.ledger, moves[0], keep, queue, workload)
        self.shrinks.append(Shrink(victim.id, keep, tuple(released), reason, workload.id))
        self.ledger.stop(victim.queue_id, victim.gpu_model, gpus)
        self.touched_queues.add(victim.queue_id)

    # -- reservations ------------------------------------------------------------------------

    def maybe_reserve(self, pool: Pool, queue: Queue, workload: Workload, reason: str) -> str:
        """Reserve a domain for a multi-node gang at the head of its queue; the reason it waits."""
        owners = self.reserving.backfillable.setdefault(pool, [])
        if (
            workload.gpus <= pool.node_size
            or queue.id in self.reserving.queues
            or len(owners) >= MAX_PER_POOL
        ):
            return reason
        self.reserving.queues.add(queue.id)
        reservation = reserve(pool, self.occupancy, workload)
        if reservation is None:
            return reason
        owners.append(workload.id)
        self.occupancy.hold(pool, workload.id, reservation.nodes)
        within = self.ledger.within_nominal(queue, workload.gpu_model, workload.gpus)
        self.holds[workload.id] = Hold(reservation, workload, queue, within)
        return AND_SO.format(reason=reason, then=reservation.reason)


def _fewest_sooner(workload: Workload, start_in_s: float | None) -> int | None:
    """The fewest GPUs, from its minimum, on which an elastic workload ends sooner than on its
    size once that is free, in `start_in_s` (`Cycle._expected_start`): its run time
    (`Workload.run_s`) stretched by its curve (`Workload.rate`). A job started on one GPU when
    it wanted eight runs eight times as long (it grows only once nothing waits) and holds the
    GPU all that time. Its minimum where either time is not known; None where no size below
    its own ends sooner (it waits for its size)."""
    run_s = workload.run_s(workload.gpu_model)
    if run_s is None or start_in_s is None:
        return workload.fewest_gpus
    full = workload.rate(workload.gpus)
    for gpus in range(workload.fewest_gpus, workload.gpus):
        rate = workload.rate(gpus)
        if rate > 0 and run_s * full / rate < start_in_s + run_s:
            return gpus
    return None


def _sizes_down(most: int, fewest: int, node: int) -> Iterator[int]:
    """Shape-valid GPU counts from `most` down to `fewest`: whole nodes above one node."""
    gpus = most if most <= node else most - most % node
    while gpus >= fewest and gpus > 0:
        yield gpus
        gpus = gpus - node if gpus > node else gpus - 1


def _room_kind(
    pool: Pool, workload: Workload, within: bool, reclaims: bool, others: bool, over: bool
) -> tuple:
    """What, besides its queue and size, decides whether a search finds room for a workload
    (`Cycle.find_room`): where one found none, another of the kind at least as large finds
    none."""
    small = workload.gpus < pool.node_size
    return (
        pool.gpu_model,
        within,
        reclaims,
        others,
        workload.priority,
        widest_level(workload),
        small,
        over,
    )
