"""Shares of a GPU: eighths of one GPU of one node, charged as held, placed by FGD or best-fit."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.engine import Budget, plan
from scheduler.engine.model import SLICES, SharePlacement
from scheduler.engine.shares import fragmentation
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
    assert "(1/1 in use, job needs 0.25" in waiting.reason


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
            "no H800 GPU holding its tenant's shares has 6/8",
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


def test_a_gpu_holds_one_tenants_shares() -> None:
    """Acme's share runs on GPU 0: Globex's share takes GPU 1, Acme's second joins GPU 0; with
    GPU 1 held, Globex's waits, saying so."""
    acme, globex = make_queue("acme", h800=8), make_queue("globex", h800=8)
    [node] = make_cluster(nodes=1, gpus=2)
    running = share(1, acme, 2, on(node, 0), tenant=1)
    jobs = [running, share(2, globex, 2, tenant=2), share(3, acme, 2, tenant=1)]
    placed = plan(make_snapshot([node], [acme, globex], jobs), NOW).admissions
    assert {a.workload_id: a.placements for a in placed} == {2: (on(node, 1),), 3: (on(node, 0),)}
    held = make_running(4, acme, on(node, 1), tenant=1)
    snapshot = make_snapshot([node], [acme, globex], [running, held, share(2, globex, 2, tenant=2)])
    reason = outcome(plan(snapshot, NOW), snapshot)[2]
    assert (
        "no H800 GPU holding its tenant's shares has 2/8 of a GPU free (the roomiest has 0/8)"
        in reason
    )


@pytest.mark.parametrize(
    ("borrower_nominal", "running", "pending", "preempted", "admitted"),
    [
        pytest.param(0, [4], 8, {1}, set(), id="a whole GPU: the borrower's half goes"),
        pytest.param(0, [4, 4], 4, {1, 2}, set(), id="a half: every share of the GPU goes"),
        pytest.param(1, [4], 8, set(), set(), id="within its own quota the share stays"),
        pytest.param(0, [4, 2], 2, set(), {9}, id="room beside the shares: nothing goes"),
    ],
)
def test_quota_lent_to_shares_is_reclaimed_by_stopping_every_share_of_a_gpu(
    borrower_nominal, running, pending, preempted, admitted
) -> None:
    """A lender's queue takes back its GPU from a borrower's share jobs: all of the GPU's go at
    once (stopping one frees part of a GPU, no whole one), each while its queue borrows; the
    claimant waits while they stop, its quota charged. `pending`: eighths the claimant asks
    (8: a whole GPU)."""
    lender = make_queue("a", h800=1, cohort="c")
    borrower = make_queue("b", h800=borrower_nominal, cohort="c")
    [node] = make_cluster(nodes=1, gpus=1)
    jobs = [share(i, borrower, n, on(node, 0)) for i, n in enumerate(running, 1)]
    jobs.append(workload(9, lender, 1) if pending == 8 else share(9, lender, pending))
    result = plan(make_snapshot([node], [lender, borrower], jobs), NOW)
    assert {p.workload_id for p in result.preemptions} == preempted
    assert {p.for_workload_id for p in result.preemptions} <= {9}
    assert {a.workload_id for a in result.admissions} == admitted
    if preempted:
        [waiting] = result.pending
        assert waiting.reason.startswith(f"preempting {len(preempted)} workload")


def test_a_gpu_whose_shares_would_take_their_queue_below_its_guarantee_is_not_taken() -> None:
    """The borrower (1 GPU guaranteed, 1.75 held): stopping GPU 0's two halves leaves it 0.75,
    GPU 1's quarter and half leave it 1."""
    lender = make_queue("a", h800=1, cohort="c")
    borrower = make_queue("b", h800=1, guarantee=1, cohort="c")
    [node] = make_cluster(nodes=1, gpus=2)
    running = [(1, 4, 0), (2, 4, 0), (3, 2, 1), (4, 4, 1)]
    jobs = [share(i, borrower, n, on(node, gpu)) for i, n, gpu in running]
    result = plan(make_snapshot([node], [lender, borrower], [*jobs, workload(9, lender, 1)]), NOW)
    assert {p.workload_id for p in result.preemptions} == {3, 4}


def test_a_claimant_waits_for_shares_already_stopping_and_stops_no_more() -> None:
    lender, borrower = make_queue("a", h800=1, cohort="c"), make_queue("b", h800=0, cohort="c")
    first, second = make_cluster(nodes=2, gpus=1)
    jobs = [
        share(1, borrower, 4, on(first, 0), preempting=True),
        share(2, borrower, 4, on(second, 0)),
        workload(9, lender, 1),
    ]
    result = plan(make_snapshot([first, second], [lender, borrower], jobs), NOW)
    assert not result.preemptions and not result.admissions
    [waiting] = result.pending
    assert "1 preempted workload" in waiting.reason


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


@st.composite
def share_streams(draw: st.DrawFn):
    """Two to four 4-GPU nodes, two queues (one borrowing), and waves of share and whole-GPU
    jobs to plan in turn, with some finishing between waves."""
    nodes = make_cluster(nodes=draw(st.integers(2, 4)), gpus=4)
    queues = [
        make_queue("a", h800=draw(st.integers(1, 8)), cohort="c"),
        make_queue("b", h800=draw(st.integers(0, 8)), cohort="c"),
    ]
    waves = draw(
        st.lists(
            st.lists(
                st.tuples(
                    st.integers(0, 1),
                    st.sampled_from([1, 2, 3, 4, 6, 0, 0]),
                    st.sampled_from([1, 2, 4]),
                ),  # fmt: skip
                min_size=1,
                max_size=6,
            ),
            min_size=1,
            max_size=4,
        )
    )
    policy = draw(st.sampled_from(list(SharePlacement)))
    return nodes, queues, waves, policy, draw(st.randoms(use_true_random=False))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(share_streams())
def test_no_gpu_is_ever_held_past_its_whole_and_usage_counts_shares(stream) -> None:
    """Same plan for the same input; a share on one GPU of one node; no GPU past eight
    eighths or shared beside a whole job; the plan's usage is the shares and GPUs held."""
    nodes, queues, waves, policy, rng = stream
    snapshot = replace(make_snapshot(nodes, queues), share_placement=policy)
    next_id = 1
    for number, wave in enumerate(waves):
        now = NOW + 60 * number
        running = [w for w in snapshot.workloads if w.placements and rng.random() < 0.7]
        pending = [w for w in snapshot.workloads if not w.placements]
        for queue_index, slices, gpus in wave:
            queue = queues[queue_index]
            new = share(next_id, queue, slices) if slices else workload(next_id, queue, gpus)
            pending.append(new)
            next_id += 1
        snapshot = replace(make_snapshot(nodes, queues, running + pending), share_placement=policy)
        result = plan(snapshot, now)
        assert result == plan(replace(snapshot, workloads=snapshot.workloads[::-1]), now)
        snapshot = replace(apply_plan(snapshot, result, now), share_placement=policy)
        eighths: Counter[tuple[int, int]] = Counter()
        for held in snapshot.workloads:
            for p in held.placements:
                for index in p.gpu_indices:
                    eighths[p.node_id, index] += held.slices or SLICES + 1
                    if held.slices:
                        assert len(held.placements) == 1 and len(p.gpu_indices) == 1
        assert all(n <= SLICES or n == SLICES + 1 for n in eighths.values()), eighths
        used: Counter[int] = Counter()
        for held in snapshot.workloads:
            if held.placements:
                used[held.queue_id] += held.held
        assert {k: v for k, v in result.usage.items()} == {
            (q, "H800"): n for q, n in sorted(used.items()) if n > 0
        }


def small_jobs(policy: SharePlacement) -> dict[int, tuple[int, ...]]:
    """A one-GPU job, then two of four GPUs, where node 1 has 4 free GPUs, node 2 has 5, and
    node 3 is full but for a GPU holding a share (so that share work is about)."""
    queue = make_queue("acme", h800=64)
    first, second, third = make_cluster(nodes=3)
    jobs = [
        make_running(10, queue, on(first, 4, 5, 6, 7)),
        make_running(11, queue, on(second, 5, 6, 7)),
        make_running(12, queue, on(third, *range(1, 8))),
        share(13, queue, 2, on(third, 0)),
        workload(1, queue, 1),
        workload(2, queue, 4),
        workload(3, queue, 4),
    ]
    snapshot = replace(make_snapshot([first, second, third], [queue], jobs), share_placement=policy)
    return {a.workload_id: a.placements[0].node_id for a in plan(snapshot, NOW).admissions}


def test_fgd_places_a_small_job_where_it_keeps_room_for_the_larger_ones_expected() -> None:
    # FGD: the one GPU comes off the node with 5 free, leaving 4 and 4: both 4-GPU jobs start.
    assert small_jobs(SharePlacement.FGD) == {1: 2, 2: 1, 3: 2}
    # Best-fit: off the node with the fewest free (4 -> 3): one 4-GPU job waits.
    assert small_jobs(SharePlacement.BEST_FIT) == {1: 1, 2: 2}


def test_a_share_within_its_quota_reclaims_a_gpu_from_a_borrower_and_starts_there() -> None:
    lender, borrower = make_queue("a", h800=1, cohort="c"), make_queue("b", h800=0, cohort="c")
    [node] = make_cluster(nodes=1, gpus=1)
    borrowed = make_running(1, borrower, on(node, 0), started_at=NOW - 600)
    snapshot = make_snapshot([node], [lender, borrower], [borrowed, share(2, lender, 2)])
    first = plan(snapshot, NOW)
    [preempted] = first.preemptions
    assert (preempted.workload_id, preempted.for_workload_id) == (1, 2)
    assert not first.admissions
    after = apply_plan(snapshot, first, NOW)
    second = plan(after, NOW + 10)
    assert [(a.workload_id, a.placements) for a in second.admissions] == [(2, (on(node, 0),))]
    assert second.usage == {(lender.id, "H800"): 0.25}


def test_a_hard_budget_counts_a_share_as_its_share_of_a_gpu() -> None:
    """3 GPU-hours left: a quarter GPU for 10 h (2.5) starts, a whole GPU for 10 h (10) waits,
    and a running quarter counts a quarter against what is left."""
    queue = make_queue("acme", h800=8)
    nodes = make_cluster(nodes=1)
    left = Budget("queue acme", (queue.id,), 3.0, hard=True)
    jobs = [share(1, queue, 2, time_limit_s=36_000), workload(2, queue, 1, time_limit_s=36_000)]
    snapshot = replace(make_snapshot(nodes, [queue], jobs), budgets=(left,))
    result = plan(snapshot, NOW)
    assert [a.workload_id for a in result.admissions] == [1]
    [waiting] = result.pending
    assert waiting.workload_id == 2 and "this job needs up to 10" in waiting.reason
    running = make_running(3, queue, on(nodes[0], 7), slices=2, started_at=NOW, time_limit_s=7200)
    snapshot = replace(make_snapshot(nodes, [queue], [running, jobs[0]]), budgets=(left,))
    assert [a.workload_id for a in plan(snapshot, NOW).admissions] == [1]  # 0.5 + 2.5 <= 3
