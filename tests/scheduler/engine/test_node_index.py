"""A node index kept from cycle to cycle (`NodeIndex`) changes nothing in the plans: a chain
of cycles over one fleet, as the simulator runs them (each snapshot keeps the node objects that
did not change), planned with one index and without any, gives the same plans."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.engine import NodeIndex, Snapshot, plan
from scheduler.engine.testing import apply_plan
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
    for step in range(6):
        now = NOW + step * STEP_S
        indexed = plan(current, now, index=index)
        assert indexed == plan(current, now), f"step {step}"
        current = disturb(carried(current, apply_plan(current, indexed, now)), rng)


def test_a_changed_node_is_taken_in_and_a_cordoned_one_indexes_the_fleet_again() -> None:
    index = NodeIndex()
    first = snapshot(3)
    pools = index.pools(first.nodes)
    kept = index._pools
    node = next(n for n in first.nodes if n.schedulable and n.free)
    freed = replace(node, free=())
    nodes = tuple(freed if n is node else n for n in first.nodes)
    again = index.pools(nodes)
    assert index._pools is kept  # taken in, not indexed afresh
    key = (node.region, node.gpu_model)
    assert again[key].free(node.id) == frozenset()
    assert pools[key].free(node.id) == frozenset(node.free)  # an earlier cycle's copy stays
    cordoned = tuple(replace(n, schedulable=False) if n is freed else n for n in nodes)
    assert node.id not in index.pools(cordoned)[key].node_ids()
    assert index._pools is not kept


def test_a_cycle_changes_only_its_own_copy_of_the_index() -> None:
    index = NodeIndex()
    cluster = snapshot(5)
    first = plan(cluster, NOW, index=index)
    assert first.admissions  # the cycle took GPUs
    assert plan(cluster, NOW, index=index) == first == plan(cluster, NOW)
