"""Free GPUs during one cycle, kept per GPU model with counters per topology domain.

A domain (`topology.py`) is a path: `()` is the whole cluster, then `(datacenter,)`,
`(datacenter, pod)` and `(datacenter, pod, leaf)`. Each keeps its count of free whole nodes and
free GPUs, built once per cycle and updated as GPUs are taken or given back; whole-node counts
are also bucketed per depth (`WholeCounts`), so placing a gang costs at most O(domains) and
usually far less, never O(nodes), and a gang that cannot fit anywhere is told so in O(1).

Placement rules:
- jobs of at least a node's GPUs take whole free nodes, in the tightest domain that holds them
  all: the leaf, pod or data center with the fewest free whole nodes that still fits (best fit,
  ties by name), so larger empty domains stay free for larger gangs;
- smaller jobs go to the node with the fewest free GPUs that still fits (best fit, ties by name),
  on its lowest free indices; only when no partly used node fits do they break a whole node,
  taken from the leaf with the fewest free whole nodes.

GPUs held for a reservation are taken like any others, so placement avoids them; the cycle
lends them back for a moment (`lent`) to a workload that may backfill them.
"""

from __future__ import annotations

import copy
import heapq
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from itertools import compress, islice, pairwise
from operator import attrgetter, is_not

from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import Node, Placement, TopologyLevel, Workload
from scheduler.engine.topology import (
    DEPTH,
    DOMAIN_NAME,
    THE_CLUSTER,
    Domain,
    WholeCounts,
    domains_of,
    levels_up_to,
    widest_level,
)
from scheduler.words import phrase

NO_POOL = phrase("{where} has no {model} nodes")
REGION = phrase("region {region}")
NO_GPUS = phrase("asks for {gpus} GPUs; a workload needs at least one")
WHOLE_NODES_ONLY = phrase(
    "needs {gpus} GPUs; jobs of {size} GPUs or more must use whole nodes of {size} GPUs"
)
NO_NODE_FREE = phrase(
    "no schedulable {model} node has {gpus} free GPUs (the most on one node is {most}; {free} "
    "free in all)"
)
TOO_BIG_FOR_NODE = phrase("needs {gpus} GPUs on one node, but {model} nodes have {size}")
WHOLE_NODES = phrase("{count} whole {model} node"), phrase("{count} whole {model} nodes")
NO_ROOM_ANYWHERE = phrase("needs {nodes}; the cluster has {most} free")
NO_ROOM_IN_ONE = phrase("needs {nodes} in one {domain}; the best {domain} has {most} free")


POOL_KEY = attrgetter("region", "gpu_model")
# All a node is but its free GPUs: what a node index may not see change (`NodeIndex`).
PLACE = attrgetter(*(f.name for f in fields(Node) if f.name != "free"))


def pools_of(nodes: Iterable[Node]) -> dict[tuple[str, str], Pool]:
    """A pool per (region, GPU model), indexed from the nodes."""
    nodes = list(nodes)
    keys = set(map(POOL_KEY, nodes))
    by_model: dict[tuple[str, str], list[Node]] = defaultdict(list)
    if len(keys) == 1:  # the common case, without a loop in Python
        by_model[keys.pop()] = nodes
    else:
        for node in nodes:
            by_model[POOL_KEY(node)].append(node)
    return {key: Pool(key[1], members) for key, members in sorted(by_model.items())}


class NodeIndex:
    """The pools of the last snapshot's nodes, kept by a caller that plans one snapshot of the
    same fleet after another (the simulator, the start estimates' forward run).

    The next snapshot's pools are brought up to date from the nodes that changed, not indexed
    from every node again. Nodes are frozen, so a node that changed is a new object: which
    ones are is found by identity, in C. Only their free GPUs may change that way; a node
    added, removed, moved, resized or cordoned indexes the fleet afresh. Each cycle works on
    copies (`Pool.copy`), so the index stays as the snapshot left it.
    """

    def __init__(self) -> None:
        self._last: tuple[Node, ...] = ()  # the nodes the pools are of
        self._pools: dict[tuple[str, str], Pool] = {}

    def pools(self, nodes: tuple[Node, ...]) -> dict[tuple[str, str], Pool]:
        """The pools of these nodes, for one cycle to change as it pleases."""
        last, self._last = self._last, ()  # until they are indexed: no half-taken state
        changed = list(map(is_not, nodes, last)) if len(nodes) == len(last) else None
        if (
            changed is None
            or sum(changed) > len(nodes) // 4
            or not self._refresh(list(compress(nodes, changed)), list(compress(last, changed)))
        ):
            self._pools = pools_of(nodes)
        self._last = nodes
        return {key: pool.copy() for key, pool in self._pools.items()}

    def _refresh(self, nodes: list[Node], before: list[Node]) -> bool:
        """Take in the nodes' new free GPUs; False, changing nothing, when anything else of
        theirs changed."""
        if list(map(PLACE, nodes)) != list(map(PLACE, before)):
            return False
        touched = set()
        for node in nodes:
            if node.schedulable:
                pool = self._pools[POOL_KEY(node)]
                pool.refresh(node)
                touched.add(pool)
        for pool in touched:
            pool.drop_stale()
        return True


class Capacity:
    """Free GPUs of every GPU model in a snapshot, one pool per region and model: a queue's
    work runs only in its own region."""

    def __init__(self, nodes: Iterable[Node], index: NodeIndex | None = None) -> None:
        self._pools = pools_of(nodes) if index is None else index.pools(tuple(nodes))
        self._pool_of_node: dict[int, Pool] = {}
        for pool in self._pools.values():
            self._pool_of_node.update(dict.fromkeys(pool.node_ids(), pool))

    def pool(self, region: str, gpu_model: str) -> Pool:
        """The nodes of `gpu_model` in `region`, or Inadmissible when there are none."""
        try:
            return self._pools[region, gpu_model]
        except KeyError:
            where = REGION.format(region=region) if region else THE_CLUSTER
            raise Inadmissible(NO_POOL.format(where=where, model=gpu_model)) from None

    def pool_keys(self) -> Collection[tuple[str, str]]:
        """(region, GPU model) of every pool."""
        return self._pools.keys()

    def pool_of(self, node_id: int) -> Pool | None:
        """The pool of a schedulable node; None for unknown or unschedulable ones."""
        return self._pool_of_node.get(node_id)

    def take(self, placements: Iterable[Placement]) -> None:
        """Mark these GPUs used; GPUs of unknown or unschedulable nodes are ignored."""
        pool_of = self._pool_of_node.get
        for placement in placements:
            pool = pool_of(placement.node_id)
            # Mostly running work whose GPUs the snapshot lists as taken already: skip quickly.
            if pool is not None and not pool._free[placement.node_id].isdisjoint(
                placement.gpu_indices
            ):
                pool.take(placement)


class Pool:
    """The nodes of one GPU model: free GPUs per node, free whole nodes and GPUs per domain."""

    def __init__(self, gpu_model: str, nodes: list[Node]) -> None:
        self.gpu_model = gpu_model
        # Unschedulable nodes still tell the node size, so a badly shaped job hears why.
        self.node_size = max(map(attrgetter("gpus"), nodes))
        self._free: dict[int, set[int] | frozenset[int]] = {}  # see `_add_all`
        self._nodes: dict[int, Node] = {}
        self._domains: dict[int, tuple[Domain, ...]] = {}  # node id -> its domains
        self._free_gpus: Counter[Domain] = Counter()
        self._children: dict[Domain, set[Domain]] = defaultdict(set)
        self._domain_nodes: dict[Domain, list[Node]] = defaultdict(list)  # leaves; others lazily
        self._sizes: dict[Domain, int] = {}  # nodes per domain above a leaf, counted lazily
        self._leaves_of: dict[Domain, list[Domain]] = {}  # leaves per domain above one, lazily
        self._largest: dict[int, int] = {}  # depth -> nodes of its largest domain, lazily
        # Partly free nodes by free-GPU count, each a heap of (name, id); entries go stale when
        # a node's count changes and are dropped when seen.
        self._partial: dict[int, list[tuple[str, int]]] = defaultdict(list)
        self._held: dict[int, list[Placement]] = {}  # reservation owner -> GPUs it holds
        self.held_by: dict[int, int] = {}  # node id -> owner of the reservation holding it
        self._changes = 0  # bumped whenever a node's free GPUs change
        self._whole_changes = 0  # ... whenever a node becomes whole or stops being so
        self._whole_pick: dict[int, Node] = {}  # whole changes -> `_whole_for_small`'s
        self._small_failed: dict[int, tuple[int, str]] = {}  # GPUs -> (changes, reason)
        # Single-tenant nodes are never in `_partial`: partly free, they are offered only to
        # the tenant whose work they hold (node -> tenant, tenant -> its nodes), empty to anyone.
        self._single: set[int] = set()
        self._owner: dict[int, int] = {}
        self._owned: dict[int, set[int]] = defaultdict(set)
        whole = self._add_all(sorted(nodes, key=attrgetter("name", "id")))
        self._wholes = WholeCounts(whole)
        self._whole = self._wholes.count  # free whole nodes per domain
        self._domains_at = {
            depth: sorted(d for d in self._free_gpus if len(d) == depth) for depth in range(4)
        }

    def _add_all(self, nodes: list[Node]) -> Counter[Domain]:
        """Index the schedulable nodes (in name order); free whole nodes per domain.

        This runs for every node of every cycle, so it is kept lean. Nodes with the same free
        GPUs share one frozen set of them (most nodes are all free or all taken) until a GPU of
        theirs is taken or given back (`_editable`); each leaf's domains, free GPUs and whole
        nodes are gathered in one small record per leaf (so the nested domain tuples are
        hashed once per leaf, not once per node).
        """
        size = self.node_size
        # (free GPU tuple, node size) -> (shared frozen set, its size, whether a whole node)
        shared: dict[tuple[tuple[int, ...], int], tuple[frozenset[int], int, bool]] = {}
        # (datacenter, pod, leaf) -> [its domains, free GPUs, free whole nodes, its node list]
        leaves: dict[tuple[str, str, str], list] = {}
        nodes_of, free_of, domains_of_node = self._nodes, self._free, self._domains
        for node in nodes:
            if not node.schedulable:
                continue
            node_id = node.id
            entry = shared.get((node.free, node.gpus))
            if entry is None:
                # Indices the node does not have are not free.
                free = frozenset(node.free) & frozenset(range(node.gpus))
                entry = shared[node.free, node.gpus] = (
                    free,
                    len(free),
                    node.gpus == size == len(free),
                )
            free_of[node_id], count, whole = entry
            nodes_of[node_id] = node
            leaf = leaves.get((node.datacenter, node.pod, node.leaf))
            if leaf is None:
                domains = domains_of(node)
                leaf = leaves[node.datacenter, node.pod, node.leaf] = [
                    domains,
                    0,
                    0,
                    self._domain_nodes[domains[3]],
                ]
            domains_of_node[node_id] = leaf[0]
            leaf[3].append(node)
            leaf[1] += count
            if node.single_tenant:
                self._single.add(node_id)
                if node.tenant is not None:
                    self._claim(node_id, node.tenant)
            if whole:
                leaf[2] += 1
            elif count and (not node.single_tenant or count == node.gpus):
                heapq.heappush(self._partial[count], (node.name, node_id))
        counts: Counter[Domain] = Counter()
        for domains, free_gpus, whole, _ in leaves.values():
            for parent, child in pairwise(domains):
                self._children[parent].add(child)
            for domain in domains:
                self._free_gpus[domain] += free_gpus
                if whole:
                    counts[domain] += whole
        return counts

    def copy(self) -> Pool:
        """A copy for one cycle to take GPUs from; what no cycle changes (the nodes and
        domains, and what is worked out from them) is shared."""
        pool = copy.copy(self)
        pool._free = dict(self._free)  # its frozen sets are replaced, not edited (`_editable`)
        pool._free_gpus = self._free_gpus.copy()
        pool._wholes = self._wholes.copy()
        pool._whole = pool._wholes.count
        pool._partial = defaultdict(list, {n: list(h) for n, h in self._partial.items() if h})
        pool._held, pool.held_by, pool._small_failed, pool._whole_pick = {}, {}, {}, {}
        pool._owner = dict(self._owner)
        pool._owned = defaultdict(set, {t: set(n) for t, n in self._owned.items()})
        return pool

    def refresh(self, node: Node) -> None:
        """Take in new free GPUs of a node of this pool (`NodeIndex`): its own, not those of
        the `Node` first indexed, which stands only for where it is from then on."""
        free = frozenset(node.free) & frozenset(range(node.gpus))
        before = self._free[node.id]
        if free != before:
            was_whole = self.is_whole(node)
            self._free[node.id] = free
            self._recount(node, len(before), was_whole)

    def drop_stale(self) -> None:
        """Drop stale entries from the heaps of partly free nodes: all of them once they are
        twice as many as the nodes, else those on top (which each cycle would drop again)."""
        if sum(map(len, self._partial.values())) > 2 * len(self._free):
            self._partial = defaultdict(list)
            for node_id, free in self._free.items():
                node = self._nodes[node_id]
                if free and not self.is_whole(node) and self.offered(node_id, None):
                    self._partial[len(free)].append((node.name, node_id))
            for heap in self._partial.values():
                heapq.heapify(heap)
        for count, heap in self._partial.items():
            while heap and len(self._free[heap[0][1]]) != count:
                heapq.heappop(heap)

    # -- reading -----------------------------------------------------------------------------

    def nodes(self) -> Iterable[Node]:
        """The schedulable nodes of this pool."""
        return self._nodes.values()

    def node_ids(self) -> Iterable[int]:
        """The ids of the schedulable nodes of this pool."""
        return self._nodes.keys()

    @property
    def changes(self) -> int:
        """How many times GPUs were taken or given back: within a cycle, while it stays the
        same, so do the free GPUs of every node (and the tenants single-tenant nodes hold)."""
        return self._changes

    def node(self, node_id: int) -> Node | None:
        """A schedulable node of this pool by id."""
        return self._nodes.get(node_id)

    def free(self, node_id: int) -> set[int] | frozenset[int]:
        """The free GPU indices of a node of this pool (do not modify)."""
        return self._free[node_id]

    def with_free(self, node_ids: Iterable[int]) -> list[int]:
        """Those of the nodes of this pool that have free GPUs, in the same order."""
        return list(filter(self._free.__getitem__, node_ids))

    def domains_at(self, depth: int) -> list[Domain]:
        """The domains at a path depth, by name."""
        return self._domains_at[depth]

    def largest(self, depth: int) -> int:
        """The most schedulable nodes a domain at a path depth has."""
        found = self._largest.get(depth)
        if found is None:
            found = max(map(self.domain_size, self._domains_at[depth]), default=0)
            self._largest[depth] = found
        return found

    def domains_of(self, node_id: int) -> tuple[Domain, ...]:
        """The domains of a node of this pool, widest first."""
        return self._domains[node_id]

    def domain_nodes(self, domain: Domain) -> list[Node]:
        """The schedulable nodes of a domain, by name."""
        found = self._domain_nodes.get(domain)
        if found is None:
            found = [
                node
                for child in sorted(self._children[domain])
                for node in self.domain_nodes(child)
            ]
            found.sort(key=attrgetter("name", "id"))
            self._domain_nodes[domain] = found
        return found

    def domain_size(self, domain: Domain) -> int:
        """How many schedulable nodes a domain has."""
        nodes = self._domain_nodes.get(domain)
        if nodes is not None:
            return len(nodes)
        size = self._sizes.get(domain)
        if size is None:
            size = sum(self.domain_size(child) for child in self._children.get(domain, ()))
            self._sizes[domain] = size
        return size

    def whole(self, domain: Domain) -> int:
        """Free whole nodes in a domain."""
        return self._whole[domain]

    def whole_nodes(self, domain: Domain) -> list[Node]:
        """The free whole nodes of a domain, by name: looked for only in its leaves that have
        some."""
        leaves = [domain] if len(domain) == 3 else self._leaves(domain)
        found = [
            node
            for leaf in leaves
            if self._whole[leaf]
            for node in self._domain_nodes[leaf]
            if self.is_whole(node)
        ]
        found.sort(key=attrgetter("name", "id"))
        return found

    def _leaves(self, domain: Domain) -> list[Domain]:
        """The leaves of a domain above a leaf."""
        found = self._leaves_of.get(domain)
        if found is None:
            found = [
                leaf
                for child in self._children.get(domain, ())
                for leaf in ([child] if len(child) == 3 else self._leaves(child))
            ]
            self._leaves_of[domain] = found
        return found

    def is_whole(self, node: Node) -> bool:
        """Whether every GPU of a full-sized node is free."""
        return node.gpus == self.node_size and len(self._free[node.id]) == node.gpus

    def free_gpus(self, domain: Domain = ()) -> int:
        """Free GPUs in a domain (by default the whole pool)."""
        return self._free_gpus[domain]

    def best_whole(self, depth: int) -> int:
        """The most free whole nodes any one domain at `depth` has."""
        return self._wholes.best(depth)

    # -- placing -----------------------------------------------------------------------------

    def check_shape(self, gpus: int) -> None:
        """Raise Inadmissible when no placement could ever give exactly `gpus` GPUs."""
        size = self.node_size
        if gpus < 1:
            raise Inadmissible(NO_GPUS.format(gpus=gpus))
        if gpus >= size and gpus % size:
            raise Inadmissible(WHOLE_NODES_ONLY.format(gpus=gpus, size=size))

    def find(self, workload: Workload, gpus: int | None = None) -> tuple[Placement, ...]:
        """GPUs for the workload (`gpus` of them, by default all it asks for), all or nothing,
        or Inadmissible with the reason.

        Takes nothing: the cycle calls `take` once it has decided to admit.
        """
        gpus = workload.gpus if gpus is None else gpus
        self.check_shape(gpus)
        if gpus < self.node_size:
            no_room = self.known_no_room(gpus, workload.tenant)
            if no_room is not None:
                raise Inadmissible(no_room)
            try:
                node = self._best_partial(gpus, workload.tenant) or self._break_whole_node(gpus)
            except Inadmissible as why:
                if not self._owned.get(workload.tenant):  # said of every tenant's job
                    self._small_failed[gpus] = (self._changes, str(why))
                raise
            return (Placement(node.id, tuple(sorted(self._free[node.id])[:gpus])),)
        count = gpus // self.node_size
        nodes = self._pick_whole(self._tightest_domain(count, widest_level(workload)), count)
        return tuple(Placement(node.id, tuple(sorted(self._free[node.id]))) for node in nodes)

    def known_no_room(self, gpus: int, tenant: int | None = None) -> str | None:
        """Why a job of `gpus` GPUs, fewer than a node, found no room (`find`) if no GPU was
        taken or given back since; else None (also for a tenant with single-tenant nodes of
        its own here, which others' jobs do not see)."""
        if self._owned.get(tenant):
            return None
        failed = self._small_failed.get(gpus)
        return failed[1] if failed is not None and failed[0] == self._changes else None

    def find_apart(self, workload: Workload, used: Collection[int]) -> tuple[Placement, ...]:
        """One node's GPUs for the workload away from the nodes in `used` (where the other
        members of its spread group run): on a leaf none of them is on where one has room,
        else on a node none of them is; then the fewest free GPUs, then the name. Empty when
        no such node has room, or the workload needs several nodes: `find` places it then.

        A scan of the pool's nodes: kept for spread groups, a few admissions a cycle."""
        gpus = workload.gpus
        if gpus > self.node_size:
            return ()
        leaves = {self._domains[n][-1] for n in used if n in self._domains}
        best: tuple[tuple, int] | None = None
        for node_id, free in self._free.items():
            if len(free) < gpus or node_id in used or not self.offered(node_id, workload.tenant):
                continue
            key = (self._domains[node_id][-1] in leaves, len(free), self._nodes[node_id].name)
            if best is None or key < best[0]:
                best = (key, node_id)
        if best is None:
            return ()
        return (Placement(best[1], tuple(sorted(self._free[best[1]])[:gpus])),)

    def take(self, placement: Placement, tenant: int | None = None) -> None:
        """Mark the placement's GPUs used and update the counters of every domain above; a
        single-tenant node's are `tenant`'s from then on (None: nobody's)."""
        node = self._nodes.get(placement.node_id)
        if node is None:
            return
        if self._free[node.id].isdisjoint(placement.gpu_indices):
            return  # nothing of it is free (e.g. a running workload's GPUs): nothing changes
        free = self._editable(node.id)
        was_whole = self.is_whole(node)
        before = len(free)
        free.difference_update(placement.gpu_indices)
        if node.id in self._single and tenant is not None:
            self._claim(node.id, tenant)
        self._recount(node, before, was_whole)

    def _claim(self, node_id: int, tenant: int) -> None:
        """The single-tenant node holds `tenant`'s work now."""
        before = self._owner.get(node_id)
        if before is not None:
            self._owned[before].discard(node_id)
        self._owner[node_id] = tenant
        self._owned[tenant].add(node_id)

    def give(self, placement: Placement) -> None:
        """Mark the placement's GPUs free again (the inverse of `take`)."""
        node = self._nodes.get(placement.node_id)
        if node is None:
            return
        free = self._editable(node.id)
        was_whole = self.is_whole(node)
        before = len(free)
        free.update(i for i in placement.gpu_indices if 0 <= i < node.gpus)
        self._recount(node, before, was_whole)

    def _editable(self, node_id: int) -> set[int]:
        """The node's own set of free GPUs, copied from the shared frozen one at first."""
        free = self._free[node_id]
        if type(free) is frozenset:
            free = self._free[node_id] = set(free)
        return free  # type: ignore[return-value]

    def _recount(self, node: Node, before: int, was_whole: bool) -> None:
        after = len(self._free[node.id])
        if after == before:
            return
        self._changes += 1
        domains, free_gpus = self._domains[node.id], self._free_gpus
        for domain in domains:
            free_gpus[domain] += after - before
        whole_change = self.is_whole(node) - was_whole
        if whole_change:
            self._whole_changes += 1
            for domain in domains:
                self._wholes.change(domain, whole_change)
        if node.id in self._single and not self.offered(node.id, None):
            return  # partly free single-tenant: its tenant's only (`_owned`)
        if 0 < after < node.gpus or (after and node.gpus != self.node_size):
            heapq.heappush(self._partial[after], (node.name, node.id))

    # -- reservations ------------------------------------------------------------------------

    def hold(self, owner: int, node_ids: Iterable[int]) -> None:
        """Take every free GPU of these nodes for the reservation of workload `owner`."""
        held = self._held.setdefault(owner, [])
        for node_id in node_ids:
            self.held_by[node_id] = owner
            free = self._free.get(node_id)
            if free:
                placement = Placement(node_id, tuple(sorted(free)))
                self.take(placement)
                held.append(placement)

    def held_nodes(self, owner: int) -> int:
        """Nodes on which GPUs are held free for `owner`'s reservation."""
        return len(self._held.get(owner, ()))

    @contextmanager
    def lent(self, owner: int) -> Iterator[None]:
        """Give back the GPUs held for `owner` for the duration of the block, then hold again
        whichever of them are still free."""
        held = self._held.get(owner, [])
        for placement in held:
            self.give(placement)
        try:
            yield
        finally:
            still = []
            for placement in held:
                free = self._free[placement.node_id]
                back = Placement(
                    placement.node_id, tuple(i for i in placement.gpu_indices if i in free)
                )
                if back.gpu_indices:
                    self.take(back)
                    still.append(back)
            self._held[owner] = still

    def fits_lent(self, gpus: int, tenant: int | None, owners: Iterable[int]) -> bool:
        """Whether a job of `gpus` GPUs, fewer than a node, that `find` finds no room for now
        would find room with the GPUs held for `owners` lent (`lent`): on a node they hold,
        with the node's free GPUs and theirs, offered to `tenant`'s work. Changes nothing."""
        lent: defaultdict[int, set[int]] = defaultdict(set)
        for owner in owners:
            for placement in self._held.get(owner, ()):
                lent[placement.node_id].update(placement.gpu_indices)
        for node_id, indices in lent.items():
            after = len(self._free[node_id] | indices)
            if after >= gpus and (
                node_id not in self._single
                or after == self._nodes[node_id].gpus
                or node_id in self._owned.get(tenant, ())
            ):
                return True
        return False

    # -- internals ---------------------------------------------------------------------------

    def _best_partial(self, gpus: int, tenant: int | None = None) -> Node | None:
        """The partly free node with the fewest free GPUs that still has `gpus`: of the shared
        nodes, and of the single-tenant nodes holding `tenant`'s work."""
        found = None
        for count in range(gpus, self.node_size):
            heap = self._partial[count]
            while heap and len(self._free[heap[0][1]]) != count:
                heapq.heappop(heap)
            if heap:
                found = self._nodes[heap[0][1]]
                break
        owned = self._owned.get(tenant)
        if not owned:  # no single-tenant node of its: the common case
            return found
        own = [self._nodes[n] for n in owned if gpus <= len(self._free[n])]
        key = lambda node: (len(self._free[node.id]), node.name)  # noqa: E731
        return min([*own, found] if found else own, key=key, default=None)

    def one_of_each_count(self, tenant: int | None = None) -> list[Node]:
        """One partly free node per count of free GPUs, and one whole free node: the kinds of
        node a one-GPU job could go to (the nodes of one kind differ only in where they are),
        with the single-tenant nodes holding `tenant`'s work."""
        nodes = []
        for count in range(1, self.node_size):
            heap = self._partial[count]
            while heap and len(self._free[heap[0][1]]) != count:
                heapq.heappop(heap)
            if heap:
                nodes.append(self._nodes[heap[0][1]])
        if self._whole[()]:
            nodes.append(self._whole_for_small())
        owned = self._owned.get(tenant, ())
        return nodes + [self._nodes[n] for n in owned if self._free[n]]

    def offered(self, node_id: int, tenant: int | None) -> bool:
        """Whether the node's free GPUs are offered to `tenant`'s work: a shared node's, an
        empty one's, or a single-tenant node's that holds that tenant's work."""
        return (
            node_id not in self._single
            or len(self._free[node_id]) == self._nodes[node_id].gpus
            or node_id in self._owned.get(tenant, ())
        )

    def _break_whole_node(self, gpus: int) -> Node:
        """A whole free node for a small job, from the leaf with the fewest whole nodes."""
        if self._whole[()] == 0:
            raise Inadmissible(
                NO_NODE_FREE.format(
                    model=self.gpu_model,
                    gpus=gpus,
                    most=self._most_free_on_a_node(),
                    free=self._free_gpus[()],
                )
            )
        return self._whole_for_small()

    def _whole_for_small(self) -> Node:
        """The whole free node a small job breaks (there is one): the first by name of the leaf
        with the fewest whole nodes; kept until a node becomes whole or stops being so."""
        node = self._whole_pick.get(self._whole_changes)
        if node is None:
            node = self._pick_whole(self._tightest_domain(1, TopologyLevel.LEAF), 1)[0]
            self._whole_pick = {self._whole_changes: node}
        return node

    def growth(self, workload: Workload, most: int) -> tuple[Placement, ...]:
        """Free GPUs a running workload could grow by, up to `most`: on its node for a one-node
        workload (it stays on that node), else whole free nodes in the domain its topology
        allows around its first node. Takes nothing."""
        size, first = self.node_size, workload.placements[0].node_id
        if most <= 0 or any(p.node_id not in self._domains for p in workload.placements):
            return ()  # a node of its is not schedulable (cordoned, down): it stays as it is
        if len(workload.placements) == 1 and workload.held < size:
            free = sorted(self._free[first])[: min(most, size - workload.held)]
            return (Placement(first, tuple(free)),) if free else ()
        count = most // size
        if not count or workload.held % size:
            return ()
        domain = self._domains[first][DEPTH[max(widest_level(workload), TopologyLevel.LEAF)]]
        nodes = self._pick_whole(domain, min(count, self._whole[domain]))
        return tuple(Placement(n.id, tuple(sorted(self._free[n.id]))) for n in nodes)

    def most_free(self, tenant: int | None = None) -> int:
        """The most GPUs free on one node for `tenant`'s work: whole nodes' too."""
        return (
            self.node_size
            if self._wholes.best(DEPTH[TopologyLevel.ANY])
            else self._most_free_on_a_node(tenant)
        )

    def _most_free_on_a_node(self, tenant: int | None = None) -> int:
        for count in range(self.node_size - 1, 0, -1):
            if self._best_partial(count, tenant) is not None:
                return count
        return 0

    def _tightest_domain(self, count: int, widest: TopologyLevel) -> Domain:
        """The tightest domain, up to `widest`, with the fewest free whole nodes >= `count`."""
        if widest == TopologyLevel.NODE:
            if count > 1:
                raise Inadmissible(
                    TOO_BIG_FOR_NODE.format(
                        gpus=count * self.node_size, model=self.gpu_model, size=self.node_size
                    )
                )
            widest = TopologyLevel.LEAF  # a single node always sits within one leaf
        for level in levels_up_to(widest):
            domain = self._wholes.tightest(DEPTH[level], count)
            if domain is not None:
                return domain
        raise Inadmissible(self.no_domain_reason(count, widest))

    def no_domain_reason(self, count: int, widest: TopologyLevel) -> str:
        """Why a gang of `count` whole nodes finds no domain up to `widest`."""
        nodes = WHOLE_NODES[count != 1].format(count=count, model=self.gpu_model)
        most = self.best_whole(DEPTH[widest])
        if widest == TopologyLevel.ANY:
            return NO_ROOM_ANYWHERE.format(nodes=nodes, most=most)
        return NO_ROOM_IN_ONE.format(nodes=nodes, domain=DOMAIN_NAME[widest], most=most)

    def _pick_whole(self, domain: Domain, count: int) -> list[Node]:
        """`count` whole free nodes of the domain, spanning as few children as possible.

        Children with the most free whole nodes go first (ties by name), and nodes within a
        leaf by name, so a gang's nodes come out grouped by leaf.
        """
        if len(domain) == 3:  # a leaf's nodes are in name order: the first whole ones
            return list(islice(filter(self.is_whole, self._domain_nodes[domain]), count))
        picked: list[Node] = []
        for child in sorted(self._children[domain], key=lambda c: (-self._whole[c], c)):
            wanted = min(count - len(picked), self._whole[child])
            if wanted > 0:
                picked += self._pick_whole(child, wanted)
            if len(picked) == count:
                break
        return picked
