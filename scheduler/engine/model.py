"""The engine's input and output: frozen snapshots in, a plan out.

The portal builds a `Snapshot` from the database each cycle; the simulator builds one from its
own state. Neither the snapshot nor the plan holds an ORM object, so the engine can run anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class TopologyLevel(IntEnum):
    """How tightly a job's GPUs must sit; a smaller value is a tighter domain."""

    NODE = 0  # one node (jobs of at most one node's GPUs)
    LEAF = 1  # one leaf switch
    POD = 2  # one pod (spine group)
    DATACENTER = 3  # one data center
    ANY = 4  # anywhere in the region; only with allow_cross_dc


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


@dataclass(frozen=True)
class Quota:
    """One queue's quota for one GPU model. `None` limits mean unlimited."""

    gpu_model: str
    nominal: int
    guarantee: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class Queue:
    """A tenant's virtual queue: quotas per GPU model, a priority and an optional cohort."""

    id: int
    name: str
    quotas: tuple[Quota, ...]
    cohort: str | None = None
    priority: int = 0
    weight: float = 1.0
    region: str = ""  # its work runs only on nodes of this region

    def quota(self, gpu_model: str) -> Quota:
        """This queue's quota for `gpu_model`; zero when it has none."""
        for quota in self.quotas:
            if quota.gpu_model == gpu_model:
                return quota
        return Quota(gpu_model, nominal=0)


@dataclass(frozen=True)
class Placement:
    """GPUs of one node given to one workload."""

    node_id: int
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True)
class Workload:
    """A job in the snapshot: pending (no placements) or holding GPUs (placements)."""

    id: int
    queue_id: int
    gpu_model: str
    gpus: int
    submitted_at: float
    priority: int = 0
    topology: TopologyLevel = TopologyLevel.DATACENTER
    topology_required: bool = False
    placements: tuple[Placement, ...] = ()

    @property
    def is_running(self) -> bool:
        return bool(self.placements)


@dataclass(frozen=True)
class Snapshot:
    """Everything one scheduling cycle may look at."""

    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    workloads: tuple[Workload, ...]


@dataclass(frozen=True)
class Admission:
    """Start `workload_id` on exactly these GPUs."""

    workload_id: int
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class Pending:
    """A workload left waiting, with a reason a person can act on and its place in its queue."""

    workload_id: int
    reason: str
    position: int


@dataclass
class Plan:
    """The outcome of one cycle. `usage` is GPUs in use per (queue id, GPU model) after the plan."""

    admissions: list[Admission] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    usage: dict[tuple[int, str], int] = field(default_factory=dict)
