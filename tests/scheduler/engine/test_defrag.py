"""Defragmentation: in a pod the operator made due, small running jobs that save and may move
go to other nodes of the pod so that a gang waiting with enough free GPUs, scattered over
partly used nodes, finds whole ones; within the pod's moves, fewest used GPUs first, onto the
fullest node that holds them, never by preempting and never a job marked not to move."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine import plan
from scheduler.engine.defrag import MOVES_PER_CYCLE
from scheduler.engine.testing import (
    apply_plan,
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    on,
    outcome,
)
from scheduler.engine.testing import make_workload as workload
from tests.scheduler.engine.test_plan_properties import PROPERTY

NOW = 10_000.0
N1, N2, N3 = make_cluster(nodes=3)  # dc1-p1-l1-n1 ... n3, pod "p1"
OTHER_POD = make_cluster(nodes=2, first_id=4, prefix="x-")  # pod "p1" of another name
team = make_queue("team", h800=64)
small = make_queue("small", h800=8)
big = make_queue("big", h800=10_000)


def running(workload_id, *placements, queue=team, **extra):
    return make_running(workload_id, queue, *placements, started_at=0.0, **extra)


def gang(workload_id=9, gpus=8, queue=team):
    return workload(workload_id, queue, gpus, submitted_at=5_000.0)


def moves_of(workloads, defrag=(("p1", 4),), nodes=(N1, N2, N3)):
    snapshot = replace(make_snapshot(nodes, [team, small, big], workloads), defrag=defrag)
    result = plan(snapshot, NOW)
    names = {node.id: node.name for node in nodes}
    return {
        m.workload_id: " ".join(f"{names[p.node_id]}{list(p.gpu_indices)}" for p in m.placements)
        for m in result.moves
    }, result


# Three nodes: n3 full with a big job, n1 and n2 half used: 8 GPUs free, no node whole.
HALF_1 = running(1, on(N1, 0, 1, 2, 3))
HALF_2 = running(2, on(N2, 0, 1, 2, 3))
FULL_3 = running(3, on(N3))


@pytest.mark.parametrize(
    "workloads, defrag, moved",
    [
        pytest.param(
            [HALF_1, HALF_2, FULL_3, gang()],
            (("p1", 4),),
            {1: "dc1-p1-l1-n2[4, 5, 6, 7]"},
            id="two half-used nodes: the first by name moves onto the other, one node frees",
        ),
        pytest.param(
            [HALF_1, HALF_2, FULL_3, gang()],
            (),
            {},
            id="the pod is not due: nothing moves",
        ),
        pytest.param(
            [HALF_1, HALF_2, FULL_3, gang()],
            (("p1", 0),),
            {},
            id="its moves are spent: nothing moves",
        ),
        pytest.param(
            [replace(HALF_1, movable=False), HALF_2, FULL_3, gang()],
            (("p1", 4),),
            {2: "dc1-p1-l1-n1[4, 5, 6, 7]"},
            id="a job marked not to move stays; the other one moves onto its node",
        ),
        pytest.param(
            [replace(HALF_1, movable=False), replace(HALF_2, movable=False), FULL_3, gang()],
            (("p1", 4),),
            {},
            id="both marked not to move: nothing moves",
        ),
        pytest.param(
            [running(1, on(N1, 0), mig="1g.10gb", mig_charge=1 / 7), HALF_2, FULL_3, gang()],
            (("p1", 4),),
            {2: "dc1-p1-l1-n1[1, 2, 3, 4]"},
            id="a MIG job is not moved (a whole GPU for its instance): the node beside it is",
        ),
        pytest.param(
            [replace(HALF_1, saves=False), replace(HALF_2, saves=False), FULL_3, gang()],
            (("p1", 4),),
            {},
            id="jobs that never save are not moved (they would lose their work)",
        ),
        pytest.param(
            [replace(HALF_1, started_at=NOW - 60), HALF_2, FULL_3, gang()],
            (("p1", 4),),
            {2: "dc1-p1-l1-n1[4, 5, 6, 7]"},
            id="a job that started a minute ago is not moved yet; the older one is",
        ),
        pytest.param(
            [running(1, on(N1, 0, 1, 2, 3, 4, 5)), running(2, on(N2, 0, 1)), FULL_3, gang()],
            (("p1", 4),),
            {2: "dc1-p1-l1-n1[6, 7]"},
            id="the node with the fewest GPUs used is emptied (2 GPUs move, not 6)",
        ),
        pytest.param(
            [running(1, on(N1, 0, 1)), running(4, on(N1, 2, 3)), HALF_2, FULL_3, gang()],
            (("p1", 1),),
            {2: "dc1-p1-l1-n1[4, 5, 6, 7]"},
            id="one move left: the node whose emptying takes two is passed over",
        ),
        pytest.param(
            [running(1, on(N1, 0, 1)), running(4, on(N1, 2, 3)), HALF_2, FULL_3, gang()],
            (("p1", 2),),
            {1: "dc1-p1-l1-n2[4, 5]", 4: "dc1-p1-l1-n2[6, 7]"},
            id="two moves: the first node by name is emptied, its two jobs onto the other",
        ),
        pytest.param(
            [HALF_1, HALF_2, FULL_3, gang(gpus=16)],
            (("p1", 4),),
            {},
            id="a gang of two nodes with one node's GPUs free: moving cannot help",
        ),
        pytest.param(
            [HALF_1, HALF_2, FULL_3, gang(queue=small, gpus=16)],
            (("p1", 4),),
            {},
            id="a gang its quota does not allow is not moved for",
        ),
        pytest.param(
            [running(1, on(N1, 0, 1, 2, 3), queue=small), HALF_2, FULL_3, gang(queue=small)],
            (("p1", 4),),
            {},
            id="a gang over its queue's quota: nothing moves",
        ),
        pytest.param(
            [HALF_1, HALF_2, FULL_3, workload(9, team, 4)],
            (("p1", 4),),
            {},
            id="no gang waits (a small job starts on free GPUs): nothing moves",
        ),
    ],
)
def test_defragmentation(workloads, defrag, moved):
    found, result = moves_of(workloads, defrag)
    assert found == moved
    assert not result.preemptions


def test_the_gang_starts_at_the_next_cycle_on_the_node_freed():
    snapshot = replace(
        make_snapshot((N1, N2, N3), [team], [HALF_1, HALF_2, FULL_3, gang()]),
        defrag=(("p1", 4),),
    )
    first = plan(snapshot, NOW)
    assert [m.workload_id for m in first.moves] == [1]
    assert first.moves[0].pod == "p1"
    assert first.moves[0].reason == (
        "moved within pod p1 to node dc1-p1-l1-n2, so that whole H800 nodes free up there for "
        "workload 9, which waits with enough GPUs free but scattered"
    )
    assert outcome(first, snapshot)[9].endswith(
        "; running work within pod p1 moves to free whole nodes for it"
    )
    second = plan(apply_plan(snapshot, first, NOW), NOW + 30)
    assert outcome(second, snapshot)[9] == "dc1-p1-l1-n1"
    assert not second.moves  # the moved job moved lately, and nothing waits


def test_only_the_due_pod_is_defragmented():
    pod2 = tuple(replace(node, pod="p2") for node in OTHER_POD)
    nodes = (N1, N2, *pod2)
    workloads = [
        HALF_1,
        HALF_2,
        running(5, on(pod2[0], 0, 1, 2, 3)),
        running(6, on(pod2[1], 0, 1, 2, 3)),
        gang(gpus=8),
    ]
    found, _ = moves_of(workloads, (("p2", 4),), nodes)
    assert found == {5: "x-dc1-p1-l1-n2[4, 5, 6, 7]"}


def test_moves_never_exceed_the_budget_for_several_gangs():
    nodes = make_cluster(nodes=6)
    workloads = [running(i + 1, on(node, 0, 1, 2, 3)) for i, node in enumerate(nodes)]
    workloads += [gang(20), gang(21)]
    found, _ = moves_of(workloads, (("p1", 3),), nodes)
    assert len(found) == 2  # one node per gang, a move each; the third would free half a node
    targets = set(found.values())
    assert len(targets) == 2  # never onto the same GPUs, nor onto a node being emptied


@pytest.mark.parametrize(
    "other_tenant, moved",
    [
        pytest.param(
            1, {1: "dc1-p1-l1-n2[4, 5, 6, 7]"}, id="onto a node holding its tenant's work"
        ),
        pytest.param(2, {}, id="never onto a node holding another tenant's work"),
    ],
)
def test_single_tenant_nodes_take_only_their_tenants_moves(other_tenant, moved):
    nodes = tuple(replace(node, single_tenant=True) for node in (N1, N2, N3))
    nodes = (replace(nodes[0], tenant=1), replace(nodes[1], tenant=other_tenant), nodes[2])
    workloads = [
        replace(HALF_1, tenant=1),
        replace(HALF_2, tenant=other_tenant),
        replace(FULL_3, tenant=1),
        replace(gang(), tenant=1),
    ]
    found, _ = moves_of(workloads, (("p1", 4),), nodes)
    assert found == moved


def test_a_cycle_plans_at_most_its_share_of_moves_the_rest_wait():
    nodes = make_cluster(nodes=80)
    workloads = [running(i + 1, on(node, 0, 1, 2, 3), queue=big) for i, node in enumerate(nodes)]
    workloads += [gang(1000 + k, queue=big) for k in range(40)]
    found, _ = moves_of(workloads, (("p1", 100),), nodes)
    assert len(found) == MOVES_PER_CYCLE


def test_a_node_that_takes_a_moved_job_is_not_emptied_for_the_same_gang():
    nodes = make_cluster(nodes=4)
    workloads = [running(i + 1, on(node, 0, 1, 2, 3), queue=big) for i, node in enumerate(nodes)]
    found, _ = moves_of(workloads + [gang(gpus=16, queue=big)], (("p1", 4),), nodes)
    assert found == {1: "dc1-p1-l1-n2[4, 5, 6, 7]", 3: "dc1-p1-l1-n4[4, 5, 6, 7]"}


@st.composite
def scattered(draw: st.DrawFn):
    """Two pods of 1-4 nodes of 8 GPUs, each node holding 1-3 small jobs (some that may not
    move, some just started), and 1-3 gangs of 8 or 16 GPUs waiting."""
    nodes = make_cluster(pods=2, nodes=draw(st.integers(1, 4)))
    workloads = []
    for node in nodes:
        start = 0
        for size in draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3)):
            if start + size > node.gpus:
                break
            gpus = tuple(range(start, start + size))
            extra = {
                "movable": draw(st.integers(0, 4)) > 0,
                "saves": draw(st.integers(0, 4)) > 0,
                "started_at": draw(st.sampled_from([0.0, NOW - 60])),
            }
            workloads.append(make_running(len(workloads) + 1, big, on(node, *gpus), **extra))
            start += size
    gangs = draw(st.lists(st.sampled_from([8, 16]), min_size=1, max_size=3))
    workloads += [workload(100 + i, big, gpus) for i, gpus in enumerate(gangs)]
    return make_snapshot(nodes, [big], workloads)


@PROPERTY
@given(scattered(), st.integers(0, 3))
def test_moves_land_on_free_gpus_of_their_pod_within_its_budget(snapshot, moves):
    """Every pod due: no GPU is given twice (admissions and moves), a move lands on free GPUs
    of another node of its own pod and model, only of a job that may move, and no pod makes
    more moves than it may."""
    pods = sorted({node.pod for node in snapshot.nodes})
    snapshot = replace(snapshot, defrag=tuple((pod, moves) for pod in pods))
    result = plan(snapshot, NOW)
    nodes = {node.id: node for node in snapshot.nodes}
    held = {w.id: w for w in snapshot.workloads}
    taken = Counter(
        (p.node_id, i) for w in snapshot.workloads for p in w.placements for i in p.gpu_indices
    )
    given = [p for a in result.admissions for p in a.placements]
    given += [p for m in result.moves for p in m.placements]
    for placement in given:
        assert set(placement.gpu_indices) <= set(nodes[placement.node_id].free)
        taken.update((placement.node_id, i) for i in placement.gpu_indices)
    assert all(count == 1 for count in taken.values())
    for move in result.moves:
        moved = held[move.workload_id]
        [target] = move.placements
        old = nodes[moved.placements[0].node_id]
        assert nodes[target.node_id].pod == old.pod == move.pod and target.node_id != old.id
        assert moved.movable and moved.saves and moved.started_at == 0.0
    assert all(count <= moves for count in Counter(m.pod for m in result.moves).values())
    assert not result.preemptions
