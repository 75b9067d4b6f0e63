"""A workload that accepts several GPU models starts on the best of them with room: the fastest
where its speeds are known, else the first its submitter listed; it says which and why, and
waits for the best when none has room."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import plan
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
H800 = make_cluster("H800", nodes=2)  # ids 1, 2
H20 = make_cluster("H20", nodes=2, first_id=3, prefix="h20-")  # ids 3, 4
team = make_queue("team", h800=16, h20=16)
only_h20 = make_queue("only-h20", h20=16)
FAST = (("H800", 2.6), ("H20", 1.0))


def accepting(workload_id, queue, gpus, *models, speeds=(), **extra):
    return workload(
        workload_id, queue, gpus, gpu_model=models[0], accepts=models, speeds=speeds, **extra
    )


def decided(queue, *workloads):
    snapshot = make_snapshot(H800 + H20, [queue], workloads)
    result = plan(snapshot, NOW)
    placed = {a.workload_id: a for a in result.admissions}
    models = {node.id: node.gpu_model for node in snapshot.nodes}
    return (
        {w: models[a.placements[0].node_id] for w, a in placed.items()},
        {w: a.choice for w, a in placed.items()},
        outcome(result, snapshot),
    )


@pytest.mark.parametrize(
    "queue, workloads, model, choice",
    [
        pytest.param(
            team,
            [accepting(1, team, 8, "H20", "H800", speeds=FAST)],
            "H800",
            "H800: the fastest of the GPU models it accepts (2.6x H20)",
            id="known speeds: the fastest, whatever the order listed",
        ),
        pytest.param(
            team,
            [
                make_running(9, team, on(H800[0]), on(H800[1])),
                accepting(1, team, 8, "H800", "H20", speeds=FAST),
            ],
            "H20",
            "H20: H800 would be 2.6x faster but has no room now",
            id="the fastest full: the next with room, said so",
        ),
        pytest.param(
            team,
            [accepting(1, team, 8, "H20", "H800")],
            "H20",
            "H20: the first of the GPU models it accepts",
            id="no speeds: the submitter's order",
        ),
        pytest.param(
            only_h20,
            [accepting(1, only_h20, 8, "H800", "H20", speeds=FAST)],
            "H20",
            "H20: H800 would be 2.6x faster but has no room now",
            id="no quota for the fastest (a queue in no cohort): the one its quota allows",
        ),
        pytest.param(
            team,
            [accepting(1, team, 8, "H800", "H20", speeds=(("H800", 1.05), ("H20", 1.0)))],
            "H800",
            "H800: the fastest of the GPU models it accepts (1.1x H20) (a difference within "
            "the planner's error of 9%, so either would do)",
            id="a gain within the planner's error is said to be one",
        ),
    ],
)
def test_model_choice(queue, workloads, model, choice):
    models, choices, _ = decided(queue, *workloads)
    assert models[1] == model
    assert choices[1] == choice


def test_one_model_says_nothing():
    models, choices, _ = decided(team, workload(1, team, 8))
    assert models == {1: "H800"} and choices == {1: ""}


def test_fills_each_model_before_waiting():
    jobs = [accepting(i, team, 8, "H800", "H20", speeds=FAST) for i in range(1, 6)]
    models, _, outcomes = decided(team, *jobs)
    assert models == {1: "H800", 2: "H800", 3: "H20", 4: "H20"}
    assert outcomes[5].startswith("none of the GPU models it accepts (H800, H20) has room now; ")


def test_waiting_for_the_best_reserves_there():
    """With no room anywhere, a gang waits for (and reserves) its fastest model."""
    big = make_queue("big", h800=64, h20=64)
    running = [
        make_running(8, big, on(H800[0]), on(H800[1]), time_limit_s=600, started_at=NOW),
        make_running(9, big, on(H20[0]), on(H20[1])),
    ]
    snapshot = make_snapshot(
        H800 + H20, [big], [*running, accepting(1, big, 16, "H20", "H800", speeds=FAST)]
    )
    result = plan(snapshot, NOW)
    assert not result.admissions
    assert [r.workload_id for r in result.reservations] == [1]
    models = {node.id: node.gpu_model for node in snapshot.nodes}
    assert {models[n] for n in result.reservations[0].nodes} == {"H800"}


def test_fair_sharing_weighs_borrowed_gpus_by_their_worth():
    """One queue borrows 16 A100s, another 32 T4s (worth about a fifth of an A100 each); both
    want the last free A100 node. Kueue's dominant share counts each model apart: the T4
    borrower has borrowed two thirds of the cohort's T4s, more than the other will have of
    A100s, so the A100 borrower goes first. Weighed by worth, the T4 borrower has borrowed
    less (32 x 65 against 16 x 312) and goes first."""
    a100 = make_cluster("A100", nodes=6)
    t4 = make_cluster("T4", nodes=6, first_id=7, prefix="t4-")
    lender = make_queue("lender", a100=48, t4=48, cohort="lab")
    big, small = (make_queue(name, a100=0, t4=0, cohort="lab") for name in ("big", "small"))
    workloads = [
        *(make_running(80 + i, lender, on(n), gpu_model="A100") for i, n in enumerate(a100[2:5])),
        make_running(90, big, on(a100[0]), on(a100[1]), gpu_model="A100"),
        make_running(91, small, *(on(n) for n in t4[:4]), gpu_model="T4"),
        workload(1, big, 8, gpu_model="A100"),
        workload(2, small, 8, gpu_model="A100"),
    ]
    snapshot = make_snapshot(a100 + t4, [lender, big, small], workloads)
    blind = plan(snapshot, NOW)
    assert [a.workload_id for a in blind.admissions] == [1]
    weighed = plan(replace(snapshot, worth=(("A100", 312.0), ("T4", 65.0))), NOW)
    assert [a.workload_id for a in weighed.admissions] == [2]
