"""Who holds the GPUs of each node during one cycle: the index that preemption and backfill read.

Built once per cycle from the running workloads, then kept current as the cycle admits work and
claims victims, so neither preemption nor reservations ever scan the whole snapshot.
"""

from __future__ import annotations

import math
from collections import defaultdict

from scheduler.engine.capacity import Capacity, Pool
from scheduler.engine.model import Node, Placement, Workload
from scheduler.engine.moves import value


class Occupancy:
    """Running work per node and per (pool, queue), with when each workload is expected to end."""

    def __init__(self, capacity: Capacity, now: float) -> None:
        self._capacity = capacity
        self.now = now
        self.on_node: dict[int, dict[int, int]] = defaultdict(dict)  # node -> {workload: GPUs}
        self.workloads: dict[int, Workload] = {}
        self.ends: dict[int, float] = {}  # workload id -> expected end (inf: unknown)
        # Running workloads that may still be chosen as victims, per pool and queue id.
        self.candidates: dict[Pool, dict[int, dict[int, Workload]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self.releasing: dict[Pool, dict[int, Workload]] = defaultdict(dict)
        self._values: dict[int, tuple] = {}
        self._ordered: dict[tuple[Pool, int], list[Workload]] = {}
        self.moves: dict[tuple[int, int], list] = {}  # preemption's moves, made once a cycle
        self._soonest: dict[Pool, list[tuple[float, str, Node]]] = {}
        self._changed: set[int] = set()  # nodes given work this cycle

    def queues_in(self, pool: Pool) -> list[int]:
        """Ids of the queues with candidate victims in the pool, in id order."""
        return sorted(qid for qid, members in self.candidates[pool].items() if members)

    def ordered(self, pool: Pool, queue_id: int) -> list[Workload]:
        """The queue's candidate victims in the pool, least valuable first (`moves.value`)."""
        members = self.candidates[pool].get(queue_id)
        if not members:
            return []
        cached = self._ordered.get((pool, queue_id))
        if cached is None:
            cached = sorted(members.values(), key=self.value)
            self._ordered[pool, queue_id] = cached
        if len(cached) != len(members):  # some were claimed since
            cached = [w for w in cached if w.id in members]
            self._ordered[pool, queue_id] = cached
        return cached

    def value(self, workload: Workload) -> tuple:
        """The workload's worth as a victim (`moves.value`), computed once per cycle."""
        found = self._values.get(workload.id)
        if found is None:
            found = self._values[workload.id] = value(workload, self.now)
        return found

    def add_running(self, workload: Workload) -> None:
        """Index a workload that holds GPUs in the snapshot."""
        pool = self._record(workload, workload.placements)
        if workload.preempting:
            self.ends[workload.id] = self.now
            if pool is not None:
                self.releasing[pool][workload.id] = workload
            return
        end = workload.ends_at
        self.ends[workload.id] = math.inf if end is None else end
        if pool is not None:
            self.candidates[pool][workload.queue_id][workload.id] = workload

    def add_admitted(self, workload: Workload, placements: tuple[Placement, ...]) -> None:
        """Index a workload this cycle admits: never a victim this cycle, but it occupies nodes
        until its time limit."""
        self._record(workload, placements)
        self._changed.update(p.node_id for p in placements)
        limit = workload.time_limit_s
        self.ends[workload.id] = math.inf if limit is None else self.now + limit

    def claim(self, pool: Pool, workload: Workload) -> None:
        """Take a victim (or a releasing workload) out of the candidates: it is spoken for."""
        self.candidates[pool][workload.queue_id].pop(workload.id, None)
        self.releasing[pool].pop(workload.id, None)

    def soonest_free(self, pool: Pool) -> list[tuple[float, Node]]:
        """(when, node) of the pool's busy full-size nodes whose work all has a known end,
        soonest first; skipping nodes held for a reservation or whose work changed this
        cycle. Sorted once a cycle."""
        cached = self._soonest.get(pool)
        if cached is None:
            cached = []
            for node in pool.nodes():
                if node.gpus == pool.node_size and not pool.is_whole(node):
                    when = self.node_free_at(node.id)
                    if when < math.inf:
                        cached.append((when, node.name, node))
            cached.sort(key=lambda item: item[:2])
            self._soonest[pool] = cached
        return [(when, node) for when, _, node in cached
                if node.id not in pool.held_by and node.id not in self._changed]

    def node_free_at(self, node_id: int) -> float:
        """When every GPU of the node is expected to be free: now, a time, or inf."""
        occupants = self.on_node.get(node_id)
        if not occupants:
            return self.now
        return max(self.ends[wid] for wid in occupants)

    def _record(self, workload: Workload, placements: tuple[Placement, ...]) -> Pool | None:
        self.workloads[workload.id] = workload
        pool = None
        for placement in placements:
            if placement.gpu_indices:
                self.on_node[placement.node_id][workload.id] = len(placement.gpu_indices)
                pool = pool or self._capacity.pool_of(placement.node_id)
        return pool
