"""Shares of a GPU: which partly used GPUs have room, and which GPU a share job takes.

A share job (`Workload.slices`) takes eighths of one GPU of one node. A GPU that holds shares
is not free to whole-GPU work (the snapshot lists it as taken, like any held GPU); this keeps,
per node, the free eighths of each such GPU, and whose shares it holds: a GPU's shares are one
tenant's. Jobs run as their tenants' users, and an MPS server serves one user at a time (a
second user's clients wait until the first's exit), nor would MPS keep one tenant's memory
faults and SMs apart from another's.

The default placement is fragmentation gradient descent (FGD; Weng et al., "Beware of
Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX
ATC'23). A node's fragmentation for one kind of request is the free GPU capacity that kind
could not use there (all of it, when the kind does not fit at all); weighted by how often each
kind is expected (`Mix`), it measures how much of the node the expected work would leave
stranded. A share goes to the GPU whose taking grows that measure least. Best-fit (the partly
used GPU with the least room that fits, else a free GPU of the fullest node) is the
alternative.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from operator import attrgetter

from scheduler.engine.capacity import Pool
from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import SLICES, Node, Placement, SharePlacement, Snapshot, Workload
from scheduler.words import phrase

NO_SHARE_ROOM = phrase(
    "no {model} GPU holding its tenant's shares has {share} of a GPU free (the roomiest has "
    "{most}), and no {model} GPU is free"
)

# Kinds of request, as eighths of a GPU asked for (a whole GPU is `SLICES`), with their weights.
Mix = tuple[tuple[int, float], ...]


def mixes(workloads: Iterable[Workload]) -> dict[str, Mix]:
    """Per GPU model, the expected kinds of request (what a workload asks for, in eighths of a
    GPU), weighted by how often they occur among `workloads` of the model (its pending and
    running work: what came lately and what waits)."""
    shapes = Counter(map(attrgetter("gpu_model", "slices", "gpus"), workloads))  # one pass, in C
    counts: dict[str, Counter[int]] = {}
    for (model, slices, gpus), count in shapes.items():
        counts.setdefault(model, Counter())[slices or gpus * SLICES] += count
    return {
        model: tuple((kind, count / kinds.total()) for kind, count in sorted(kinds.items()))
        for model, kinds in counts.items()
    }


def fragmentation(state: tuple[int, ...], mix: Mix) -> float:
    """The free capacity of a node, in eighths, that the expected mix could not use: per kind
    of request, what it cannot use there, weighted (Weng et al.'s F_n(M)). `state` is the
    node's free eighths per GPU, largest first."""
    total = sum(state)
    whole = state.count(SLICES)
    stranded = 0.0
    for kind, weight in mix:
        if kind < SLICES:  # a share: GPUs with less room than it are stranded
            unusable = sum(f for f in state if f < kind) if state[0] >= kind else total
        elif kind <= len(state) * SLICES:  # whole GPUs of this node: partly used are stranded
            unusable = total - whole * SLICES if whole * SLICES >= kind else total
        else:  # whole nodes of a gang: only an empty node helps it
            unusable = 0 if whole == len(state) else total
        stranded += weight * unusable
    return stranded


@dataclass
class Seen:
    """What `Shares` worked out for one pool and tenant while the pool's free GPUs (`changes`)
    and the shares stay as they were. A node held for a reservation has no free GPUs, but may
    have room for shares: `find`'s are kept per count of held nodes too."""

    changes: int
    breakable: list[Node]  # `Shares._breakable`
    small: dict[int, tuple[Placement, ...]] = field(default_factory=dict)  # GPUs -> `find_small`
    # (eighths, nodes held) -> `find`'s GPU, or why none
    shares: dict[tuple[int, int], Placement | str] = field(default_factory=dict)


class Shares:
    """The partly used GPUs of the cycle, and where share jobs go."""

    def __init__(self, running: Iterable[Workload], snapshot: Snapshot) -> None:
        self.policy = snapshot.share_placement
        self._workloads = snapshot.workloads
        self._mixes: dict[str, Mix] = {}  # per GPU model (`mixes`), when first asked
        self.free: dict[int, dict[int, int]] = {}  # node id -> GPU index -> free eighths
        self.tenants: dict[tuple[int, int], int | None] = {}  # (node id, index) -> whose shares
        for workload in running:
            for placement in workload.placements if workload.slices else ():
                gpus = self.free.setdefault(placement.node_id, {})
                for index in placement.gpu_indices:
                    gpus[index] = gpus.get(index, SLICES) - workload.slices
                    self.tenants[placement.node_id, index] = workload.tenant
        self._scores: dict[tuple, float] = {}  # (state, GPU model) -> fragmentation
        # (GPU model, what tells the node's state apart, what is taken) -> a gradient
        self._gradients: dict[tuple, float] = {}
        self._active: bool | None = None  # whether the snapshot holds share work, when asked
        self._in_pool: dict[Pool, list[int]] = {}  # pool -> its nodes in `free`, when asked
        self._seen: dict[tuple[Pool, int | None], Seen] = {}  # per pool and tenant
        self._rooms: dict[tuple[Pool, int | None], dict[int, list]] = {}  # see `_rooms_in`

    def mix(self, gpu_model: str) -> Mix:
        """The expected mix of requests for a GPU model: its pending and running work."""
        if not self._mixes:  # every model's at once: one pass over the work
            self._mixes = mixes(self._workloads)
        return self._mixes.get(gpu_model, ())

    def find(self, pool: Pool, workload: Workload) -> Placement:
        """The GPU the share job takes (takes nothing), or Inadmissible with the reason."""
        seen = self._seen_in(pool, workload)
        key = (workload.slices, len(pool.held_by))  # nodes held for reservations lose room
        found = seen.shares.get(key)
        if found is None:
            try:
                found = self._find(pool, workload, seen.breakable)
            except Inadmissible as why:
                found = str(why)
            seen.shares[key] = found
        if isinstance(found, str):
            raise Inadmissible(found)
        return found

    def _find(self, pool: Pool, workload: Workload, breakable: list[Node]) -> Placement:
        slices, held = workload.slices, pool.held_by
        shared = [
            r for r in self._rooms_in(pool, workload) if r[0] >= slices and r[1].id not in held
        ]
        if self.policy == SharePlacement.BEST_FIT:
            if shared:
                _, node, index = min(shared, key=lambda c: (c[0], c[1].name, c[2]))
                return Placement(node.id, (index,))
            return self._fresh(pool, workload)
        fresh = [(SLICES, node, min(pool.free(node.id))) for node in breakable]
        if not shared and not fresh:
            return self._fresh(pool, workload)  # raises with the pool's reason
        model = workload.gpu_model
        # Ties, as best-fit breaks them: a partly used GPU before a free one, the least room
        # first, then by node name and GPU index.
        *_, index, node_id = min(
            (self._gradient(pool, node, i, slices, model), f == SLICES, f, node.name, i, node.id)
            for f, node, i in shared + fresh
        )
        return Placement(node_id, (index,))

    def find_apart(self, pool: Pool, workload: Workload, used: Collection[int]) -> Placement | None:
        """The share job's GPU on a node none of `used` is (where the other members of its
        spread group run): the partly used GPU with the least room that fits, else a free GPU
        placed as a one-GPU job away from them (`Pool.find_apart`); None where no such node has
        room. Takes nothing."""
        slices, held = workload.slices, pool.held_by
        rooms = [
            r
            for r in self._rooms_in(pool, workload)
            if r[0] >= slices and r[1].id not in used and r[1].id not in held
        ]
        if rooms:
            _, node, index = min(rooms, key=lambda r: (r[0], r[1].name, r[2]))
            return Placement(node.id, (index,))
        whole = pool.find_apart(replace(workload, slices=0, gpus=1), used)
        return Placement(whole[0].node_id, whole[0].gpu_indices[:1]) if whole else None

    def find_small(self, pool: Pool, workload: Workload) -> tuple[Placement, ...]:
        """GPUs of one node for a small whole-GPU job, by FGD as for shares, where the snapshot
        holds share work and FGD is the policy; else none, and the engine's best-fit places it
        as ever (in a cluster of whole GPUs only, nothing changes). Takes nothing."""
        if self.policy != SharePlacement.FGD or workload.gpus >= pool.node_size:
            return ()
        if self._active is None:
            self._active = bool(self.free) or any(w.slices for w in self._workloads)
        if not self._active:
            return ()
        seen = self._seen_in(pool, workload)
        found = seen.small.get(workload.gpus)
        if found is None:
            found = seen.small[workload.gpus] = self._small(pool, workload, seen.breakable)
        return found

    def _small(self, pool: Pool, workload: Workload, breakable: list[Node]) -> tuple:
        """`find_small`'s GPUs: one pass over the breakable nodes, each one's free GPUs
        counted once (it runs for most small jobs, as each admission changes the pool)."""
        count, model = workload.gpus, workload.gpu_model
        # Ties, as best-fit breaks them: the node with the fewest free GPUs, then by name.
        best = None
        for node in breakable:
            free = len(pool.free(node.id))
            if free >= count:
                key = (self._whole_gradient(pool, node, free, count, model), free, node.name)
                if best is None or key < best[0]:
                    best = (key, node.id)
        if best is None:
            return ()
        return (Placement(best[1], tuple(sorted(pool.free(best[1]))[:count])),)

    def take(self, pool: Pool, placement: Placement, workload: Workload) -> None:
        """Book the share job's eighths on its GPU (taking the GPU from the free ones if it was
        free)."""
        [index] = placement.gpu_indices
        if index in pool.free(placement.node_id):
            pool.take(placement, workload.tenant)
        self._seen.clear()
        if placement.node_id not in self.free and pool in self._in_pool:
            self._in_pool[pool].append(placement.node_id)
        gpus = self.free.setdefault(placement.node_id, {})
        gpus[index] = gpus.get(index, SLICES) - workload.slices
        self.tenants[placement.node_id, index] = workload.tenant
        for (of_pool, tenant), rooms in self._rooms.items():
            if of_pool is pool:  # a node new to shares goes last, as in `_nodes_in`
                rooms[placement.node_id] = self._node_rooms(pool, placement.node_id, tenant)

    def _rooms_in(self, pool: Pool, workload: Workload) -> list[tuple[int, Node, int]]:
        """(free eighths, node, GPU index) of the partly used GPUs with room of the pool that
        the workload's tenant may use: those holding its own tenant's shares, of a schedulable
        node, and on a single-tenant node only beside its own tenant's work. Kept per node, and
        worked out again for a node only when `take` changes its shares."""
        key, tenant = (pool, workload.tenant), workload.tenant
        rooms = self._rooms.get(key)
        if rooms is None:
            nodes = self._nodes_in(pool)
            rooms = self._rooms[key] = {n: self._node_rooms(pool, n, tenant) for n in nodes}
        return [room for node_rooms in rooms.values() for room in node_rooms]

    def _node_rooms(self, pool: Pool, node_id: int, tenant: int | None) -> list:
        """`_rooms_in` of one node."""
        node = pool.node(node_id)
        if not node.schedulable or (node.single_tenant and node.tenant not in (None, tenant)):
            return []
        tenants = self.tenants
        return [
            (f, node, i)
            for i, f in self.free[node_id].items()
            if 0 < f < SLICES and tenants.get((node_id, i)) == tenant
        ]

    def _breakable(self, pool: Pool, workload: Workload) -> list[Node]:
        """Nodes with free GPUs the job may take: one of each count of free GPUs (the others
        of a count look alike to FGD), and every node that holds shares already (on a
        single-tenant one, only beside its own tenant's work). In no order: the choices
        among them break ties by name. A node may be listed twice."""
        nodes = pool.one_of_each_count(workload.tenant)
        for node_id in pool.with_free(self._nodes_in(pool)):
            if node_id in pool.held_by:
                continue
            node = pool.node(node_id)
            if not node.single_tenant or node.tenant in (None, workload.tenant):
                nodes.append(node)
        return nodes

    def _seen_in(self, pool: Pool, workload: Workload) -> Seen:
        """What was worked out for the pool and the workload's tenant, afresh where the pool's
        free GPUs have changed since (`take` forgets it all when the shares change)."""
        key = (pool, workload.tenant)
        seen = self._seen.get(key)
        if seen is None or seen.changes != pool.changes:
            seen = self._seen[key] = Seen(pool.changes, self._breakable(pool, workload))
        return seen

    def _nodes_in(self, pool: Pool) -> list[int]:
        """The nodes of the pool that hold shares."""
        found = self._in_pool.get(pool)
        if found is None:
            found = self._in_pool[pool] = [n for n in self.free if pool.node(n) is not None]
        return found

    def _fresh(self, pool: Pool, workload: Workload) -> Placement:
        """A free GPU of the fullest node that has one (best-fit, as for a one-GPU job)."""
        try:
            [placement] = pool.find(workload, 1)
        except Inadmissible:
            share = f"{workload.slices}/{SLICES}"
            most = max((room[0] for room in self._rooms_in(pool, workload)), default=0)
            raise Inadmissible(
                NO_SHARE_ROOM.format(model=workload.gpu_model, share=share, most=f"{most}/8")
            ) from None
        return Placement(placement.node_id, placement.gpu_indices[:1])

    def _gradient(self, pool: Pool, node: Node, index: int, slices: int, model: str) -> float:
        """How much taking `slices` eighths of GPU `index` grows the node's fragmentation: the
        same for nodes alike in size, free GPUs and partly used ones (worked out once)."""
        partly = self.free.get(node.id, {})
        free = len(pool.free(node.id))
        key = (model, free, node.gpus, tuple(partly.values()), partly.get(index), slices)
        gradient = self._gradients.get(key)
        if gradient is None:
            gradient = self._gradients[key] = self._share_gradient(pool, node, index, slices, model)
        return gradient

    def _share_gradient(self, pool: Pool, node: Node, index: int, slices: int, model: str) -> float:
        gpus = dict(self.free.get(node.id, {}))
        before = self._state(pool, node, gpus)
        gpus[index] = gpus.get(index, SLICES) - slices
        if index in pool.free(node.id):
            # The state counts the free GPUs as `SLICES` each: one of them is now partly used.
            after = self._state(pool, node, gpus, taken=1)
        else:
            after = self._state(pool, node, gpus)
        return self._score(after, model) - self._score(before, model)

    def _whole_gradient(self, pool: Pool, node: Node, free: int, count: int, model: str) -> float:
        """How much taking `count` of the node's `free` free GPUs grows its fragmentation: the
        same for nodes alike in size, free GPUs and partly used ones (worked out once)."""
        partly = self.free.get(node.id, {})
        key = (model, free, node.gpus, tuple(partly.values()), count)
        gradient = self._gradients.get(key)
        if gradient is None:
            before = self._state(pool, node, partly)
            after = self._state(pool, node, partly, taken=count)
            gradient = self._score(after, model) - self._score(before, model)
            self._gradients[key] = gradient
        return gradient

    @staticmethod
    def _state(pool: Pool, node: Node, partly: dict[int, int], taken: int = 0) -> tuple:
        free = [SLICES] * (len(pool.free(node.id)) - taken) + list(partly.values())
        free += [0] * (node.gpus - len(free))
        return tuple(sorted(free, reverse=True))

    def _score(self, state: tuple[int, ...], model: str) -> float:
        key = (state, model)
        score = self._scores.get(key)
        if score is None:
            score = self._scores[key] = fragmentation(state, self.mix(model))
        return score
