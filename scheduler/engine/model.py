"""The engine's input and output: frozen snapshots in, a plan out.

The portal builds a `Snapshot` from the database each cycle; the simulator builds one from its
own state. Neither the snapshot nor the plan holds an ORM object, so the engine can run anywhere.
Every field added after the first engine has a default, so older callers keep working.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any, Generic, TypeVar

from scheduler.mig import Profile

T = TypeVar("T")


class lazy(Generic[T]):
    """`functools.cached_property` without its lock: in Python 3.11 every first read takes a
    lock (3.12 dropped it), a cost each of a cycle's thousands of fresh workloads pays. The
    value goes into the instance's `__dict__` (a frozen dataclass's too), where later reads
    find it without calling this."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __get__(self, instance: object, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]  # read on the class: the descriptor
        value = instance.__dict__[self.name] = self.func(instance)
        return value


# A share of a GPU is counted in eighths: 0.125 GPU and 10 GB of an 80 GB GPU at the finest.
# Every multiple of 1/8 is exact in binary floating point, so quota and budget sums of shares
# stay exact with plain floats (no Fraction or Decimal in the cycle), and a node's state for
# fragmentation-aware placement (free eighths per GPU) takes few distinct values.
SLICES = 8


class SharePlacement(StrEnum):
    """How a share job picks its GPU among those with room."""

    # Fragmentation gradient descent (Weng et al., "Beware of Fragmentation", ATC'23): the GPU
    # whose taking least reduces the node's fit for the expected mix of requests
    FGD = "fgd"
    BEST_FIT = "best_fit"  # the GPU with the least room that fits


class TopologyLevel(IntEnum):
    """How tightly a job's GPUs must sit; a smaller value is a tighter domain."""

    NODE = 0  # one node (jobs of at most one node's GPUs)
    LEAF = 1  # one leaf switch
    POD = 2  # one pod (spine group)
    DATACENTER = 3  # one data center
    ANY = 4  # any data center of the region (a job asks for it, or its queue's default does)


class Strategy(StrEnum):
    """How a queue treats a head that cannot start."""

    BEST_EFFORT_FIFO = "best_effort_fifo"  # later workloads of the queue may start meanwhile
    STRICT_FIFO = "strict_fifo"  # nothing behind the head starts until it does


@dataclass(frozen=True)
class Node:
    """A GPU node as the engine sees it: where it sits and which GPU indices are free."""

    id: int
    name: str
    gpu_model: str
    datacenter: str
    pod: str
    leaf: str
    gpus: int
    free: tuple[int, ...]
    schedulable: bool = True  # False when cordoned, draining or down
    region: str = ""
    # Its agent cannot keep tenants apart: it takes one tenant's work at a time, `tenant`'s
    # while that holds some of it (None: nobody's).
    single_tenant: bool = False
    tenant: int | None = None


@dataclass(frozen=True)
class Quota:
    """One queue's (or cohort's) quota for one GPU model. `None` limits mean unlimited.

    `guarantee` is never lent and never reclaimed: work inside it is never preempted by another
    queue. `nominal` is the quota the queue may always use and lends while idle. For a cohort,
    `nominal` is quota the cohort itself owns, and the limits bound what it borrows from and
    lends to its parent cohort.
    """

    gpu_model: str
    nominal: int
    guarantee: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class FamilyQuota:
    """One queue's quota for a family of GPU models (Hopper: H800 and H20), above its quotas
    per model as a cohort is above its queues: `nominal` GPUs of the family's models in all, any
    mix; a model of the family with no quota of its own may use all of it. Beyond `nominal` the
    queue borrows, within `borrowing_limit` (None: unlimited) and what its cohort tree lends."""

    family: str
    models: tuple[str, ...]
    nominal: int
    borrowing_limit: int | None = None


class ReclaimWithinCohort(StrEnum):
    """Kueue's reclaimWithinCohort: what a queue under its nominal quota takes back from the
    borrowed work of the other queues of its cohort tree."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"  # only work of a lower priority than the claimant
    ANY = "Any"  # any borrowed work


class WithinClusterQueue(StrEnum):
    """Kueue's withinClusterQueue: what a claimant may evict of its own queue's work."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    # lower priority, or the same priority and submitted after the claimant
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class FairSharing(StrEnum):
    """When a claimant that borrows may evict another queue's borrowed work, judged by the two
    queues' weighted shares (Kueue's fair-sharing preemption strategies)."""

    # no fairness asked for: only that the claimant's queue, with it, has no larger share than
    # the victim's queue before the victim (else the victim would come back first next cycle)
    OFF = "Off"
    # the claimant's queue, with the claimant, ends with no larger share than the victim's
    # queue is left with: else the victim's queue would come first next cycle and take it back
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    # ... ends with a smaller share than the victim's queue had before this victim
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
    # the first, and where it finds no room, the second (Kueue's default list)
    BOTH = "LessThanOrEqualToFinalShare,LessThanInitialShare"

    @property
    def strategies(self) -> tuple[FairSharing, ...]:
        """The strategies tried, in order."""
        return tuple(FairSharing(part) for part in self.value.split(","))


@dataclass(frozen=True)
class PreemptionPolicy:
    """What a queue's pending work may preempt (or shrink) to start; Kueue's names and meanings
    (`preemption` tells how the engine applies them, docs/adr/0003 where it differs)."""

    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.ANY
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.LOWER_PRIORITY
    # While borrowing, evict borrowed work of other queues of its cohort tree whose priority is
    # below the claimant's (Kueue's borrowWithinCohort LowerPriority) and at most
    # `max_priority_threshold` when that is set.
    borrow_within_cohort: bool = False
    max_priority_threshold: int | None = None
    fair_sharing: FairSharing = FairSharing.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
    # While borrowing, evict other queues' borrowed work of any priority reclaim_within_cohort
    # allows, as far as `fair_sharing` lets the shares go (Kueue's preemption with fair
    # sharing enabled); off with FairSharing.OFF.
    preempt_by_fair_share: bool = False

    @property
    def reclaim(self) -> bool:
        return self.reclaim_within_cohort != ReclaimWithinCohort.NEVER

    @property
    def within_queue(self) -> bool:
        return self.within_cluster_queue != WithinClusterQueue.NEVER

    @property
    def borrows_over_others(self) -> bool:
        """Whether a claimant that borrows may evict other queues' borrowed work at all."""
        return self.borrow_ceiling(0) is not None

    def borrow_ceiling(self, priority: int) -> float | None:
        """Borrowing, the priority a victim of another queue must stay below for a claimant of
        `priority` (inf: any); None when borrowing evicts nobody."""
        ceilings = []
        if self.borrow_within_cohort:
            threshold = self.max_priority_threshold
            ceilings.append(priority if threshold is None else min(priority, threshold + 1))
        if self.preempt_by_fair_share and self.fair_sharing != FairSharing.OFF and self.reclaim:
            lower = self.reclaim_within_cohort == ReclaimWithinCohort.LOWER_PRIORITY
            ceilings.append(priority if lower else math.inf)
        return max(ceilings, default=None)


@dataclass(frozen=True)
class Queue:
    """A tenant's virtual queue: quotas per GPU model, a priority and an optional cohort."""

    id: int
    name: str
    quotas: tuple[Quota, ...]
    cohort: str | None = None  # the name of its cohort (a `Cohort` of the snapshot, or implied)
    priority: int = 0
    weight: float = 1.0  # fair-share weight: a larger weight borrows more before others
    region: str = ""  # its work runs only on nodes of this region
    strategy: Strategy = Strategy.BEST_EFFORT_FIFO
    preemption: PreemptionPolicy = PreemptionPolicy()
    families: tuple[FamilyQuota, ...] = ()

    def quota(self, gpu_model: str) -> Quota:
        """This queue's quota for `gpu_model`; zero when it has none."""
        found = self._by_model.get(gpu_model)
        return Quota(gpu_model, nominal=0) if found is None else found

    def family(self, gpu_model: str) -> FamilyQuota | None:
        """The family quota above `gpu_model`'s, or None."""
        return self._family_of.get(gpu_model)

    @lazy
    def model_quotas(self) -> tuple[Quota, ...]:
        """Its quotas per GPU model, and those its family quotas imply: a model of a family
        with no quota of its own may use all the family's."""
        own = {quota.gpu_model for quota in self.quotas}
        implied = tuple(
            Quota(model, nominal=family.nominal, borrowing_limit=family.borrowing_limit)
            for family in self.families
            for model in family.models
            if model not in own
        )
        return self.quotas + implied

    @lazy
    def _by_model(self) -> dict[str, Quota]:
        """Its quotas by GPU model (the first of a model, should one be listed twice)."""
        return {quota.gpu_model: quota for quota in reversed(self.model_quotas)}

    @lazy
    def _family_of(self) -> dict[str, FamilyQuota]:
        return {model: family for family in reversed(self.families) for model in family.models}


@dataclass(frozen=True)
class Cohort:
    """Queues (and child cohorts) that lend each other idle quota; cohorts nest as a tree.

    A cohort named by a queue but missing from the snapshot is a root cohort with no quota of
    its own.
    """

    name: str
    parent: str | None = None
    quotas: tuple[Quota, ...] = ()

    def quota(self, gpu_model: str) -> Quota:
        """This cohort's own quota and limits for `gpu_model`; zero and unlimited by default."""
        for quota in self.quotas:
            if quota.gpu_model == gpu_model:
                return quota
        return Quota(gpu_model, nominal=0)


@dataclass(frozen=True)
class Placement:
    """GPUs of one node given to one workload."""

    node_id: int
    gpu_indices: tuple[int, ...]


def at(curve: dict[int, float], gpus: int) -> float:
    """A throughput curve's value at `gpus`: linear between its points, and beyond its ends in
    proportion to the nearest one."""
    if gpus in curve:
        return curve[gpus]
    below = max((g for g in curve if g < gpus), default=None)
    above = min((g for g in curve if g > gpus), default=None)
    if below is None or above is None:
        nearest = below if above is None else above
        return curve[nearest] * gpus / nearest
    share = (gpus - below) / (above - below)
    return curve[below] + share * (curve[above] - curve[below])


@dataclass(frozen=True)
class Workload:
    """A job in the snapshot: pending (no placements) or holding GPUs (placements).

    An elastic workload (`min_gpus` < `max_gpus`) may run on any shape-valid count in between;
    `gpus` is the count it asks for when it starts. Times are seconds on the cycle's clock.
    """

    id: int
    queue_id: int
    gpu_model: str
    gpus: int
    submitted_at: float
    priority: int = 0
    topology: TopologyLevel = TopologyLevel.DATACENTER
    topology_required: bool = False
    placements: tuple[Placement, ...] = ()
    min_gpus: int | None = None  # None: `gpus`
    max_gpus: int | None = None  # None: `gpus`
    started_at: float | None = None  # when it last started running
    last_checkpoint_at: float | None = None  # its last saved checkpoint
    saves: bool = True  # it saves when asked (a checkpoint policy other than none)
    time_limit_s: float | None = None  # it is stopped this long after it starts
    preempting: bool = False  # already told to stop: its GPUs are about to be free
    # (GPUs, tokens/s) at the sizes it may run on, from the parallelism planner; empty: its
    # throughput is taken to grow linearly with its GPUs.
    throughput: tuple[tuple[int, float], ...] = ()
    resized_at: float | None = None  # when it was last shrunk or grown
    # Workloads of one group (the replicas of a service) are placed apart where free room
    # allows: on a node, then a leaf, no other member holds (`Pool.find_apart`).
    spread: str | None = None
    tenant: int | None = None  # whose work: what a single-tenant node asks of it
    # The GPU models it may run on, in its submitter's order (empty: only `gpu_model`, which is
    # the one it runs on once placed).
    accepts: tuple[str, ...] = ()
    # Its throughput per GPU on each model it accepts, in any unit (only ratios count): from
    # the planner or its own earlier runs. A model left out has no known speed.
    speeds: tuple[tuple[str, float], ...] = ()
    # How many of its earlier runs `speeds` were measured over (`calibration.measured_speeds`,
    # for a job the planner knows nothing of); 0: they are the planner's, or there are none.
    measured: int = 0
    # A share of one GPU in eighths (`SLICES`), 1 to 7, with `gpus` 1; 0: whole GPUs. A share
    # is its guaranteed minimum of both the GPU's compute and its memory.
    slices: int = 0
    movable: bool = True  # False: its submitter asked that it never be moved while it runs
    # A MIG profile of one GPU ("1g.10gb"), with `gpus` 1 and `slices` 0, charged `mig_charge`
    # (`scheduler.mig`); "": none.
    mig: str = ""
    mig_charge: float = 0.0

    @lazy  # read several times for each workload a cycle decides
    def fraction(self) -> bool:
        """Whether it takes part of one GPU: a share or a MIG instance."""
        return bool(self.slices or self.mig)

    @property
    def is_running(self) -> bool:
        return bool(self.placements)

    @lazy  # read several times for each workload a cycle decides
    def share(self) -> float:
        """What it is charged for, in GPUs: its share, or its whole GPUs."""
        if self.mig:
            return self.mig_charge
        return self.slices / SLICES if self.slices else self.gpus

    @lazy
    def held(self) -> float:
        """GPUs it holds now, counted from its placements (a share job: its share)."""
        if self.fraction:
            return self.share if self.placements else 0
        return sum(len(placement.gpu_indices) for placement in self.placements)

    @property
    def fewest_gpus(self) -> int:
        """The fewest GPUs it can run on."""
        return self.gpus if self.min_gpus is None else min(self.min_gpus, self.gpus)

    @lazy
    def is_elastic(self) -> bool:
        most = self.gpus if self.max_gpus is None else self.max_gpus
        return self.fewest_gpus < most

    def rate(self, gpus: int) -> float:
        """Its throughput on `gpus` GPUs (tokens/s; GPUs themselves when it has no curve)."""
        return at(self._curve, gpus) if self.throughput else float(gpus)

    @lazy
    def _curve(self) -> dict[int, float]:
        return dict(self.throughput)

    def gpus_lost(self, before: int, after: int) -> float:
        """What shrinking from `before` to `after` GPUs costs, in GPUs of its average speed at
        `before`: `before - after` when it scales linearly, less when the GPUs given back were
        adding little (Pollux and Sia weigh resizes by throughput the same way)."""
        lost = (self.rate(before) - self.rate(after)) / (self.rate(before) / before)
        return max(0.0, lost)  # a curve that dips never makes a shrink a gain

    @lazy
    def models(self) -> tuple[str, ...]:
        """The GPU models to try, best first: by speed where each has one (the listed order
        breaks ties), else in the listed order (the submitter's preference)."""
        listed = tuple(dict.fromkeys(self.accepts)) or (self.gpu_model,)
        speed = dict(self.speeds)
        if len(listed) == 1 or not all(model in speed for model in listed):
            return listed
        return tuple(sorted(listed, key=lambda model: -speed[model]))

    def on(self, gpu_model: str) -> Workload:
        """The same workload on another GPU model: `dataclasses.replace`'s result, at a tenth
        of its cost (the cycle weighs each model of thousands of workloads); itself when it is
        on that model already."""
        if gpu_model == self.gpu_model:
            return self
        clone = object.__new__(Workload)
        clone.__dict__.update(self.__dict__)
        clone.__dict__["gpu_model"] = gpu_model
        if not self.accepts:
            clone.__dict__.pop("models", None)  # its one model was `gpu_model`
        return clone

    def speed(self, gpu_model: str) -> float | None:
        """Its throughput per GPU on `gpu_model` (any unit), or None where unknown."""
        return dict(self.speeds).get(gpu_model)

    def run_s(self, gpu_model: str) -> float | None:
        """How long it runs on `gpu_model`, where it has a time limit: the limit on the
        slowest model it accepts (a limit must allow for that one), less in proportion to its
        speed on a faster one. None without a limit, or without a speed on each model."""
        speeds = [self.speed(model) for model in self.models]
        if self.time_limit_s is None or None in speeds or self.speed(gpu_model) is None:
            return self.time_limit_s if len(self.models) == 1 else None
        return self.time_limit_s * min(speeds) / self.speed(gpu_model)

    @property
    def ends_at(self) -> float | None:
        """When its time limit stops it, if it is running and has one."""
        if self.started_at is None or self.time_limit_s is None:
            return None
        return self.started_at + self.time_limit_s


@dataclass(frozen=True)
class Budget:
    """GPU-hours a tenant or one of its queues may use over a window, weighted per GPU model,
    and what the window has used so far (`used`, weighted, as the portal books it).

    Hard: a pending workload starts only if its GPUs for its whole time limit fit in what is
    left once running work has reached its time limits; one without a time limit waits. Soft:
    once `used` reaches `limit`, its queues borrow no more and keep a quarter of their
    fair-share weight. No budget ever stops running work.

    A calendar window's end (`ends_at`, the cycle's clock) bounds what a job counts against
    it: time past the end belongs to the next window, which starts from nothing. A rolling
    window has no end, and a job counts its whole time limit.
    """

    name: str  # whose, as reasons say it: "queue acme/llm", "tenant acme"
    queue_ids: tuple[int, ...]
    limit: float
    used: float = 0.0
    hard: bool = False
    window: str = "this month"  # as reasons say it
    weights: tuple[tuple[str, float], ...] = ()  # (GPU model, weight); 1.0 where absent
    ends_at: float | None = None  # when a calendar window ends; None: a rolling one

    def within(self, seconds: float, now: float) -> float:
        """The part of `seconds` from `now` that falls inside the window."""
        return seconds if self.ends_at is None else min(seconds, max(0.0, self.ends_at - now))

    def weight(self, gpu_model: str) -> float:
        """What one GPU-hour of `gpu_model` counts against this budget."""
        for model, weight in self.weights:
            if model == gpu_model:
                return weight
        return 1.0


@dataclass(frozen=True)
class Snapshot:
    """Everything one scheduling cycle may look at."""

    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    workloads: tuple[Workload, ...]
    cohorts: tuple[Cohort, ...] = ()
    grow_every_s: float = 300.0  # an elastic workload grows at most this often (it restarts)
    budgets: tuple[Budget, ...] = ()
    # (GPU model, what one GPU of it is worth): fair sharing weighs borrowed GPUs by it
    # (`quota`), a model left out at 1 a GPU; empty: each model's GPUs count apart (Kueue's
    # dominant resource share).
    worth: tuple[tuple[str, float], ...] = ()
    move_every_s: float = 3600.0  # a workload moves to a faster GPU model at most this often
    share_placement: SharePlacement = SharePlacement.FGD
    # (pod, moves it may still make): the pods due for defragmentation (`defrag`), as the
    # nodes name their pod.
    defrag: tuple[tuple[str, int], ...] = ()
    # The MIG profiles of each model that has them (`scheduler.mig.profiles`), and the profiles
    # of each GPU's MIG instances now, by (node id, GPU index), for the GPUs in MIG mode.
    mig_profiles: Mapping[str, Mapping[str, Profile]] = field(default_factory=dict)
    mig_layouts: Mapping[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Admission:
    """Start `workload_id` on exactly these GPUs; `choice` says why their GPU model, for a
    workload that accepts several."""

    workload_id: int
    placements: tuple[Placement, ...]
    choice: str = ""


@dataclass(frozen=True)
class Pending:
    """A workload left waiting, with a reason a person can act on and its place in its queue."""

    workload_id: int
    reason: str
    position: int


@dataclass(frozen=True)
class Preemption:
    """Stop `workload_id` (checkpointing first if its policy says so) and requeue it, so that
    `for_workload_id` can start; `reason` names the rule and the numbers behind it."""

    workload_id: int
    reason: str
    for_workload_id: int


@dataclass(frozen=True)
class Shrink:
    """Shrink a running elastic workload to `gpus` GPUs by giving back `released`."""

    workload_id: int
    gpus: int
    released: tuple[Placement, ...]
    reason: str
    for_workload_id: int


@dataclass(frozen=True)
class Grow:
    """Grow a running elastic workload to `gpus` GPUs with the free GPUs `added`."""

    workload_id: int
    gpus: int
    added: tuple[Placement, ...]
    reason: str


@dataclass(frozen=True)
class Move:
    """Move a running workload to the free GPUs `placements`: of a faster model it accepts,
    `gpu_model`, or, where `pod` is set, of its own model in that pod, so that whole nodes
    free up there for a waiting gang (`defrag`). It restarts there from a save, its GPUs now
    going back."""

    workload_id: int
    gpu_model: str
    placements: tuple[Placement, ...]
    reason: str
    pod: str = ""


@dataclass(frozen=True)
class Reservation:
    """Nodes held for a waiting workload; only work that is preemptible by it, or that ends
    before `start_at`, may be placed on them meanwhile.

    `domain` is the path of the domain (data center, pod, leaf), `start_at` the expected start
    (None when some work on the nodes has no time limit).
    """

    workload_id: int
    level: TopologyLevel
    domain: tuple[str, ...]
    nodes: tuple[int, ...]
    start_at: float | None
    reason: str


@dataclass
class Plan:
    """The outcome of one cycle. `usage` is GPUs in use per (queue id, GPU model) after the plan
    (preempted work gone, shrinks applied, admissions added).

    `timings` holds seconds per numbered step of the cycle, only when `plan` was given a clock.
    """

    admissions: list[Admission] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    usage: dict[tuple[int, str], int] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)
    shrinks: list[Shrink] = field(default_factory=list)
    grows: list[Grow] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
