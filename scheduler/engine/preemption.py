"""Preemption: which running work to stop (or shrink) so that a waiting workload can start.

Who may be preempted, by a claimant of queue Q (Q's PreemptionPolicy, in Kueue's names; where
Wanka decides differently from Kueue, docs/adr/0003-differences-from-kueue.md says why):
- reclaim (`reclaim_within_cohort`, Any or LowerPriority than the claimant): borrowed work of
  other queues of Q's cohort tree, taken only from a queue while it still borrows (uses more
  than its nominal quota, and in nested cohorts its branch more than the branch's quota).
  Open when the claimant fits in Q's nominal quota, counting Q's own lower-priority work it
  may evict as gone (then it must end within that quota), or, in nested cohorts, from a queue
  in another branch when a subtree on Q's path, no higher than Q's branch where the two meet,
  has quota for it (Kueue's hierarchical reclaim);
- within queue (`within_cluster_queue`): work of Q itself with a lower priority than the
  claimant, or also of its priority but submitted later (LowerOrNewerEqualPriority);
- borrow within cohort: when the claimant must borrow, borrowed work of other queues of the tree
  whose priority is below the claimant's and at most Q's `max_priority_threshold`, or any that
  reclaim allows with `preempt_by_fair_share`, as long as Q's `fair_sharing` strategy allows it
  (LessThanOrEqualToFinalShare: Q's share with the claimant stays at or below the victim
  queue's share after this victim; LessThanInitialShare: below it before this victim; both:
  the first, then the second), so that fair sharing does not hand the room back; and in nested
  cohorts only a victim that, requeued, must borrow from as high in the tree as the claimant
  (else it would be admitted first next cycle, and preempted again the cycle after).
Taking from other queues is open to a claimant only where the next cycle gives the room back to
it, not to its victims. Reclaim: to a claimant that fits in Q's nominal quota (counting the
room made for Q earlier in the cycle, so a queue far under its quota gets it back at once)
while no workload of Q that must borrow was left waiting before it: the next cycle then takes
Q's work up to the claimant before any work that must borrow (`ordering`: within the nominal
quota first, across queues and among a queue's workloads of one priority; in nested cohorts a
borrower with quota in a lower cohort before one that must go higher). Borrowing: only to
the first workload of Q left waiting in the cycle, which the next cycle orders Q by (Kueue,
too, lets only queue heads preempt). Any claimant may preempt lower-priority work of its own
queue, which always comes after it.
Work inside a queue's guarantee is never preempted: no victim may take its queue below its
guarantee (counting the claimant, when the victim is of the claimant's own queue). Work
already stopping (preempted in an earlier cycle, or earlier in this one) is free room, node by
node, for whoever holds the node first: a victim of 64 nodes evicted for a claimant of one
leaves 63 to later claimants, which would otherwise evict more work beside GPUs about to be
free. Victims come only from the claimant's own pool (region and GPU model), where its GPUs
would come from.

Moves are tried in this order: workloads already stopping; shrinking elastic workloads down to
their minimum; then evictions: other queues before the claimant's own, the queue with the
highest fair share (DRS) first, then the lowest priority, the least work lost since the last
checkpoint (GPU-seconds), the most recently started, the lowest id (`occupancy.value`).
Rooms are compared by `VictimSearch._cost`: a room that evicts none of the claimant's own work
beats one that does (Kueue, too, takes other queues' candidates first).

Search, in two phases. Room: for a gang, every domain the gang may use, tightest level first;
in each, the moves that touch its nodes are taken in order until enough whole nodes are free,
then every move not needed is dropped again (the most valuable first). For a smaller job the
same on each node, counting GPUs that stopping work frees there as free; a node where those
alone make room costs nothing and is found at once (`Occupancy.soon_room`). The cheapest room
wins (`_cost`; ties: the domain's name, or for a node the fewest GPUs free now or soon, then
its name), so victims sit together rather than scattered. Quota: if
the claimant's queue still may not take the GPUs, further moves are taken in order until it may,
and the set is minimised again. Only the quota phase touches the ledger, and undoes its changes.
A claimant that may reclaim but could also evict its own work alone is searched both ways, and
the cheaper room wins (`Cycle.find_room`).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping

from scheduler.engine.capacity import Pool
from scheduler.engine.model import (
    FairSharing,
    Queue,
    ReclaimWithinCohort,
    TopologyLevel,
    WithinClusterQueue,
    Workload,
)
from scheduler.engine.moves import Claim, Claimant, Move, MoveKind, Rule
from scheduler.engine.occupancy import Occupancy, QueueMoves, held_per_node
from scheduler.engine.ordering import queue_order
from scheduler.engine.quota import QuotaLedger
from scheduler.engine.stopping import (
    NO_COST,
    FreeGPUs,
    releasing_move,
    stopping_moves,
)
from scheduler.engine.topology import DEPTH, Domain, levels_up_to, widest_level
from scheduler.engine.trial import Trial, freed_at_least, minimise

# Victim searches that find no room a queue may run per cycle. This bounds a cycle's cost; the
# queue's other workloads try again next cycle. (Searches that find room are bounded by the
# queue's quota: only one, or as many as fit in its nominal quota; see `Cycle.find_room`.)
SEARCHES_PER_QUEUE = 2


class VictimSearch:
    """Finds the cheapest room for one claimant in one pool; see the module docstring."""

    def __init__(
        self,
        pool: Pool,
        ledger: QuotaLedger,
        occupancy: Occupancy,
        claimant: Claimant,
        strategy: FairSharing | None = None,
    ) -> None:
        self.pool = pool
        # The fair-sharing strategy of this search: the queue's, or one of its list.
        self.strategy = claimant.queue.preemption.fair_sharing if strategy is None else strategy
        self.ledger = ledger
        self.occupancy = occupancy
        self.claimant = claimant
        self.now = occupancy.now
        self._usage_before = ledger.staying(claimant.queue.id, claimant.workload.gpu_model)
        self._claimant_share = ledger.share(
            claimant.queue, claimant.workload.gpu_model, claimant.gpus
        )
        self._newer_equal = (
            claimant.queue.preemption.within_cluster_queue
            == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
        )
        self._moves: list[Move] | None = None
        self._segments: list[tuple[int, int]] = []  # each victim queue's evictions in moves
        self._shares: dict[int, float] = {}  # fair share of each other victim queue
        self._depth: float | None = None  # see `_fit_depth`

    # -- candidates --------------------------------------------------------------------------

    def moves(self) -> list[Move]:
        """Every move open to the claimant, in the order they are tried: stopping work (for a
        gang), then shrinks, then evictions, the latter in one segment per victim queue."""
        if self._moves is None:
            # A smaller job's rooms count stopping work as free GPUs (`FreeGPUs`) instead.
            gang = self.claimant.gpus >= self.pool.node_size
            releasing = self.occupancy.releasing[self.pool].values() if gang else ()
            found = [releasing_move(self.occupancy, w) for w in releasing]
            shrinks: list[Move] = []
            evictions: list[Move] = []
            segments = []
            for rule, queue_id, below in self._victim_queues():
                queue_shrinks, taken = self._taken(self._queue_moves(rule, queue_id), rule, below)
                if taken:
                    shrinks += queue_shrinks
                    segments.append((len(evictions), len(evictions) + len(taken)))
                    evictions += taken
            offset = len(found) + len(shrinks)
            self._segments = [(start + offset, end + offset) for start, end in segments]
            self._moves = found + shrinks + evictions
        return self._moves

    def _victim_queues(self) -> Iterable[tuple[Rule, int, float | None]]:
        """(rule, queue id, priority its victims must be below) in victim order: other queues
        by falling share, then the claimant's own."""
        queue = self.claimant.queue
        policy = queue.preemption
        priority = self.claimant.workload.priority
        lower = policy.reclaim_within_cohort == ReclaimWithinCohort.LOWER_PRIORITY
        borrow = policy.borrow_ceiling(priority)
        borrows = not (self.claimant.within_nominal or self.claimant.reclaims)
        for _, other_id in self._other_queues():
            if self._reclaims_from(other_id):
                yield Rule.RECLAIM, other_id, priority if lower else None
            elif borrow is not None and borrows:
                yield Rule.BORROW, other_id, borrow
        if policy.within_queue:
            yield Rule.PRIORITY, queue.id, priority

    def _reclaims_from(self, other_id: int) -> bool:
        """Whether the claimant may take back what another queue borrows (Kueue's
        hierarchical reclaim): some subtree on its path, no higher than its branch where the
        two paths meet, has quota for it. In one flat cohort that subtree is the claimant's
        queue (`Claimant.reclaims`)."""
        queue = self.claimant.queue
        if not queue.preemption.reclaim:
            return False
        mine, _ = self.ledger.branches(queue, self.ledger.queue(other_id))
        return self._fit_depth() <= self.ledger.path(queue).index(mine)

    def _fit_depth(self) -> float:
        """How far up its path the claimant finds quota for itself: 0 at its queue (counting
        the queue's own work it may evict), 1 at its cohort, ...; inf if nowhere."""
        if self._depth is None:
            claimant, queue = self.claimant, self.claimant.queue
            path, model = self.ledger.path(queue), claimant.workload.gpu_model
            fits = (
                depth
                for depth in range(1, len(path))
                if self.ledger.fits_at(path[depth], queue, model, claimant.gpus)
            )
            self._depth = 0 if claimant.reclaims else next(fits, math.inf)
        return self._depth

    def _queue_moves(self, rule: Rule, queue_id: int) -> QueueMoves:
        """A queue's moves under a rule; made once a cycle (`Occupancy.claim` keeps them
        current), so not kept per workload as `_cached` keeps them."""
        by_rule = self.occupancy.queue_moves.setdefault((self.pool, queue_id), {})
        found = by_rule.get(rule)
        if found is None:
            members = self.occupancy.ordered(self.pool, queue_id)
            shrinks = []
            for workload in members:
                if workload.is_elastic:
                    shrinks += self._shrink_moves(rule, workload)
            evictions = [Move(MoveKind.EVICT, rule, w, held_per_node(w)) for w in members]
            found = by_rule[rule] = QueueMoves(shrinks, evictions, [w.priority for w in members])
        return found

    def _taken(
        self, moves: QueueMoves, rule: Rule, below: float | None
    ) -> tuple[list[Move], list[Move]]:
        """A victim queue's shrinks (losing least throughput first) and evictions open to the
        claimant: those of work below the priority bound `below`. Kept per bound (but for
        LowerOrNewerEqualPriority, whose take depends on the claimant)."""
        newer = rule == Rule.PRIORITY and self._newer_equal
        found = None if newer else moves.taken.get(below)
        if found is None:
            priorities = moves.priorities
            count = len(priorities) if below is None else bisect_left(priorities, below)
            taken = moves.evictions[:count]
            shrinks = [m for m in moves.shrinks if below is None or m.workload.priority < below]
            if newer:
                # Kueue's LowerOrNewerEqualPriority: also work of the claimant's priority
                # submitted after it (still in value order: it comes next).
                for move in moves.evictions[count : bisect_right(priorities, below)]:
                    if move.workload.submitted_at > self.claimant.workload.submitted_at:
                        *shrink, evict = self._cached(Rule.NEWER, move.workload)
                        shrinks += shrink
                        taken.append(evict)
            # In each victim queue's turn, shrinks losing least throughput first.
            found = (_by_throughput_lost(shrinks), taken)
            if not newer:
                moves.taken[below] = found
        return found

    def _other_queues(self) -> list[tuple[float, int]]:
        """(-share, id) of the other borrowing queues of the claimant's cohort tree, highest
        share first; none when no rule could take from them."""
        claimant, queue = self.claimant, self.claimant.queue
        policy = queue.preemption
        if queue.cohort is None or not claimant.takes_from_others:
            return []
        if not (policy.reclaim or policy.borrows_over_others):
            return []
        model = claimant.workload.gpu_model
        candidates = self.occupancy.candidates[self.pool]
        found = []
        ledger = self.ledger
        for other, _ in ledger.borrowers(queue, model):
            other_id = other.id
            if other_id == queue.id or not candidates.get(other_id):
                continue
            _, branch = ledger.branches(queue, other)
            # A branch that is the other queue itself is over its quota as it borrows.
            if branch[0] == "q" or ledger.over_quota(branch, model):
                share = ledger.share(other)
                self._shares[other_id] = share
                found.append((-share, other_id))
        return sorted(found)

    def _cached(self, rule: Rule, workload: Workload) -> list[Move]:
        """The workload's shrink moves (if elastic) and, last, its eviction, made once a cycle."""
        key = (workload.id, rule)
        moves = self.occupancy.moves.get(key)
        if moves is None:
            evict = Move(MoveKind.EVICT, rule, workload, held_per_node(workload))
            moves = self.occupancy.moves[key] = [*self._shrink_moves(rule, workload), evict]
        return moves

    def _shrink_moves(self, rule: Rule, workload: Workload) -> list[Move]:
        """A multi-node workload shrinks by whole nodes (its last ones first), a one-node one
        by GPUs on its node; never below its minimum."""
        if not workload.is_elastic:
            return []
        if workload.held <= workload.fewest_gpus:
            return []
        size = self.pool.node_size
        if len(workload.placements) > 1:
            keep_nodes = max(1, -(-workload.fewest_gpus // size))
            spare = workload.placements[keep_nodes:][::-1]
            return [
                Move(MoveKind.SHRINK, rule, workload, {p.node_id: len(p.gpu_indices)})
                for p in spare
            ]
        node = workload.placements[0].node_id
        spare_gpus = workload.held - workload.fewest_gpus
        return [Move(MoveKind.SHRINK, rule, workload, {node: spare_gpus})]

    def guard(self, move: Move, gpus: int, released: Mapping[int, int] | None) -> bool:
        """Whether taking `gpus` GPUs from the move's workload keeps the rules: its queue stays
        at or above its guarantee, and reclaim and borrow moves take only from a queue that
        still borrows. `released`: GPUs per queue the moves so far release, when the ledger
        does not show them yet."""
        workload = move.workload
        model = workload.gpu_model
        victim_queue = self.ledger.queue_or_none(workload.queue_id)
        if victim_queue is None:
            return True
        gone = released.get(victim_queue.id, 0) if released is not None else 0
        used = self.ledger.staying(victim_queue.id, model) - gone
        guarantee = victim_queue.quota(model).guarantee
        if move.rule in (Rule.PRIORITY, Rule.NEWER):
            after = used - gpus + self.claimant.gpus
            return after >= min(self._usage_before, guarantee)
        if self.ledger.borrowing(victim_queue, model, gone) <= 0 or used - gpus < guarantee:
            return False
        _, branch = self.ledger.branches(self.claimant.queue, victim_queue)
        if branch[0] == "c":
            # Its cohort, too, must still borrow from where it meets the claimant's.
            inside = 0
            if released is not None:
                path = self.ledger.path
                queue_of = self.ledger.queue
                inside = sum(g for q, g in released.items() if branch in path(queue_of(q)))
            if not self.ledger.over_quota(branch, model, inside):
                return False
        if move.rule == Rule.BORROW:
            return self._fair(victim_queue, workload, gone, gpus) and self._back_after(
                victim_queue, workload, gpus, released
            )
        return True

    def _back_after(
        self, victim_queue: Queue, victim: Workload, gpus: int, released: Mapping[int, int] | None
    ) -> bool:
        """Whether a borrowed victim, requeued, comes after the claimant at the next cycle's
        first criterion (`ordering.head_key`): it must borrow from as high in the cohort tree as
        the claimant (Kueue's borrowing level), both weighed with the moves so far and this one
        gone. Else the victim would take its quota back first and the claimant would preempt it
        again, cycle after cycle."""
        ledger, claimant = self.ledger, self.claimant
        model = victim.gpu_model
        gone = dict(released or {})
        gone[victim_queue.id] = gone.get(victim_queue.id, 0) + gpus
        for queue_id, freed in gone.items():
            ledger.release(queue_id, model, freed)
        try:
            mine = ledger.level(claimant.queue, model, claimant.gpus)
            return mine <= ledger.level(victim_queue, model, victim.gpus)
        finally:
            for queue_id, freed in gone.items():
                ledger.charge(queue_id, model, freed)

    def _fair(self, victim_queue: Queue, victim: Workload, gone: int, gpus: int) -> bool:
        """Whether the claimant's queue may take `gpus` more borrowed GPUs from `victim_queue`
        (`gone` taken already) under its fair-sharing strategy (`FairSharing`): its share with
        the claimant against the victim queue's share after this victim, or before it."""
        strategy = self.strategy
        model = victim.gpu_model
        before = gone + self.ledger.stopping[victim_queue.id, model]
        share_before = self.ledger.share(victim_queue, model, -before)
        if strategy == FairSharing.OFF:
            # No fairness asked for, only what keeps the room with the claimant: it comes
            # before the victim next cycle (borrowers go by share, then `queue_order`; else
            # the victim would start first and be preempted again, cycle after cycle).
            if self._claimant_share != share_before:
                return self._claimant_share < share_before
            claimant = self.claimant
            mine = queue_order(claimant.workload, claimant.queue.priority)
            return mine < queue_order(victim, victim_queue.priority)
        if strategy == FairSharing.LESS_THAN_INITIAL_SHARE:
            return self._claimant_share < share_before
        return self._claimant_share <= self.ledger.share(victim_queue, model, -(before + gpus))

    def quota_ok(self, trial: Trial) -> bool:
        """Whether the claimant's queue may take its GPUs (with a live trial's releases): a
        claimant that takes back borrowed work must end within its nominal quota."""
        claimant = self.claimant
        if claimant.within_nominal:
            return True
        model = claimant.workload.gpu_model
        if trial.rules[Rule.NEWER] or (trial.rules[Rule.RECLAIM] and claimant.reclaims):
            # It takes work that would otherwise come back before it next cycle: it must end
            # within its nominal quota, where the next cycle orders it first.
            return self.ledger.within_nominal(claimant.queue, model, claimant.gpus)
        return self.ledger.allows(claimant.queue, model, claimant.gpus)

    # -- rooms -------------------------------------------------------------------------------

    def for_gang(self, count: int) -> Claim | None:
        """Room for `count` whole nodes in one domain the claimant may use."""
        moves = self.moves()
        if not moves:
            return None
        by_node, completable = self._completable(moves)
        domains_of = self.pool.domains_of
        for level in levels_up_to(widest_level(self.claimant.workload)):
            depth = DEPTH[level]
            if self.pool.largest(depth) < count:
                continue  # no domain of this level has as many nodes
            # The freeable nodes of each domain of the level.
            within: dict[Domain, dict[int, int]] = defaultdict(dict)
            for node, missing in completable.items():
                within[domains_of(node)[depth]][node] = missing
            rooms = []
            for domain in sorted(within):
                needed = count - self.pool.whole(domain)
                inside = within[domain]
                if len(inside) < needed:
                    continue
                indexes = sorted({i for node in inside for i in by_node[node]})
                trial = self._room(moves, indexes, inside, needed)
                if trial is not None:
                    rooms.append((self._cost(trial.moves()), domain, needed, trial))
            if rooms:
                _, domain, needed, trial = min(rooms, key=lambda room: room[:2])
                return self._gang_claim(level, domain, count, needed, trial)
        return None

    def _gang_claim(
        self, level: TopologyLevel, domain: Domain, count: int, needed: int, trial: Trial
    ) -> Claim | None:
        enough = freed_at_least(needed)
        if not self._settle_quota(trial, lambda: enough(trial)):
            return None
        made = [n for n, m in trial.missing.items() if m <= 0]
        moves = trial.moves()
        return Claim(moves, level, domain, self._gang_nodes(domain, made, count), self._cost(moves))

    def for_small(self) -> Claim | None:
        """Room for a job smaller than a node, on one node.

        Nodes are weighed by the cheapest room each offers, looked at in three passes so that
        a search never runs the full greedy on every node: rooms that evict nobody (stopping
        or elastic work), then rooms that evict one workload, then rooms of several victims,
        but only on nodes that could still beat the best so far (all victims of lower
        priority than its).
        """
        gpus, occupancy = self.claimant.gpus, self.occupancy
        free = FreeGPUs(self.pool, gpus, occupancy.soon)
        node_id = occupancy.soon_room(self.pool, gpus, free.__getitem__)
        chosen: list[int] = []
        if node_id is None:  # no room of stopping work alone, which costs nothing
            moves = self.moves()
            if not moves:
                return None
            rooms = self._gentle_rooms(moves, free) + self._single_rooms(moves, free)
            best = min(rooms, key=lambda room: room[:4], default=None)
            bar = best[0][:2] if best is not None else (True, math.inf)
            if self._lowest_victim(moves, bar, free) < bar:
                below = [
                    i
                    for i, move in enumerate(moves)
                    if move.kind != MoveKind.EVICT or self._rank(move.workload) < bar
                ]
                rooms += self._rooms_on(moves, below, free, evicting=True)
            if not rooms:
                return None
            *_, node_id, chosen = min(rooms, key=lambda room: room[:4])
        missing = gpus - len(self.pool.free(node_id))
        trial = Trial(self, {node_id: missing})
        for move in stopping_moves(occupancy, node_id, missing):
            trial.take(move)
        for index in chosen:
            trial.take(self.moves()[index])
        if not self._settle_quota(trial, lambda: trial.done >= 1):
            return None
        domain = self.pool.domains_of(node_id)[-1]
        return Claim(
            trial.moves(), TopologyLevel.LEAF, domain, (node_id,), self._cost(trial.moves())
        )

    def _lowest_victim(self, moves: list[Move], below: tuple, free: FreeGPUs) -> tuple:
        """The lowest `_rank`, if below `below`, of a victim that could be in a room of several
        evictions: one on a node the claimant may use that is elastic or that the rules let go
        on its own (with others it only releases more of its queue, so if it may not go alone
        it may not go with them)."""
        lowest = below
        for start, end in self._segments:
            for _, move in self._in_reach(moves, start, end):
                workload = move.workload
                if self._rank(workload) >= lowest:
                    break  # a segment is in value order, lowest priority first
                if any(free[node] is not None for node in move.frees) and (
                    workload.is_elastic or self.guard(move, sum(move.frees.values()), {})
                ):
                    lowest = self._rank(workload)
                    break
        return lowest

    def _in_reach(self, moves: list[Move], start: int, end: int) -> Iterator[tuple[int, Move]]:
        """(index, move) of the evictions at `start:end` that free GPUs on a node a small job
        could use: one not held for a reservation, and schedulable (see
        `Occupancy.out_of_reach`)."""
        out, held, nodes = self.occupancy.out_of_reach, self.pool.held_by, self.pool.node_ids()
        for index in range(start, end):
            move = moves[index]
            if move.workload.id in out:
                continue
            if all(n in held or n not in nodes for n in move.frees):
                out.add(move.workload.id)
                continue
            yield index, move

    def _rooms_on(
        self, moves: list[Move], indexes: list[int], free: FreeGPUs, evicting: bool
    ) -> list[tuple]:
        """Rooms made by the moves at `indexes`, on each node where one of them frees GPUs
        (where one of the evictions does, if `evicting`)."""
        by_node = _index(moves, indexes)
        rooms = []
        for node_id in sorted(by_node):
            here = by_node[node_id]
            if free[node_id] is None or (
                evicting and all(moves[i].kind != MoveKind.EVICT for i in here)
            ):
                continue
            chosen = self._node_room(node_id, self.claimant.gpus - free[node_id], moves, here)
            if chosen is not None:
                rooms.append(self._small_room(moves, chosen, node_id, free[node_id]))
        return rooms

    def _small_room(self, moves: list[Move], chosen: list[int], node_id: int, free: int) -> tuple:
        """A room on one node, comparable by (cost, free GPUs, name, id)."""
        return (
            self._cost([moves[i] for i in chosen]),
            free,
            self.pool.node(node_id).name,
            node_id,
            chosen,
        )

    def _gentle_rooms(self, moves: list[Move], free: FreeGPUs) -> list[tuple]:
        """Rooms made by shrinking elastic work alone (beside GPUs free now or soon). A
        multi-node elastic workload's shrink moves each give back one whole node, so only its
        first is looked at."""
        gentle, seen = [], set()
        for index, move in enumerate(moves):
            if move.kind == MoveKind.EVICT:
                break  # evictions come last
            if move.workload.id in seen:
                continue
            seen.add(move.workload.id)
            gentle.append(index)
        return self._rooms_on(moves, gentle, free, evicting=False) if gentle else []

    def _single_rooms(self, moves: list[Move], free: FreeGPUs) -> list[tuple]:
        """The cheapest room of one eviction, if one suffices on some node: in each victim
        queue, the first victim (in value order) that frees enough on its node."""
        best = None
        for start, end in self._segments:
            # Keys only grow along a segment: skipping those out of reach misses no break.
            for index, move in self._in_reach(moves, start, end):
                workload = move.workload
                key = (
                    *self._rank(workload),
                    1,
                    -self._shares.get(workload.queue_id, 0.0),
                    self.occupancy.value(workload)[1],
                    0,
                )
                if best is not None and key > best[0]:
                    break  # later victims of this queue are worth more still
                room = self._single_on(move, key, index, free)
                if room is not None:
                    if best is None or room[:4] < best[:4]:
                        best = room
                    break
        return [best] if best is not None else []

    def _single_on(self, move: Move, key: tuple, index: int, free: FreeGPUs) -> tuple | None:
        """The best node where evicting only `move` makes room, if the rules allow it."""
        room = None
        frees = move.frees
        for name, node_id in self.occupancy.nodes_by_name(move.workload):
            have = free[node_id]
            if have is None or have + frees[node_id] < self.claimant.gpus:
                continue
            if room is None or have < room[1]:  # by name already: fewer free GPUs to win
                room = (key, have, name, node_id, [index])
                if not have:
                    break  # none can beat it
        if room is None or not self.guard(move, sum(move.frees.values()), {}):
            return None
        return room

    def _node_room(
        self, node_id: int, missing: int, moves: list[Move], indexes: list[int]
    ) -> list[int] | None:
        """Indexes of the moves that free `missing` GPUs on one node: taken in order, then
        minimised. A light `_room` for the many nodes a small job could use."""
        if missing <= 0:
            return []
        chosen: list[int] = []
        freed = 0
        released: Counter[int] = Counter()
        taken: Counter[int] = Counter()  # workload -> GPUs freed on this node so far
        contributed: dict[int, int] = {}  # move index -> GPUs it freed here
        for index in indexes:
            if freed >= missing:
                break
            move = moves[index]
            workload = move.workload
            here = min(
                move.frees[node_id],
                self.occupancy.held_on(workload).get(node_id, 0) - taken[workload.id],
            )
            if here <= 0:
                continue
            gpus = sum(move.frees.values()) if not taken[workload.id] else here
            if not self.guard(move, gpus, released):
                continue
            released[workload.queue_id] += gpus
            chosen.append(index)
            contributed[index] = here
            taken[workload.id] += here
            freed += here
        if freed < missing:
            return None
        for index in reversed(list(chosen)):
            wid, here = moves[index].workload.id, contributed[index]
            # A workload's shrink and eviction go together: drop a move only if it is its
            # workload's one move here.
            if freed - here >= missing and taken[wid] == here:
                chosen.remove(index)
                taken[wid] -= here
                freed -= here
        return chosen

    def _cost(self, moves: list[Move]) -> tuple:
        """How much a room costs; smaller is better.

        Criteria, in order: whether it evicts work of the claimant's own queue (other queues'
        borrowed work goes first, as in Kueue), the highest priority evicted (shrinks and
        stopping work alone beat any eviction), the number of evictions, the lowest fair share
        among the victims' queues, negated (taking from queues that borrow more is cheaper),
        the work the evictions lose, the throughput the shrinks lose (in GPUs of each job's
        average speed: the GPUs shrunk, for jobs that scale linearly).
        """
        evicted = [m.workload for m in moves if m.kind == MoveKind.EVICT]
        shrunk = _throughput_lost([m for m in moves if m.kind == MoveKind.SHRINK])
        if not evicted:
            return (*NO_COST[:-1], shrunk)
        value, share, own = self.occupancy.value, self._shares, self.claimant.queue.id
        return (
            any(w.queue_id == own for w in evicted),
            max(w.priority for w in evicted),
            len(evicted),
            -min(share.get(w.queue_id, 0.0) for w in evicted),
            sum(value(w)[1] for w in evicted),
            shrunk,
        )

    def _rank(self, workload: Workload) -> tuple[bool, int]:
        """A victim's place in the first two criteria of `_cost`; a room never ranks below
        any of its victims."""
        return (workload.queue_id == self.claimant.queue.id, workload.priority)

    def for_quota(self, nodes: tuple[int, ...]) -> Claim | None:
        """Room in quota only: the claimant fits on free GPUs (`nodes`) but its queue may not
        take them until other work stops."""
        trial = Trial(self, {})
        if not self._settle_quota(trial, lambda: True) or not trial.taken:
            return None
        moves = trial.moves()
        return Claim(moves, TopologyLevel.ANY, (), nodes, self._cost(moves))

    def _room(
        self,
        moves: list[Move],
        indexes: list[int],
        missing: dict[int, int],
        targets: int,
    ) -> Trial | None:
        """Take the moves at `indexes` in order until `targets` of the nodes in `missing` are
        freed, then drop those not needed."""
        trial = Trial(self, dict(missing))
        for index in indexes:
            if trial.done >= targets:
                break
            if trial.allows(moves[index]):
                trial.take(moves[index])
        if trial.done < targets:
            return None
        minimise(trial, lambda: trial.done >= targets, targets)
        return trial

    def quota_in_reach(self) -> bool:
        """Whether the claimant's quota could allow it with all the quota its moves could
        release released: else no room is worth searching for, as none would settle its quota
        (`_settle_quota`: quota only loosens as moves release GPUs, and `quota_ok` asks at
        least what `QuotaLedger.allows` does)."""
        claimant, ledger = self.claimant, self.ledger
        model = claimant.workload.gpu_model
        if claimant.within_nominal or ledger.allows(claimant.queue, model, claimant.gpus):
            return True
        most: dict[int, int] = {}  # queue id -> GPUs of its workloads among the moves
        seen = set()
        for move in self.moves():
            workload = move.workload
            if move.rule != Rule.RELEASING and workload.id not in seen:
                seen.add(workload.id)
                most[workload.queue_id] = most.get(workload.queue_id, 0) + workload.held
        for queue_id, gpus in most.items():
            ledger.release(queue_id, model, gpus)
        try:
            return ledger.allows(claimant.queue, model, claimant.gpus)
        finally:
            for queue_id, gpus in most.items():
                ledger.charge(queue_id, model, gpus)

    def _settle_quota(self, trial: Trial, enough: Callable[[], bool]) -> bool:
        """Top the room's moves up until the claimant's quota allows it, then minimise again."""
        if self.quota_ok(trial):
            return True
        with trial.on_ledger():
            chosen = {id(move) for move in trial.moves()}
            for move in self.moves():
                if self.quota_ok(trial):
                    break
                if move.rule != Rule.RELEASING and id(move) not in chosen and trial.allows(move):
                    trial.take(move)
            if not self.quota_ok(trial):
                return False
            minimise(trial, lambda: enough() and self.quota_ok(trial))
        return True

    def _completable(self, moves: list[Move]) -> tuple[dict[int, list[int]], dict[int, int]]:
        """The moves' indexes on each node a gang may have (`Occupancy.no_gangs`), in move
        order, and the full-size ones of those nodes that the moves could make whole: node ->
        GPUs missing."""
        by_node: dict[int, list[int]] = defaultdict(list)
        freeable: dict[int, int] = defaultdict(int)
        closed = self.occupancy.no_gangs
        for index, move in enumerate(moves):
            for node_id, gpus in move.frees.items():
                if node_id not in closed:
                    by_node[node_id].append(index)
                    freeable[node_id] += gpus
        result = {}
        pool, size = self.pool, self.pool.node_size
        for node_id, gpus in freeable.items():
            node = pool.node(node_id)
            if node is None or node.gpus != size:
                continue
            missing = size - len(pool.free(node_id))
            if 0 < missing <= gpus:
                result[node_id] = missing
        return by_node, result

    def _gang_nodes(self, domain: Domain, made: list[int], count: int) -> tuple[int, ...]:
        """The nodes the gang will run on, by name: those freed for it, then whole free ones."""
        name = {n: self.pool.node(n).name for n in made}
        picked = sorted(made, key=lambda n: (name[n], n))[:count]
        if len(picked) < count:
            # Freed nodes are not whole yet (each misses GPUs until its victims stop).
            for node in self.pool.whole_nodes(domain)[: count - len(picked)]:
                picked.append(node.id)
                name[node.id] = node.name
        return tuple(sorted(picked, key=lambda n: (name[n], n)))


def _index(moves: list[Move], indexes: Iterable[int] | None = None) -> dict[int, list[int]]:
    """Node id -> indexes of the moves (all, or those at `indexes`) that free GPUs there, in
    move order."""
    by_node: dict[int, list[int]] = defaultdict(list)
    for index in range(len(moves)) if indexes is None else indexes:
        for node in moves[index].frees:
            by_node[node].append(index)
    return by_node


def _shrink_steps(moves: list[Move]) -> Iterator[tuple[Move, float]]:
    """Each shrink move with the throughput it loses (`Workload.gpus_lost`), taking a job's
    moves in their order: each gives back GPUs from what the ones before it left."""
    held: dict[int, int] = {}
    for move in moves:
        workload = move.workload
        before = held.get(workload.id, workload.held)
        held[workload.id] = after = before - sum(move.frees.values())
        yield move, workload.gpus_lost(before, after)


def _throughput_lost(moves: list[Move]) -> float:
    return sum(lost for _, lost in _shrink_steps(moves))


def _by_throughput_lost(moves: list[Move]) -> list[Move]:
    """Shrinks where the least throughput is lost per GPU given back come first; a job's own
    moves keep their order (each is ranked no better than the one before it)."""
    worst: dict[int, float] = {}
    keyed = []
    for index, (move, lost) in enumerate(_shrink_steps(moves)):
        per_gpu = lost / sum(move.frees.values())
        worst[move.workload.id] = max(per_gpu, worst.get(move.workload.id, 0.0))
        keyed.append((worst[move.workload.id], index, move))
    return [move for *_, move in sorted(keyed, key=lambda k: k[:2])]
