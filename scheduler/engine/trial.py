"""A trial: the moves a preemption search has taken so far toward freeing room, what they
free on each node and release of each queue's quota, and how it drops the moves it does not
need."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from scheduler.engine.moves import Claimant, Move, MoveKind, Rule
from scheduler.engine.occupancy import Occupancy
from scheduler.engine.quota import QuotaLedger


class Search(Protocol):
    """What a trial asks of its search (`preemption.VictimSearch`)."""

    occupancy: Occupancy
    ledger: QuotaLedger
    claimant: Claimant

    def guard(self, move: Move, gpus: int, released: Mapping[int, int] | None) -> bool: ...


class Trial:
    """Moves taken so far toward freeing room.

    While rooms are compared the trial only counts (cheap); `on_ledger` applies the quota the
    moves release to the ledger for the quota phase, and takes it back afterwards.
    """

    def __init__(self, search: Search, missing: dict[int, int]) -> None:
        self.search = search
        self.missing = missing  # target node -> GPUs still to free there
        self.done = sum(1 for gpus in missing.values() if gpus <= 0)  # targets freed
        self.freed: dict[int, Counter[int]] = defaultdict(Counter)  # workload -> node -> GPUs
        self.taken: list[tuple[Move, dict[int, int]]] = []
        self.shrunk: Counter[int] = Counter()  # workload -> GPUs shrunk
        self.released: Counter[int] = Counter()  # queue id -> GPUs the moves release
        self.rules: Counter[Rule] = Counter()  # moves taken by each rule
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

    def needed(self, index: int, targets: int) -> bool:
        """Whether dropping the move at `index` would leave fewer than `targets` target nodes
        freed, where dropping and taking it again would leave the trial as it was: its
        workload has no other move here, and it frees all the move frees, which its workload
        holds (else taken again it may free another share of its GPUs, or fewer than the move
        lists). False when that cannot be told."""
        move, frees = self.taken[index]
        freed = self.freed[move.workload.id]
        if frees != move.frees or sum(freed.values()) != sum(frees.values()):
            return False
        held = self.search.occupancy.held_on(move.workload)  # what `_frees` caps a retake by
        for node, gpus in frees.items():
            if freed[node] != gpus or held.get(node, 0) < gpus:
                return False
        missing, lost = self.missing, 0
        for node, gpus in frees.items():
            before = missing.get(node)
            if before is not None and before <= 0 < before + gpus:
                lost += 1
        return self.done - lost < targets

    def drop(self, index: int) -> tuple[Move, dict[int, int]]:
        move, frees = self.taken.pop(index)
        self.freed[move.workload.id].subtract(frees)
        if move.kind == MoveKind.SHRINK:
            self.shrunk[move.workload.id] -= sum(frees.values())
        self._account(move, frees, -1)
        return move, frees

    def _account(self, move: Move, frees: dict[int, int], sign: int) -> None:
        self.rules[move.rule] += sign
        missing = self.missing
        # Only the target nodes count: look them up in the move when they are fewer.
        nodes = missing if len(missing) < len(frees) else frees
        for node in nodes:
            gpus = frees.get(node)
            before = missing.get(node)
            if gpus is not None and before is not None:
                after = before - sign * gpus
                missing[node] = after
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


def freed_at_least(count: int) -> Callable[[Trial], bool]:
    """Whether a trial has freed at least `count` of its target nodes."""
    return lambda trial: trial.done >= count


def minimise(trial: Trial, enough: Callable[[], bool], targets: int | None = None) -> None:
    """Drop every move not needed, the most valuable (last taken in order) first. `targets`:
    when `enough` asks only that many target nodes freed, a move found needed without
    dropping it (`Trial.needed`) is not dropped and taken again."""
    for index in range(len(trial.taken) - 1, -1, -1):
        if targets is not None and trial.needed(index, targets):
            continue
        move, _ = trial.drop(index)
        if enough():
            continue
        trial.take(move)  # needed: put it back where it was
        trial.taken.insert(index, trial.taken.pop())
