"""A node index kept from cycle to cycle (`NodeIndex`) changes nothing in the plans: a chain
of cycles over one fleet, as the simulator runs them (each snapshot keeps the node objects that
did not change), planned with one index and without any, gives the same plans."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.engine import Node, NodeIndex, Snapshot, Workload, plan
from scheduler.engine.capacity import Pool, pools_of
from scheduler.engine.errors import Inadmissible
from scheduler.engine.testing import apply_plan, make_cluster
from tests.scheduler.engine.test_plan_digests import NOW, snapshot

STEP_S = 600.0


def carried(before: Snapshot, after: Snapshot) -> Snapshot:
    """`after` with the node objects of `before` wherever a node did not change."""
    nodes = tuple(
        old if old == new else new for old, new in zip(before.nodes, after.nodes, strict=True)
    )
    return replace(after, nodes=nodes)


def disturb(snapshot: Snapshot, rng: random.Random) -> Snapshot:
    """What happens between cycles besides the plan: a job ends, a node is cordoned or back."""
    workloads = list(snapshot.workloads)
    nodes = list(snapshot.nodes)
    running = [i for i, w in enumerate(workloads) if w.placements]
    if running and rng.random() < 0.7:
        ended = workloads.pop(rng.choice(running))
        for placement in ended.placements:
            i = next(i for i, n in enumerate(nodes) if n.id == placement.node_id)
            free = tuple(sorted({*nodes[i].free, *placement.gpu_indices}))
            nodes[i] = replace(nodes[i], free=free)
    if rng.random() < 0.2:
        i = rng.randrange(len(nodes))
        nodes[i] = replace(nodes[i], schedulable=not nodes[i].schedulable)
    return replace(snapshot, nodes=tuple(nodes), workloads=tuple(workloads))


@pytest.mark.parametrize("seed", range(12))
def test_a_chain_of_cycles_plans_the_same_with_the_index_and_without(seed: int) -> None:
    rng = random.Random(seed)
    index = NodeIndex()
    current = snapshot(seed)
    refreshed = 0
    for step in range(6):
        now = NOW + step * STEP_S
        before = index._pools
        indexed = plan(current, now, index=index)
        refreshed += index._pools is before
        assert indexed == plan(current, now), f"step {step}"
        current = disturb(carried(current, apply_plan(current, indexed, now)), rng)
    assert refreshed  # the index took changes in, not only indexed afresh


def fleet() -> tuple[Node, ...]:
    """Two GPU models and node sizes, one of them in two pods of two leaves."""
    return make_cluster("H800", pods=2, leaves=2, nodes=5) + make_cluster(
        "H20", nodes=6, gpus=4, first_id=100, prefix="h20-"
    )


def counts(pool: Pool) -> tuple:
    """What a cycle reads of a pool: free GPUs per node and domain, whole nodes, where a job of
    each size would go."""
    domains = [d for depth in range(4) for d in pool.domains_at(depth)]
    found = []
    for gpus in range(1, 2 * pool.node_size + 1):
        workload = Workload(0, 0, pool.gpu_model, gpus, 0.0)
        try:
            found.append(pool.find(workload))
        except Inadmissible as why:
            found.append(str(why))
    return (
        {n: pool.free(n) for n in pool.node_ids()},
        [(pool.free_gpus(d), pool.whole(d)) for d in domains],
        [pool.best_whole(depth) for depth in range(4)],
        pool.most_free(),
        found,
    )


@pytest.mark.parametrize("seed", range(4))
def test_after_many_changes_the_index_reads_as_a_fresh_one(seed: int) -> None:
    """Nodes' free GPUs change one or two at a time, long enough for the heaps of partly free
    nodes to be rebuilt several times over."""
    rng = random.Random(seed)
    nodes = list(fleet())
    index = NodeIndex()
    index.pools(tuple(nodes))
    for _ in range(200):
        for i in rng.sample(range(len(nodes)), rng.randint(1, 2)):
            free = sorted(rng.sample(range(nodes[i].gpus), rng.randint(0, nodes[i].gpus)))
            nodes[i] = replace(nodes[i], free=tuple(free))
        indexed, fresh = index.pools(tuple(nodes)), pools_of(nodes)
        assert indexed.keys() == fresh.keys()
        assert all(counts(indexed[key]) == counts(fresh[key]) for key in fresh)
        heaps = sum(len(h) for pool in index._pools.values() for h in pool._partial.values())
        assert heaps <= 2 * len(nodes) + 2  # stale entries do not pile up


def test_a_copy_owns_all_a_cycle_changes() -> None:
    """What a cycle writes (free GPUs and their counts, heaps, holds) is the copy's own; what
    no cycle changes (where the nodes are) is shared."""
    [pool] = pools_of(make_cluster(leaves=2)).values()
    copied = pool.copy()
    shared = {
        name
        for name, value in vars(pool).items()
        if value is vars(copied)[name] and not isinstance(value, int | str)
    }
    static = {
        "_nodes",
        "_domains",
        "_children",
        "_domain_nodes",
        "_sizes",
        "_leaves_of",
        "_largest",
        "_domains_at",
        "_single",
    }
    assert shared == static
    assert copied._wholes.count is not pool._wholes.count
    assert not any(
        a is b for a, b in zip(copied._wholes._buckets, pool._wholes._buckets, strict=True)
    )


def test_a_changed_node_is_taken_in_and_a_cordoned_one_indexes_the_fleet_again() -> None:
    index = NodeIndex()
    first = snapshot(3)
    pools = index.pools(first.nodes)
    kept = index._pools
    node = next(n for n in first.nodes if n.schedulable and n.free)
    emptied = replace(node, free=())
    nodes = tuple(emptied if n is node else n for n in first.nodes)
    again = index.pools(nodes)
    assert index._pools is kept  # taken in, not indexed afresh
    key = (node.region, node.gpu_model)
    assert again[key].free(node.id) == frozenset()
    assert pools[key].free(node.id) == frozenset(node.free)  # an earlier cycle's copy stays
    cordoned = tuple(replace(n, schedulable=False) if n is emptied else n for n in nodes)
    assert node.id not in index.pools(cordoned)[key].node_ids()
    assert index._pools is not kept


def test_a_cycle_changes_only_its_own_copy_of_the_index() -> None:
    index = NodeIndex()
    cluster = snapshot(5)
    first = plan(cluster, NOW, index=index)
    assert first.admissions  # the cycle took GPUs
    assert plan(cluster, NOW, index=index) == first == plan(cluster, NOW)
