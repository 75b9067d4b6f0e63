"""Who holds the GPUs of each node during one cycle: the index that preemption and backfill read.

Built once per cycle from the running workloads, then kept current as the cycle admits work and
claims victims, so neither preemption nor reservations ever scan the whole snapshot.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from scheduler.engine.capacity import Capacity, Pool
from scheduler.engine.model import Node, Placement, Workload


@dataclass
class QueueMoves:
    """Preemption's moves of one queue's candidates in one pool under one rule: the shrinks,
    the evictions in `Occupancy.ordered`'s order with their priorities, and per priority
    bound the part of them a claimant below it takes (see `preemption`), kept until the queue
    loses a candidate. Searches read them, never modify them."""

    shrinks: list
    evictions: list
    priorities: list[int]
    taken: dict = field(default_factory=dict)  # bound -> (shrinks, evictions)

    def drop(self, index: int, workload: Workload) -> None:
        """Forget a candidate claimed, the one at `index` in value order."""
        del self.evictions[index], self.priorities[index]
        self.shrinks = [m for m in self.shrinks if m.workload is not workload]
        self.taken.clear()


class Occupancy:
    """Running work per (pool, queue), and when each node is expected to be free."""

    def __init__(self, capacity: Capacity, now: float) -> None:
        self._capacity = capacity
        self.now = now
        self._node_end: dict[int, float] = {}  # node -> when its work ends (inf: unknown)
        # Running workloads that may still be chosen as victims, per pool and queue id.
        self._candidates: dict[Pool, dict[int, dict[int, Workload]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self._releasing: dict[Pool, dict[int, Workload]] = defaultdict(dict)
        # What releasing work frees: GPUs per node, its workloads per node, and per pool the
        # nodes it frees GPUs on, in heaps by the GPUs free there now or soon (`soon_room`).
        self.soon: dict[int, int] = defaultdict(int)
        self.releasing_on: dict[int, list[Workload]] = defaultdict(list)
        self._soon_nodes: dict[Pool, dict[int, list[tuple[str, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._releasing_gpus: dict[Pool, int] = defaultdict(int)
        self._unheld: dict[int, int] = {}  # releasing workload -> its nodes a gang could have
        self._unindexed: list[Workload] = []  # running work noted but not indexed yet
        self._values: dict[int, tuple] = {}
        self._held_on: dict[int, dict[int, int]] = {}
        self._by_name: dict[int, list[tuple[str, int]]] = {}
        self._ordered: dict[tuple[Pool, int], list[Workload]] = {}
        # Preemption's moves per (workload, rule), made once, and per (pool, queue) and rule
        # those of the queue's candidates, which `claim` keeps current.
        self.moves: dict[tuple[int, int], list] = {}
        self.queue_moves: dict[tuple[Pool, int], dict[int, QueueMoves]] = {}
        # Victims all of whose nodes are held for reservations (or unschedulable): no small job
        # can use what they free. Holds only grow within a cycle, so they stay out of reach.
        self.out_of_reach: set[int] = set()
        self._soonest: dict[Pool, list[tuple[float, str, Node]]] = {}
        self._changed: set[int] = set()  # nodes given work this cycle
        # Nodes no gang may have this cycle: held, or promised in part to smaller jobs.
        self.no_gangs: set[int] = set()

    def ordered(self, pool: Pool, queue_id: int) -> list[Workload]:
        """The queue's candidate victims in the pool, least valuable first (`value`): sorted
        once a cycle, then kept current by `claim` (do not modify)."""
        cached = self._ordered.get((pool, queue_id))
        if cached is None:
            members = self.candidates[pool].get(queue_id)
            if not members:
                return []
            values, now = self._values, self.now
            for workload in members.values():
                if workload.id not in values:
                    values[workload.id] = value(workload, now)
            cached = sorted(members.values(), key=lambda w: values[w.id])
            self._ordered[pool, queue_id] = cached
        return cached

    def held_on(self, workload: Workload) -> dict[int, int]:
        """GPUs the workload holds on each node, computed once per cycle."""
        found = self._held_on.get(workload.id)
        if found is None:
            found = self._held_on[workload.id] = held_per_node(workload)
        return found

    def nodes_by_name(self, workload: Workload) -> list[tuple[str, int]]:
        """(name, id) of the schedulable nodes the workload holds GPUs on, by name; computed
        once per cycle."""
        found = self._by_name.get(workload.id)
        if found is None:
            found = []
            for placement in workload.placements:
                pool = self._capacity.pool_of(placement.node_id)
                if pool is not None and placement.gpu_indices:
                    found.append((pool.node(placement.node_id).name, placement.node_id))
            found.sort()
            self._by_name[workload.id] = found
        return found

    def value(self, workload: Workload) -> tuple:
        """The workload's worth as a victim (`value`), computed once per cycle."""
        found = self._values.get(workload.id)
        if found is None:
            found = self._values[workload.id] = value(workload, self.now)
        return found

    @property
    def candidates(self) -> dict[Pool, dict[int, dict[int, Workload]]]:
        """Running workloads that may still be chosen as victims, per pool and queue id."""
        self._index()
        return self._candidates

    @property
    def releasing(self) -> dict[Pool, dict[int, Workload]]:
        """Running workloads told to stop (before this cycle or in it), per pool: those with
        GPUs on some node a gang could still have (`_pass_by`)."""
        self._index()
        return self._releasing

    def releasing_gpus(self, pool: Pool) -> int:
        """GPUs held by the pool's releasing work."""
        self._index()
        return self._releasing_gpus[pool]

    def add_running(self, workloads: Iterable[Workload]) -> None:
        """Note workloads that hold GPUs in the snapshot. They are indexed when the index is
        first read, in the order noted: most cycles only admit on free GPUs and never read
        it, and indexing every running workload would cost them more than the rest."""
        self._unindexed.extend(workloads)

    def _index(self) -> None:
        if not self._unindexed:
            return
        noted, self._unindexed = self._unindexed, []
        for workload in noted:
            end = workload.ends_at
            pool = self._record(
                workload.placements,
                self.now if workload.preempting else math.inf if end is None else end,
            )
            if pool is None:
                continue
            if workload.preempting:
                self._add_releasing(pool, workload)
            else:
                self._candidates[pool][workload.queue_id][workload.id] = workload

    def add_admitted(self, workload: Workload, placements: tuple[Placement, ...]) -> None:
        """Index a workload this cycle admits: never a victim this cycle, but it occupies nodes
        until its time limit."""
        limit = workload.time_limit_s
        self._record(placements, math.inf if limit is None else self.now + limit)
        self._changed.update(p.node_id for p in placements)

    def claim(self, pool: Pool, workload: Workload) -> None:
        """Take a victim out of the candidates, their order and the moves made of them: it is
        spoken for."""
        if self.candidates[pool][workload.queue_id].pop(workload.id, None) is not None:
            key = (pool, workload.queue_id)
            ordered = self._ordered.get(key)
            if ordered is not None:
                index = bisect_left(ordered, self.value(workload), key=self.value)
                del ordered[index]
                for moves in self.queue_moves.get(key, {}).values():
                    moves.drop(index, workload)

    def evicted(self, pool: Pool, workload: Workload) -> None:
        """A victim claimed this cycle is releasing from now on: the GPUs it frees beyond the
        nodes its claimant holds are room for later claimants of the cycle (else each of them
        would evict more work beside GPUs about to be free)."""
        self.claim(pool, workload)
        self._add_releasing(pool, workload)

    def hold(self, pool: Pool, owner: int, node_ids: Iterable[int]) -> None:
        """Hold the nodes for workload `owner` (`Pool.hold`); gangs pass them by (`_pass_by`)."""
        fresh = [n for n in node_ids if n not in pool.held_by]
        pool.hold(owner, fresh)
        for node_id in fresh:
            self._pass_by(pool, node_id)

    def promise(self, pool: Pool, owner: int, node_id: int, gpus: int) -> None:
        """Room for workload `owner`, smaller than a node: `gpus` of the node's GPUs free now
        or soon, the rest left to later claimants of the cycle (a hold would take the whole
        node, and each later small claimant would evict more work beside GPUs about to be
        free). It counts on the GPUs stopping work frees before free ones, which others may
        take at once; the free ones it needs are taken. Gangs and reservations pass the node
        by; once it has nothing left to give, it is held (`hold`)."""
        soon = min(gpus, self.soon[node_id])
        self.soon[node_id] -= soon
        if gpus > soon:
            free = sorted(pool.free(node_id))[: gpus - soon]
            pool.take(Placement(node_id, tuple(free)))
        self._changed.add(node_id)
        self._pass_by(pool, node_id)
        if not self.soon[node_id] and not pool.free(node_id):
            self.hold(pool, owner, [node_id])

    def _pass_by(self, pool: Pool, node_id: int) -> None:
        """No gang may have the node this cycle (held, or promised to smaller jobs): releasing
        work none of whose nodes a gang could have then frees nothing for gangs, and their
        searches pass it by (smaller jobs find what it frees through `soon_room`)."""
        if node_id in self.no_gangs:
            return
        self.no_gangs.add(node_id)
        releasing = self._releasing[pool]
        for workload in self.releasing_on.get(node_id, ()):
            self._unheld[workload.id] -= 1
            if not self._unheld[workload.id]:
                del releasing[workload.id]
                self._releasing_gpus[pool] -= workload.held

    def _add_releasing(self, pool: Pool, workload: Workload) -> None:
        nodes = self._soon_nodes[pool]
        unheld = 0
        for node_id, gpus in self.held_on(workload).items():
            node = pool.node(node_id)
            if node is None or not gpus or node_id in pool.held_by:
                continue
            unheld += node_id not in self.no_gangs
            self.soon[node_id] += gpus
            self.releasing_on[node_id].append(workload)
            usable = len(pool.free(node_id)) + self.soon[node_id]
            heapq.heappush(nodes[usable], (node.name, node_id))
        if unheld:
            self._unheld[workload.id] = unheld
            self._releasing[pool][workload.id] = workload
            self._releasing_gpus[pool] += workload.held

    def soon_room(self, pool: Pool, gpus: int, usable: Callable[[int], int | None]) -> int | None:
        """The node where releasing work frees enough GPUs that `gpus` are free now or soon,
        the fewest such first, then by name; `usable(node)`: GPUs free now or soon there, None
        where the claimant may not go (held for a reservation: holds only grow in a cycle)."""
        self._index()
        nodes = self._soon_nodes.get(pool)
        if not nodes:
            return None
        # GPUs are taken and stopping work added as the cycle goes: an entry filed under a
        # count the node no longer has is filed again where it belongs (or dropped if the node
        # is out of reach), so that afterwards the top of every heap is current.
        for count in [c for c in nodes if c >= gpus]:
            heap = nodes[count]
            while heap and (now := usable(heap[0][1])) != count:
                entry = heapq.heappop(heap)
                if now is not None:
                    heapq.heappush(nodes[now], entry)
        tops = [(count, heap[0]) for count, heap in nodes.items() if count >= gpus and heap]
        return min(tops)[1][1] if tops else None

    def soonest_free(self, pool: Pool) -> Iterator[tuple[float, Node]]:
        """(when, node) of the pool's busy full-size nodes whose work all has a known end,
        soonest first; skipping nodes held for a reservation or given work this cycle. Sorted
        once a cycle."""
        cached = self._soonest.get(pool)
        if cached is None:
            self._index()
            cached = []
            for node in pool.nodes():
                when = self._node_end.get(node.id, math.inf)
                if when < math.inf and node.gpus == pool.node_size and not pool.is_whole(node):
                    cached.append((when, node.name, node))
            cached.sort(key=lambda item: item[:2])
            self._soonest[pool] = cached
        held, changed = pool.held_by, self._changed
        return (
            (when, node)
            for when, _, node in cached
            if node.id not in held and node.id not in changed
        )

    def _record(self, placements: tuple[Placement, ...], end: float) -> Pool | None:
        pool = None
        node_end = self._node_end
        for placement in placements:
            if placement.gpu_indices:
                node = placement.node_id
                if end > node_end.get(node, -math.inf):
                    node_end[node] = end
                pool = pool or self._capacity.pool_of(node)
        return pool


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
    """GPUs the workload holds on each node where it holds some (placements on one node
    counted together)."""
    held = {p.node_id: len(p.gpu_indices) for p in workload.placements}
    if len(held) == len(workload.placements) and all(held.values()):
        return held  # one placement a node, each with GPUs: as the portal lists them
    held = {}
    for placement in workload.placements:
        if placement.gpu_indices:
            held[placement.node_id] = held.get(placement.node_id, 0) + len(placement.gpu_indices)
    return held


def value(workload: Workload, now: float) -> tuple:
    """A victim's worth, least valuable first: priority, work lost, most recent start, id."""
    started = workload.started_at if workload.started_at is not None else now
    return (workload.priority, lost_work(workload, now), -started, workload.id)
