"""The cluster's topology as the engine sees it: domains (a path: `()` the whole cluster, then
`(datacenter,)`, `(datacenter, pod)` and `(datacenter, pod, leaf)`), the levels a gang may span,
domains in words, and free whole nodes counted per domain (`WholeCounts`)."""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from functools import cache

from scheduler.engine.model import Node, TopologyLevel, Workload
from scheduler.words import phrase

Domain = tuple[str, ...]

# Path length of a domain at each level a gang may span.
DEPTH = {
    TopologyLevel.LEAF: 3,
    TopologyLevel.POD: 2,
    TopologyLevel.DATACENTER: 1,
    TopologyLevel.ANY: 0,
}
DOMAIN_NAME = {
    TopologyLevel.LEAF: phrase("leaf"),
    TopologyLevel.POD: phrase("pod"),
    TopologyLevel.DATACENTER: phrase("data center"),
    TopologyLevel.ANY: phrase("cluster"),
}
# A domain in words: "pod dc1/p2".
DOMAIN = {
    TopologyLevel.LEAF: phrase("leaf {name}"),
    TopologyLevel.POD: phrase("pod {name}"),
    TopologyLevel.DATACENTER: phrase("data center {name}"),
}
THE_CLUSTER = phrase("the cluster")


def domains_of(node: Node) -> tuple[Domain, ...]:
    """Every domain holding the node, widest first: cluster, data center, pod, leaf."""
    return (
        (),
        (node.datacenter,),
        (node.datacenter, node.pod),
        (node.datacenter, node.pod, node.leaf),
    )


def widest_level(workload: Workload) -> TopologyLevel:
    """The widest domain the workload's GPUs may span.

    A required level is a limit. Otherwise the level is only a preference (placement always
    tries the tightest domain first) and the limit is one data center, or the whole cluster when
    the workload asked for ANY.
    """
    if workload.topology_required or workload.topology == TopologyLevel.ANY:
        return workload.topology
    return TopologyLevel.DATACENTER


def levels_up_to(widest: TopologyLevel) -> list[TopologyLevel]:
    """The levels a multi-node gang may use, tightest first."""
    return [level for level in DEPTH if level <= max(widest, TopologyLevel.LEAF)]


@cache  # a fleet has few domains, each worded in every claim and reservation made there
def describe(level: TopologyLevel, domain: Domain) -> str:
    """A domain in words, e.g. "pod dc1/p2"; names that already hold their path stay as is."""
    if not domain:
        return THE_CLUSTER
    return DOMAIN[level].format(name=domain[-1] if "/" in domain[-1] else "/".join(domain))


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class WholeCounts:
    """Free whole nodes per domain, also kept in buckets by count at each depth, so that the
    best domain and the tightest one that fits are found without scanning every domain."""

    def __init__(self, counts: Counter[Domain]) -> None:
        self.count = counts
        self._buckets: list[dict[int, set[Domain]]] = [defaultdict(set) for _ in range(4)]
        for domain, count in counts.items():
            if count:
                self._buckets[len(domain)][count].add(domain)
        self._best = [max(buckets, default=0) for buckets in self._buckets]

    def copy(self) -> WholeCounts:
        """A copy whose counts and buckets are its own."""
        counts = copy.copy(self)
        counts.count = self.count.copy()
        counts._buckets = [
            defaultdict(set, {whole: set(domains) for whole, domains in buckets.items()})
            for buckets in self._buckets
        ]
        counts._best = list(self._best)
        return counts

    def change(self, domain: Domain, by: int) -> None:
        old = self.count[domain]
        new = self.count[domain] = old + by
        depth = len(domain)
        buckets = self._buckets[depth]
        if old:
            buckets[old].discard(domain)
            if not buckets[old]:
                del buckets[old]
        if new:
            buckets[new].add(domain)
        if new > self._best[depth]:
            self._best[depth] = new
        elif old == self._best[depth] and old not in buckets:
            self._best[depth] = new  # values move by one, so no domain is left above it

    def best(self, depth: int) -> int:
        """The most free whole nodes any one domain at `depth` has."""
        return self._best[depth]

    def tightest(self, depth: int, count: int) -> Domain | None:
        """The domain at `depth` with the fewest free whole nodes >= `count` (ties by name)."""
        buckets = self._buckets[depth]
        for whole in range(max(count, 1), self._best[depth] + 1):
            if whole in buckets:
                return min(buckets[whole])
        return None
