"""The pieces a preemption search works with: moves (stop, shrink, or count on a stopping
workload), a victim's value, and a trial that takes and drops them."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from scheduler.engine.capacity import Domain
from scheduler.engine.model import Queue, TopologyLevel, Workload

if TYPE_CHECKING:
    from scheduler.engine.preemption import VictimSearch


class MoveKind(IntEnum):
    """What a move does to its workload; a smaller value is tried first."""

    RELEASING = 0  # already stopping: costs nothing
    SHRINK = 1  # an elastic workload gives back GPUs, down to its minimum
    EVICT = 2  # the workload is stopped and requeued


class Rule(IntEnum):
    """Which rule allows a move."""

    RELEASING = 0  # a workload preempted earlier, on its way out
    RECLAIM = 1  # the claimant's queue takes back quota others borrow
    PRIORITY = 2  # lower priority within the claimant's own queue
    BORROW = 3  # borrowed work below the claimant's priority threshold


@dataclass(slots=True)
class Move:
    """One step of freeing room: a workload and the GPUs it frees per node."""

    kind: MoveKind
    rule: Rule
    workload: Workload
    frees: dict[int, int]  # node id -> GPUs freed there


@dataclass(frozen=True)
class Claimant:
    """A waiting workload that looks for room, and its queue."""

    workload: Workload
    queue: Queue
    gpus: int
    within_nominal: bool
    takes_from_others: bool = True  # whether it may reclaim or borrow from other queues
    # (see the rules in `preemption`'s docstring)


@dataclass
class Claim:
    """Room found: the moves that make it and the nodes the claimant will use."""

    moves: list[Move]
    level: TopologyLevel
    domain: Domain
    nodes: tuple[int, ...]
    cost: tuple = field(default=())


def lost_work(workload: Workload, now: float) -> float:
    """GPU-seconds of work the workload would lose if stopped now: since its last checkpoint,
    or since it started when it has none; 0 when neither is known."""
    since = workload.last_checkpoint_at
    if since is None or (workload.started_at is not None and workload.started_at > since):
        since = workload.started_at
    if since is None:
        return 0.0
    return max(0.0, now - since) * workload.held


def held_per_node(workload: Workload) -> dict[int, int]:
    """GPUs the workload holds on each node."""
    return {p.node_id: len(p.gpu_indices) for p in workload.placements}


def value(workload: Workload, now: float) -> tuple:
    """A victim's worth, least valuable first: priority, work lost, most recent start, id."""
    started = workload.started_at if workload.started_at is not None else now
    return (workload.priority, lost_work(workload, now), -started, workload.id)


class Trial:
    """Moves taken so far toward freeing room.

    While rooms are compared the trial only counts (cheap); `on_ledger` applies the quota the
    moves release to the ledger for the quota phase, and takes it back afterwards.
    """

    def __init__(self, search: VictimSearch, missing: dict[int, int]) -> None:
        self.search = search
        self.missing = missing  # target node -> GPUs still to free there
        self.done = sum(1 for gpus in missing.values() if gpus <= 0)  # targets freed
        self.freed: dict[int, Counter[int]] = defaultdict(Counter)  # workload -> node -> GPUs
        self.taken: list[tuple[Move, dict[int, int]]] = []
        self.shrunk: Counter[int] = Counter()  # workload -> GPUs shrunk
        self.released: Counter[int] = Counter()  # queue id -> GPUs the moves release
        self.live = False  # whether `released` is applied to the ledger

    def _frees(self, move: Move) -> dict[int, int]:
        """What the move would free now: on each node, no more than the workload still holds
        there after the moves taken so far (a shrink, then an eviction frees the rest)."""
        freed = self.freed.get(move.workload.id)
        if not freed:
            return move.frees
        held = self.search.occupancy.held_on(move.workload)
        frees = {}
        for node, gpus in move.frees.items():
            gpus = min(gpus, held.get(node, 0) - freed[node])
            if gpus > 0:
                frees[node] = gpus
        return frees

    def allows(self, move: Move) -> bool:
        """Whether the move is still valid: never twice, a shrink never below the workload's
        minimum, and the search's rules (`VictimSearch.guard`)."""
        frees = self._frees(move)
        if not frees:
            return False
        gpus = sum(frees.values())
        if move.kind == MoveKind.SHRINK:
            workload = move.workload
            if gpus > workload.held - workload.fewest_gpus - self.shrunk[workload.id]:
                return False
        released = None if self.live else self.released
        return move.rule == Rule.RELEASING or self.search.guard(move, gpus, released)

    def take(self, move: Move) -> None:
        frees = self._frees(move)
        self.freed[move.workload.id].update(frees)
        if move.kind == MoveKind.SHRINK:
            self.shrunk[move.workload.id] += sum(frees.values())
        self._account(move, frees, +1)
        self.taken.append((move, frees))

    def drop(self, index: int) -> tuple[Move, dict[int, int]]:
        move, frees = self.taken.pop(index)
        self.freed[move.workload.id].subtract(frees)
        if move.kind == MoveKind.SHRINK:
            self.shrunk[move.workload.id] -= sum(frees.values())
        self._account(move, frees, -1)
        return move, frees

    def _account(self, move: Move, frees: dict[int, int], sign: int) -> None:
        for node, gpus in frees.items():
            before = self.missing.get(node)
            if before is not None:
                after = before - sign * gpus
                self.missing[node] = after
                self.done += (after <= 0) - (before <= 0)
        if move.rule != Rule.RELEASING:
            gpus = sign * sum(frees.values())
            self.released[move.workload.queue_id] += gpus
            if self.live:
                self.search.ledger.release(move.workload.queue_id, move.workload.gpu_model, gpus)

    @contextmanager
    def on_ledger(self) -> Iterator[None]:
        """Apply the quota the moves release to the ledger for the block, then undo it."""
        model = self.search.claimant.workload.gpu_model
        for queue_id, gpus in self.released.items():
            self.search.ledger.release(queue_id, model, gpus)
        self.live = True
        try:
            yield
        finally:
            self.live = False
            for queue_id, gpus in self.released.items():
                self.search.ledger.charge(queue_id, model, gpus)

    def moves(self) -> list[Move]:
        return [move for move, _ in self.taken]
