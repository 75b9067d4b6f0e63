"""Shares of a GPU: eighths of one GPU of one node, charged as held, placed by FGD or best-fit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import plan
from scheduler.engine.model import SharePlacement
from scheduler.engine.shares import fragmentation
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    on,
    outcome,
)
from scheduler.engine.testing import make_workload as workload

NOW = 10_000.0


def share(workload_id: int, queue, slices: int, *placements, **extra):
    """A share job of `slices` eighths: pending, or running on the given placement."""
    if placements:
        return make_running(workload_id, queue, *placements, slices=slices, **extra)
    return workload(workload_id, queue, 1, slices=slices, **extra)


def test_four_quarters_share_one_gpu_and_charge_one_gpu_of_quota() -> None:
    queue = make_queue("acme", h800=1)
    nodes = make_cluster(nodes=1)
    jobs = [share(i, queue, 2) for i in range(1, 6)]
    result = plan(make_snapshot(nodes, [queue], jobs), NOW)
    assert {a.workload_id: a.placements for a in result.admissions} == {
        i: (on(nodes[0], 0),) for i in range(1, 5)
    }
    assert result.usage == {(queue.id, "H800"): 1.0}
    [waiting] = result.pending
    assert waiting.workload_id == 5
    assert "(1.0/1 in use, job needs 0.25" in waiting.reason


@pytest.mark.parametrize(
    "pending, expected",
    [
        pytest.param(
            lambda q: workload(2, q, 1),
            "has 0 free",
            id="a whole GPU never joins shares",
        ),
        pytest.param(
            lambda q: share(2, q, 6),
            "no H800 GPU has 6/8",
            id="a share too big for the room left waits",
        ),
        pytest.param(
            lambda q: share(2, q, 5), "dc1-p1-l1-n1", id="a share that fits joins the used GPU"
        ),
    ],
)
def test_a_partly_used_gpu_takes_only_shares_that_fit(pending, expected) -> None:
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=1)
    running = share(1, queue, 3, on(node, 0))
    snapshot = make_snapshot([node], [queue], [running, pending(queue)])
    assert expected in outcome(plan(snapshot, NOW), snapshot)[2]


def test_a_share_is_never_preempted_to_free_a_whole_gpu() -> None:
    """Stopping a share frees part of a GPU, no whole one: the claimant waits."""
    lender, borrower = make_queue("a", h800=1, cohort="c"), make_queue("b", h800=0, cohort="c")
    [node] = make_cluster(nodes=1, gpus=1)
    running = share(1, borrower, 4, on(node, 0))
    snapshot = make_snapshot([node], [lender, borrower], [running, workload(2, lender, 1)])
    result = plan(snapshot, NOW)
    assert not result.preemptions and not result.admissions
    assert result.usage == {(borrower.id, "H800"): 0.5}


def placements(policy: SharePlacement) -> dict[int, tuple[int, int]]:
    """Where a 1/8 share and then two halves go, beside a 3/8 share on node 1 (5/8 free) and a
    half on node 2 (4/8 free): halves dominate the expected mix."""
    queue = make_queue("acme", h800=16)
    first, second = make_cluster(nodes=2)
    jobs = [
        share(1, queue, 3, on(first, 0)),
        share(2, queue, 4, on(second, 0)),
        share(3, queue, 1),
        share(4, queue, 4),
        share(5, queue, 4),
    ]
    snapshot = replace(make_snapshot([first, second], [queue], jobs), share_placement=policy)
    admitted = plan(snapshot, NOW).admissions
    return {
        a.workload_id: (a.placements[0].node_id, *a.placements[0].gpu_indices) for a in admitted
    }


def test_fgd_keeps_room_for_the_expected_halves_where_best_fit_strands_it() -> None:
    # FGD: the eighth goes where 4/8 stays free for a half; both halves fit on used GPUs.
    assert placements(SharePlacement.FGD) == {3: (1, 0), 4: (1, 0), 5: (2, 0)}
    # Best-fit: the eighth takes the tightest GPU (4/8 -> 3/8, too little for a half), so the
    # second half breaks a free GPU.
    assert placements(SharePlacement.BEST_FIT) == {3: (2, 0), 4: (1, 0), 5: (1, 1)}


@pytest.mark.parametrize(
    "state, mix, stranded",
    [
        pytest.param((8, 8, 4, 0), ((4, 1.0),), 0, id="halves use every free eighth"),
        pytest.param((8, 8, 3, 0), ((4, 1.0),), 3, id="3/8 is stranded for halves"),
        pytest.param((3, 2, 0, 0), ((4, 1.0),), 5, id="halves fit nowhere: all is stranded"),
        pytest.param((8, 8, 4, 0), ((16, 1.0),), 4, id="two whole GPUs strand the partly used one"),
        pytest.param((8, 8, 8, 8), ((64, 1.0),), 0, id="an empty node serves a gang"),
        pytest.param((8, 8, 8, 0), ((64, 0.5), (8, 0.5)), 12, id="weighted by how often"),
    ],
)
def test_fragmentation_is_the_free_capacity_the_mix_cannot_use(state, mix, stranded) -> None:
    assert fragmentation(state, mix) == stranded
