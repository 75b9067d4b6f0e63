"""Free GPUs during one cycle, kept per GPU model with counters per topology domain.

A domain is a path: `()` is the whole cluster, then `(datacenter,)`, `(datacenter, pod)` and
`(datacenter, pod, leaf)`. Each keeps its count of free whole nodes and free GPUs, built once per
cycle and updated as GPUs are taken, so placing a gang costs O(domains), not O(nodes).

Placement rules:
- jobs of at least a node's GPUs take whole free nodes, in the tightest domain that holds them
  all: the leaf, pod or data center with the fewest free whole nodes that still fits (best fit,
  ties by name), so larger empty domains stay free for larger gangs;
- smaller jobs go to the node with the fewest free GPUs that still fits (best fit, ties by name),
  on its lowest free indices; only when no partly used node fits do they break a whole node,
  taken from the leaf with the fewest free whole nodes.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import pairwise

from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import Node, Placement, TopologyLevel, Workload

Domain = tuple[str, ...]

# Path length of a domain at each level a gang may span.
DEPTH = {
    TopologyLevel.LEAF: 3,
    TopologyLevel.POD: 2,
    TopologyLevel.DATACENTER: 1,
    TopologyLevel.ANY: 0,
}
DOMAIN_NAME = {
    TopologyLevel.LEAF: "leaf",
    TopologyLevel.POD: "pod",
    TopologyLevel.DATACENTER: "data center",
}


def domains_of(node: Node) -> tuple[Domain, ...]:
    """Every domain holding the node, widest first: cluster, data center, pod, leaf."""
    path = (node.datacenter, node.pod, node.leaf)
    return tuple(path[:depth] for depth in range(4))


def widest_level(workload: Workload) -> TopologyLevel:
    """The widest domain the workload's GPUs may span.

    A required level is a limit. Otherwise the level is only a preference (placement always
    tries the tightest domain first) and the limit is one data center, or the whole cluster when
    the workload asked for ANY.
    """
    if workload.topology_required or workload.topology == TopologyLevel.ANY:
        return workload.topology
    return TopologyLevel.DATACENTER


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class Capacity:
    """Free GPUs of every GPU model in a snapshot, one pool per region and model: a queue's
    work runs only in its own region."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        by_model: dict[tuple[str, str], list[Node]] = defaultdict(list)
        for node in nodes:
            by_model[node.region, node.gpu_model].append(node)
        self._pools = {key: Pool(key[1], members) for key, members in by_model.items()}
        self._pool_of_node = {
            node.id: pool for pool in self._pools.values() for node in pool.nodes()
        }

    def pool(self, region: str, gpu_model: str) -> Pool:
        """The nodes of `gpu_model` in `region`, or Inadmissible when there are none."""
        try:
            return self._pools[region, gpu_model]
        except KeyError:
            where = f"region {region}" if region else "the cluster"
            raise Inadmissible(f"{where} has no {gpu_model} nodes") from None

    def take(self, placements: Iterable[Placement]) -> None:
        """Mark these GPUs used; GPUs of unknown or unschedulable nodes are ignored."""
        for placement in placements:
            pool = self._pool_of_node.get(placement.node_id)
            if pool is not None:
                pool.take(placement)


class Pool:
    """The nodes of one GPU model: free GPUs per node, free whole nodes and GPUs per domain."""

    def __init__(self, gpu_model: str, nodes: list[Node]) -> None:
        self.gpu_model = gpu_model
        # Unschedulable nodes still tell the node size, so a badly shaped job hears why.
        self.node_size = max(node.gpus for node in nodes)
        self._free: dict[int, set[int]] = {}
        self._nodes: dict[int, Node] = {}
        self._whole: Counter[Domain] = Counter()
        self._free_gpus: Counter[Domain] = Counter()
        self._children: dict[Domain, set[Domain]] = defaultdict(set)
        self._leaf_nodes: dict[Domain, list[Node]] = defaultdict(list)
        # Partly free nodes by free-GPU count, each a heap of (name, id); entries go stale when
        # a node loses GPUs and are dropped when seen, since counts only fall within a cycle.
        self._partial: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for node in sorted(nodes, key=lambda node: (node.name, node.id)):
            if node.schedulable:
                self._add(node)
        self._domains_at = {
            depth: sorted(d for d in self._whole if len(d) == depth) for depth in range(4)
        }

    def nodes(self) -> Iterable[Node]:
        """The schedulable nodes of this pool."""
        return self._nodes.values()

    def check_shape(self, gpus: int) -> None:
        """Raise Inadmissible when no placement could ever give exactly `gpus` GPUs."""
        size = self.node_size
        if gpus < 1:
            raise Inadmissible(f"asks for {gpus} GPUs; a workload needs at least one")
        if gpus >= size and gpus % size:
            raise Inadmissible(
                f"needs {gpus} GPUs; jobs of {size} GPUs or more must use "
                f"whole nodes of {size} GPUs"
            )

    def find(self, workload: Workload) -> tuple[Placement, ...]:
        """GPUs for the workload, all or nothing, or Inadmissible with the reason.

        Takes nothing: the cycle calls `take` once it has decided to admit.
        """
        self.check_shape(workload.gpus)
        if workload.gpus < self.node_size:
            node = self._best_partial(workload.gpus) or self._break_whole_node(workload.gpus)
            return (Placement(node.id, tuple(sorted(self._free[node.id])[: workload.gpus])),)
        count = workload.gpus // self.node_size
        nodes = self._pick_whole(self._tightest_domain(count, widest_level(workload)), count)
        return tuple(Placement(node.id, tuple(sorted(self._free[node.id]))) for node in nodes)

    def take(self, placement: Placement) -> None:
        """Mark the placement's GPUs used and update the counters of every domain above."""
        node = self._nodes.get(placement.node_id)
        if node is None:
            return
        free = self._free[node.id]
        taken = free.intersection(placement.gpu_indices)
        breaks_whole = bool(taken) and self._is_whole(node)
        free.difference_update(taken)
        for domain in domains_of(node):
            self._free_gpus[domain] -= len(taken)
            self._whole[domain] -= breaks_whole
        if taken and free:
            heapq.heappush(self._partial[len(free)], (node.name, node.id))

    def _add(self, node: Node) -> None:
        self._nodes[node.id] = node
        self._free[node.id] = set(node.free)
        whole = self._is_whole(node)
        for domain in domains_of(node):
            self._whole[domain] += whole
            self._free_gpus[domain] += len(self._free[node.id])
        for parent, child in pairwise(domains_of(node)):
            self._children[parent].add(child)
        self._leaf_nodes[domains_of(node)[-1]].append(node)
        if self._free[node.id] and not whole:
            heapq.heappush(self._partial[len(self._free[node.id])], (node.name, node.id))

    def _is_whole(self, node: Node) -> bool:
        return node.gpus == self.node_size and len(self._free[node.id]) == node.gpus

    def _best_partial(self, gpus: int) -> Node | None:
        """The partly free node with the fewest free GPUs that still has `gpus`."""
        for count in range(gpus, self.node_size):
            heap = self._partial[count]
            while heap and len(self._free[heap[0][1]]) != count:
                heapq.heappop(heap)
            if heap:
                return self._nodes[heap[0][1]]
        return None

    def _break_whole_node(self, gpus: int) -> Node:
        """A whole free node for a small job, from the leaf with the fewest whole nodes."""
        if self._whole[()] == 0:
            raise Inadmissible(
                f"no schedulable {self.gpu_model} node has {gpus} free GPUs (the most on one "
                f"node is {self._most_free_on_a_node()}; {self._free_gpus[()]} free in all)"
            )
        return self._pick_whole(self._tightest_domain(1, TopologyLevel.LEAF), 1)[0]

    def _most_free_on_a_node(self) -> int:
        for count in range(self.node_size - 1, 0, -1):
            if self._best_partial(count) is not None:
                return count
        return 0

    def _tightest_domain(self, count: int, widest: TopologyLevel) -> Domain:
        """The tightest domain, up to `widest`, with the fewest free whole nodes >= `count`."""
        if widest == TopologyLevel.NODE:
            if count > 1:
                raise Inadmissible(
                    f"needs {count * self.node_size} GPUs on one node, but "
                    f"{self.gpu_model} nodes have {self.node_size}"
                )
            widest = TopologyLevel.LEAF  # a single node always sits within one leaf
        for level, depth in DEPTH.items():
            if level > widest:
                break
            fits = [(self._whole[d], d) for d in self._domains_at[depth] if self._whole[d] >= count]
            if fits:
                return min(fits)[1]
        raise Inadmissible(self._no_domain_reason(count, widest))

    def _no_domain_reason(self, count: int, widest: TopologyLevel) -> str:
        nodes = _plural(count, f"whole {self.gpu_model} node")
        most = max((self._whole[d] for d in self._domains_at[DEPTH[widest]]), default=0)
        if widest == TopologyLevel.ANY:
            return f"needs {nodes}; the cluster has {most} free"
        name = DOMAIN_NAME[widest]
        return f"needs {nodes} in one {name}; the best {name} has {most} free"

    def _pick_whole(self, domain: Domain, count: int) -> list[Node]:
        """`count` whole free nodes of the domain, spanning as few children as possible.

        Children with the most free whole nodes go first (ties by name), and nodes within a
        leaf by name, so a gang's nodes come out grouped by leaf.
        """
        if len(domain) == 3:
            return [node for node in self._leaf_nodes[domain] if self._is_whole(node)][:count]
        picked: list[Node] = []
        for child in sorted(self._children[domain], key=lambda c: (-self._whole[c], c)):
            wanted = min(count - len(picked), self._whole[child])
            if wanted > 0:
                picked += self._pick_whole(child, wanted)
        return picked
