"""Spread groups: the replicas of one service are placed apart where free room allows (another
node, then another leaf), and still start where only their group's nodes have room; replicas of
a share of a GPU too."""

from __future__ import annotations

import pytest

from scheduler.engine import plan
from scheduler.engine.testing import make_cluster, make_queue, make_running, make_snapshot, on
from scheduler.engine.testing import make_workload as workload

NOW = 10_000.0
NODES = make_cluster(leaves=2, nodes=2)  # dc1-p1-l1-n1, n2 (ids 1, 2), dc1-p1-l2-n1, n2 (3, 4)
infer = make_queue("infer", h800=1000)


def placed(snapshot) -> dict[int, tuple[int, ...]]:
    return {
        a.workload_id: tuple(p.node_id for p in a.placements)
        for a in plan(snapshot, NOW).admissions
    }


@pytest.mark.parametrize(
    "running, pending, expected",
    [
        pytest.param(
            [],
            [workload(1, infer, 4, spread="chat"), workload(2, infer, 4, spread="chat")],
            {1: (1,), 2: (3,)},
            id="two small replicas admitted together go to nodes of different leaves",
        ),
        pytest.param(
            [],
            [workload(1, infer, 4), workload(2, infer, 4)],
            {1: (1,), 2: (1,)},
            id="without a group small jobs share a node, as ever",
        ),
        pytest.param(
            [make_running(9, infer, on(NODES[0]), spread="chat")],
            [workload(1, infer, 8, spread="chat")],
            {1: (3,)},
            id="a replica goes to a leaf none of its service is on",
        ),
        pytest.param(
            [
                make_running(9, infer, on(NODES[0]), spread="chat"),
                make_running(8, infer, on(NODES[2]), spread="chat"),
            ],
            [workload(1, infer, 8, spread="chat")],
            {1: (2,)},
            id="every leaf taken: another node of one",
        ),
        pytest.param(
            [
                make_running(9, infer, on(NODES[0], 0, 1, 2, 3), spread="chat"),
                *(make_running(10 + i, infer, on(n)) for i, n in enumerate(NODES[1:])),
            ],
            [workload(1, infer, 4, spread="chat")],
            {1: (1,)},
            id="only its own replica's node has room: it still starts there",
        ),
        pytest.param(
            [make_running(9, infer, on(NODES[0]), spread="other")],
            [workload(1, infer, 8, spread="chat")],
            {1: (2,)},
            id="another group's nodes are no reason to move",
        ),
    ],
)
def test_spread(running, pending, expected):
    assert placed(make_snapshot(NODES, [infer], [*running, *pending])) == expected


def share(workload_id: int, spread: str = "chat"):
    return workload(workload_id, infer, 1, slices=2, spread=spread)


@pytest.mark.parametrize(
    "running, pending, expected",
    [
        pytest.param(
            [],
            [share(1), share(2)],
            {1: (1,), 2: (3,)},
            id="two quarter-GPU replicas go to nodes of different leaves",
        ),
        pytest.param(
            [],
            [share(1, ""), share(2, "")],
            {1: (1,), 2: (1,)},
            id="without a group two quarters share a GPU, as ever",
        ),
        pytest.param(
            [make_running(9, infer, on(NODES[0], 0), slices=2, spread="chat")],
            [share(1), share(2, "other")],
            {1: (3,), 2: (1,)},
            id="a replica leaves its service's GPU to others' shares",
        ),
        pytest.param(
            [
                make_running(9, infer, on(NODES[0], 0), slices=2, spread="chat"),
                make_running(8, infer, on(NODES[2], 0), slices=6),
            ],
            [share(1)],
            {1: (3,)},
            id="a partly used GPU away from its service before a free one",
        ),
        pytest.param(
            [
                make_running(9, infer, on(NODES[0], 0), slices=2, spread="chat"),
                *(make_running(10 + i, infer, on(n)) for i, n in enumerate(NODES[1:])),
            ],
            [share(1)],
            {1: (1,)},
            id="only its own replica's node has room: it still starts there",
        ),
    ],
)
def test_spread_shares(running, pending, expected):
    assert placed(make_snapshot(NODES, [infer], [*running, *pending])) == expected
