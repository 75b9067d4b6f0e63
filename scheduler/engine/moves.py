"""The words a preemption search speaks: moves (stop, shrink, or count on a stopping workload),
the rules that allow them, the claimant looking for room and the claim it finds."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from scheduler.engine.model import Queue, TopologyLevel, Workload
from scheduler.engine.topology import Domain


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
    NEWER = 4  # work of the claimant's queue and priority submitted after it
    GAIN = 5  # elastic work of its queue and priority whose GPUs do more for the claimant


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
    within_nominal: bool  # it fits in its queue's nominal quota now
    takes_from_others: bool = True  # whether it may reclaim or borrow from other queues
    # Whether it takes back borrowed work (else it borrows): it fits in its queue's nominal
    # quota once the queue's own work it may evict is gone. See `preemption`'s docstring.
    reclaims: bool = False


@dataclass
class Claim:
    """Room found: the moves that make it and the nodes the claimant will use."""

    moves: list[Move]
    level: TopologyLevel
    domain: Domain
    nodes: tuple[int, ...]
    cost: tuple = field(default=())
