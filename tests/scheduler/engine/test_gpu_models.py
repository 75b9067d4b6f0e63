"""A workload that accepts several GPU models starts on the best of them with room: the fastest
where its speeds are known, else the first its submitter listed; it says which and why, and
waits for the best when none has room."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import plan
from scheduler.engine.explain import PLANNER_ERROR
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    on,
    outcome,
)
from scheduler.engine.testing import make_workload as workload
from scheduler.parallelism import PREDICTION_ERROR

NOW = 10_000.0
H800 = make_cluster("H800", nodes=2)  # ids 1, 2
H20 = make_cluster("H20", nodes=2, first_id=3, prefix="h20-")  # ids 3, 4
team = make_queue("team", h800=16, h20=16)
only_h20 = make_queue("only-h20", h20=16)
FAST = (("H800", 2.6), ("H20", 1.0))
STEPS = (("H800", 0.21), ("H20", 0.1))  # steps/s per GPU its runs measured


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
            [accepting(1, team, 8, "H800", "H20", speeds=(("H800", 1.04), ("H20", 1.0)))],
            "H800",
            "H800: the fastest of the GPU models it accepts (1.0x H20) (a difference within "
            f"the planner's error of {PLANNER_ERROR}, so either would do)",
            id="a gain within the planner's error is said to be one",
        ),
        pytest.param(
            team,
            [accepting(1, team, 8, "H20", "H800", speeds=STEPS, measured=3)],
            "H800",
            "H800: the fastest of the GPU models it accepts (2.1x H20), as measured over 3 "
            "earlier runs",
            id="speeds its own runs measured: said so",
        ),
        pytest.param(
            team,
            [
                make_running(9, team, on(H800[0]), on(H800[1])),
                accepting(1, team, 8, "H800", "H20", speeds=FAST, measured=1),
            ],
            "H20",
            "H20: H800 would be 2.6x faster but has no room now, as measured over one earlier run",
            id="measured, the fastest full",
        ),
        pytest.param(
            team,
            [accepting(1, team, 8, "H20", "H800", speeds=(("H800", 0.2),), measured=2)],
            "H20",
            "H20: the first of the GPU models it accepts",
            id="measured on one model only: the other unknown, the submitter's order",
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


SLIGHT = (("H800", 1.1), ("H20", 1.0))  # hardly faster on an H800
WITHIN_ERROR = (("H800", 1.1 * (1 + PREDICTION_ERROR / 2)), ("H20", 1.0))  # a hair more gain
BUSY = [  # one node of each model free
    make_running(8, team, on(H800[0])),
    make_running(9, team, on(H20[0]), gpu_model="H20"),
]
LEFT = (
    "H20: H800 has room but is left to workload 2, which gains more there than this one (1.1x "
    "faster than on H20)"
)


@pytest.mark.parametrize(
    "second, models",
    [
        pytest.param(None, {1: "H800"}, id="alone: the fastest"),
        pytest.param(
            accepting(2, team, 8, "H20", "H800", speeds=FAST),
            {1: "H20", 2: "H800"},
            id="work behind gains more on the H800: it is left to that work",
        ),
        pytest.param(
            accepting(2, team, 8, "H20", "H800", speeds=SLIGHT),
            {1: "H800", 2: "H20"},
            id="the same gain: first come, first served",
        ),
        pytest.param(
            accepting(2, team, 8, "H20", "H800", speeds=WITHIN_ERROR),
            {1: "H800", 2: "H20"},
            id="a larger gain, but within the planner's error: first come, first served",
        ),
        pytest.param(
            accepting(2, team, 16, "H20", "H800", speeds=FAST),
            {1: "H800"},
            id="work that gains more but needs more GPUs than are free there",
        ),
        pytest.param(
            accepting(2, only_h20, 8, "H20", "H800", speeds=FAST),
            {1: "H800", 2: "H20"},
            id="work that gains more but has no quota there",
        ),
        pytest.param(
            accepting(2, team, 8, "H20", "H800"),
            {1: "H800", 2: "H20"},
            id="work whose speeds are unknown",
        ),
    ],
)
def test_a_faster_model_goes_to_the_work_that_gains_most_there(second, models):
    """Gavel's effective throughput is the cluster's: of two jobs that could each start on the
    free H800 or the free H20 node, the one that gains more on an H800 gets it."""
    job = accepting(1, team, 8, "H800", "H20", speeds=SLIGHT)
    snapshot = make_snapshot(
        H800 + H20, [team, only_h20], [*BUSY, job] + ([second] if second else [])
    )
    result = plan(snapshot, NOW)
    on_model = {node.id: node.gpu_model for node in snapshot.nodes}
    placed = {a.workload_id: on_model[a.placements[0].node_id] for a in result.admissions}
    assert placed == models
    choice = next(a.choice for a in result.admissions if a.workload_id == 1)
    assert choice == LEFT if models[1] == "H20" else "left to" not in choice


def test_left_with_no_other_room_it_waits_for_its_next_model():
    """The H20s are all busy: the job that hardly gains on an H800 leaves the free one to the
    job that gains more there and waits for an H20, saying so."""
    busy = [
        make_running(8, team, on(H800[0])),
        make_running(9, team, on(H20[0]), on(H20[1]), gpu_model="H20"),
    ]
    job = accepting(1, team, 8, "H800", "H20", speeds=SLIGHT)
    gains = accepting(2, team, 8, "H20", "H800", speeds=FAST)
    snapshot = make_snapshot(H800 + H20, [team], [*busy, job, gains])
    result = plan(snapshot, NOW)
    decided = outcome(result, snapshot)
    assert decided[2] == "dc1-p1-l1-n2"
    assert decided[1].startswith(
        "H800 has room but is left to workload 2, which gains more there than this one "
        "(1.1x faster than on H20); "
    )
    assert [p.workload_id for p in result.pending] == [1]


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
    # A model left out of `worth` counts as the median of the others (here the A100's), not per
    # model for all: small's four T4s weigh twice big's two A100s, so big borrows first.
    t4_unknown = plan(replace(snapshot, worth=(("A100", 312.0),)), NOW)
    assert [a.workload_id for a in t4_unknown.admissions] == [1]
    cheap = (("A100", 312.0), ("H800", 50.0), ("H20", 50.0))  # the median is 50 now
    t4_unknown = plan(replace(snapshot, worth=cheap), NOW)
    assert [a.workload_id for a in t4_unknown.admissions] == [2]


def moving(snapshot_workloads, queue=team, **snapshot):
    made = make_snapshot(H800 + H20, [queue], snapshot_workloads)
    return plan(replace(made, **snapshot), NOW)


def on_h20(workload_id=1, started=NOW - 7200, speeds=FAST, **extra):
    """A job that accepts both models, running on an H20 node for two hours."""
    return make_running(
        workload_id,
        team,
        on(H20[0]),
        gpu_model="H20",
        accepts=("H800", "H20"),
        speeds=speeds,
        started_at=started,
        **extra,
    )


@pytest.mark.parametrize(
    "workloads, moved",
    [
        pytest.param(
            [on_h20()], {1: ("H800", "dc1-p1-l1-n1")}, id="a faster model frees: it moves"
        ),
        pytest.param([on_h20(started=NOW - 600)], {}, id="started ten minutes ago: it stays"),
        pytest.param(
            [on_h20(started=NOW - 9000, resized_at=NOW - 1800)], {}, id="moved within the hour"
        ),
        pytest.param([on_h20(saves=False)], {}, id="a job that does not save never moves"),
        pytest.param([on_h20(movable=False)], {}, id="a job marked not to move never moves"),
        pytest.param([on_h20(speeds=(("H800", 1.2), ("H20", 1.0)))], {}, id="gain below 25 %"),
        pytest.param([on_h20(speeds=())], {}, id="speeds unknown"),
        pytest.param(
            [on_h20(), workload(2, team, 16)],
            {},
            id="work waits for the faster model: it goes to that work",
        ),
        pytest.param(
            [on_h20(), make_running(3, team, on(H800[0]), on(H800[1]))],
            {},
            id="no room on the faster model: never by preempting",
        ),
    ],
)
def test_moving_to_a_faster_model(workloads, moved):
    result = moving(workloads)
    names = {node.id: node.name for node in H800 + H20}
    found = {
        m.workload_id: (m.gpu_model, " ".join(names[p.node_id] for p in m.placements))
        for m in result.moves
    }
    assert found == moved
    said = "moved from H20 to H800 GPUs, 2.6x faster there: they were free and no work waits "
    assert all(move.reason == said + "for them" for move in result.moves)


def test_a_move_waits_for_its_quota():
    small = make_queue("team", h800=4, h20=16)  # the same id as `team`
    assert moving([on_h20()], queue=small).moves == []


@pytest.mark.parametrize(
    "ends_in_s, outcome_of_1",
    [
        (
            600,
            "H800: 2.6x faster than the H20 free now; expected to start in 10 min and still end "
            "sooner there",
        ),
        (3000, "h20-dc1-p1-l1-n1"),
    ],
    ids=[
        "the faster model frees in 10 min: it waits, ending sooner than on the H20",
        "it frees in 50 min: the H20 now ends sooner",
    ],
)
def test_waiting_for_a_faster_model_when_it_ends_sooner(ends_in_s, outcome_of_1):
    """An hour on the H20 (its time limit allows for its slowest model), 23 min on an H800."""
    held = make_running(
        9, team, on(H800[0]), on(H800[1]), time_limit_s=3600, started_at=NOW - 3600 + ends_in_s
    )
    job = accepting(1, team, 8, "H800", "H20", speeds=FAST, time_limit_s=3600)
    snapshot = make_snapshot(H800 + H20, [team], [held, job])
    assert outcome(plan(snapshot, NOW), snapshot)[1] == outcome_of_1


def test_jobs_ahead_count_against_the_wait():
    """Two jobs could wait for the one H800 node freeing in 10 min: the second would start
    only when the next frees (an hour on), so it starts on the H20 now."""
    held = [
        make_running(8, team, on(H800[0]), time_limit_s=3600, started_at=NOW - 3000),
        make_running(9, team, on(H800[1]), time_limit_s=7200, started_at=NOW - 3600),
    ]
    jobs = [accepting(i, team, 8, "H800", "H20", speeds=FAST, time_limit_s=3600) for i in (1, 2)]
    snapshot = make_snapshot(H800 + H20, [team], [*held, *jobs])
    decided = outcome(plan(snapshot, NOW), snapshot)
    assert decided[1].startswith("H800: 2.6x faster than the H20 free now")
    assert decided[2] == "h20-dc1-p1-l1-n1"
