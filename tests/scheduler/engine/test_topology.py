"""Topology: the tightest domain that fits, best fit among equals, data centers kept apart."""

from __future__ import annotations

import pytest

from scheduler.engine import Node, TopologyLevel, Workload, plan
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
    outcome,
)

nlp = make_queue("nlp", h800=10_000)
TWO_LEAVES = make_cluster(leaves=2, nodes=4)  # dc1-p1-l{1,2}-n{1..4}
TWO_PODS = make_cluster(pods=2, leaves=2, nodes=2)  # dc1-p{1,2}-l{1,2}-n{1,2}
TWO_DCS = make_cluster(datacenters=2, nodes=4)  # dc{1,2}-p1-l1-n{1..4}


def job(workload_id: int, gpus: int, **kwargs: object) -> Workload:
    return make_workload(workload_id, nlp, gpus, **kwargs)


def busy(nodes: tuple[Node, ...], *names: str) -> Workload:
    """A running workload holding the named nodes whole."""
    return make_running(900, nlp, *(on(node) for node in nodes if node.name in names))


def names(template: str, *numbers: int) -> str:
    return " ".join(template.format(n) for n in numbers)


CASES = [
    pytest.param(
        TWO_LEAVES,
        [job(1, 32)],
        {1: names("dc1-p1-l1-n{}", 1, 2, 3, 4)},
        id="a gang that fits in one leaf stays in one leaf",
    ),
    pytest.param(
        TWO_LEAVES,
        [busy(TWO_LEAVES, "dc1-p1-l2-n4"), job(1, 16)],
        {1: names("dc1-p1-l2-n{}", 1, 2)},
        id="the leaf with the fewest free whole nodes that fits is chosen",
    ),
    pytest.param(
        TWO_LEAVES,
        [busy(TWO_LEAVES, "dc1-p1-l2-n4", "dc1-p1-l2-n3", "dc1-p1-l2-n2"), job(1, 16)],
        {1: names("dc1-p1-l1-n{}", 1, 2)},
        id="a leaf too small for the gang is passed over",
    ),
    pytest.param(
        TWO_LEAVES,
        [job(1, 40)],
        {1: names("dc1-p1-l1-n{}", 1, 2, 3, 4) + " dc1-p1-l2-n1"},
        id="a gang too big for a leaf spans leaves of one pod",
    ),
    pytest.param(
        TWO_LEAVES,
        [busy(TWO_LEAVES, "dc1-p1-l1-n1"), job(1, 40)],
        {1: names("dc1-p1-l2-n{}", 1, 2, 3, 4) + " dc1-p1-l1-n2"},
        id="spanning leaves, the leaf with the most free nodes goes first",
    ),
    pytest.param(
        TWO_PODS,
        [job(1, 48)],
        {
            1: names("dc1-p1-l1-n{}", 1, 2)
            + " "
            + names("dc1-p1-l2-n{}", 1, 2)
            + " dc1-p2-l1-n1 dc1-p2-l1-n2"
        },
        id="a gang too big for a pod spans pods of one data center",
    ),
    pytest.param(
        TWO_DCS,
        [job(1, 48)],
        {1: "needs 6 whole H800 nodes in one data center; the best data center has 4 free"},
        id="a gang never spans data centers by default",
    ),
    pytest.param(
        TWO_DCS,
        [job(1, 48, topology=TopologyLevel.ANY)],
        {1: names("dc1-p1-l1-n{}", 1, 2, 3, 4) + " dc2-p1-l1-n1 dc2-p1-l1-n2"},
        id="a gang that allows ANY may span data centers",
    ),
    pytest.param(
        TWO_DCS,
        [job(1, 32, topology=TopologyLevel.ANY)],
        {1: names("dc1-p1-l1-n{}", 1, 2, 3, 4)},
        id="a gang that allows ANY still prefers one leaf",
    ),
    pytest.param(
        TWO_DCS,
        [job(1, 72, topology=TopologyLevel.ANY)],
        {1: "needs 9 whole H800 nodes; the cluster has 8 free"},
        id="ANY still needs enough whole nodes in the cluster",
    ),
    pytest.param(
        TWO_LEAVES,
        [job(1, 40, topology=TopologyLevel.LEAF, required=True)],
        {1: "needs 5 whole H800 nodes in one leaf; the best leaf has 4 free"},
        id="a required leaf makes the gang wait rather than span leaves",
    ),
    pytest.param(
        TWO_PODS,
        [job(1, 32, topology=TopologyLevel.POD, required=True)],
        {1: names("dc1-p1-l1-n{}", 1, 2) + " " + names("dc1-p1-l2-n{}", 1, 2)},
        id="a required pod may span the leaves of one pod",
    ),
    pytest.param(
        TWO_PODS,
        [job(1, 40, topology=TopologyLevel.POD, required=True)],
        {1: "needs 5 whole H800 nodes in one pod; the best pod has 4 free"},
        id="a required pod makes the gang wait rather than span pods",
    ),
    pytest.param(
        TWO_PODS,
        [job(1, 40, topology=TopologyLevel.LEAF)],
        {1: names("dc1-p1-l1-n{}", 1, 2) + " " + names("dc1-p1-l2-n{}", 1, 2) + " dc1-p2-l1-n1"},
        id="a preferred leaf is only a preference",
    ),
    pytest.param(
        TWO_LEAVES,
        [job(1, 16, topology=TopologyLevel.NODE, required=True)],
        {1: "needs 16 GPUs on one node, but H800 nodes have 8"},
        id="a gang required on one node cannot have two nodes",
    ),
    pytest.param(
        TWO_LEAVES,
        [job(1, 8, topology=TopologyLevel.NODE, required=True)],
        {1: "dc1-p1-l1-n1"},
        id="a one-node job satisfies a required node level",
    ),
    pytest.param(
        TWO_LEAVES,
        [busy(TWO_LEAVES, "dc1-p1-l2-n4"), job(1, 2)],
        {1: "dc1-p1-l2-n1[0,1]"},
        id="a small job breaks a node of the leaf with the fewest whole nodes",
    ),
    pytest.param(
        TWO_LEAVES,
        [job(1, 16), job(2, 16), job(3, 16)],
        {
            1: names("dc1-p1-l1-n{}", 1, 2),
            2: names("dc1-p1-l1-n{}", 3, 4),
            3: names("dc1-p1-l2-n{}", 1, 2),
        },
        id="gangs fill one leaf before starting the next",
    ),
]


@pytest.mark.parametrize(("nodes", "workloads", "expected"), CASES)
def test_topology(
    nodes: tuple[Node, ...], workloads: list[Workload], expected: dict[int, str]
) -> None:
    snapshot = make_snapshot(nodes, [nlp], workloads)
    assert outcome(plan(snapshot, now=0.0), snapshot) == expected
