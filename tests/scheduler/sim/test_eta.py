"""The start-time estimator: the engine run forward from a snapshot."""

import pytest

from scheduler.engine import Strategy
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
)
from scheduler.sim.eta import Bounds, Guess, History, estimate

NOW = 1000.0
nlp = make_queue("nlp", h800=16)
nodes = make_cluster("H800", nodes=2)


def running(workload_id, node, **extra):
    return make_running(workload_id, nlp, on(node), started_at=NOW - 100, **extra)


def test_a_job_waiting_for_gpus_freed_at_a_known_time_gets_that_time():
    busy = [running(1, nodes[0], time_limit_s=400), running(2, nodes[1], time_limit_s=4000)]
    waiting = make_workload(3, nlp, gpus=8, submitted_at=NOW)
    result = estimate(make_snapshot(nodes, [nlp], [*busy, waiting]), NOW, {})
    assert result.start[3] == pytest.approx(NOW + 300)


def test_a_job_behind_a_bigger_one_in_a_strict_fifo_queue_starts_after_it():
    fifo = make_queue("fifo", h800=16, strategy=Strategy.STRICT_FIFO)
    busy = [
        make_running(i, fifo, on(node), started_at=NOW - 100, time_limit_s=limit)
        for i, node, limit in ((1, nodes[0], 400), (2, nodes[1], 4000))
    ]
    big = make_workload(3, fifo, gpus=16, submitted_at=NOW - 50, time_limit_s=600)
    small = make_workload(4, fifo, gpus=8, submitted_at=NOW)
    result = estimate(make_snapshot(nodes, [fifo], [*busy, big, small]), NOW, {})
    assert result.start[3] == pytest.approx(NOW + 3900)
    assert result.start[4] > result.start[3]


def test_history_guesses_run_times_and_the_p90_is_never_earlier():
    busy = [running(1, nodes[0]), running(2, nodes[1])]
    waiting = make_workload(3, nlp, gpus=8, submitted_at=NOW)
    guesses = {1: Guess(600, 1800), 2: Guess(5000, 9000)}
    result = estimate(make_snapshot(nodes, [nlp], [*busy, waiting]), NOW, guesses)
    assert result.start[3] == pytest.approx(NOW + 500)
    assert result.p90[3] >= result.start[3]
    assert result.p90[3] == pytest.approx(NOW + 1700 + 10)  # plus a cycle


def test_a_job_that_cannot_start_within_the_horizon_has_no_estimate():
    busy = [running(1, nodes[0], time_limit_s=10_000), running(2, nodes[1], time_limit_s=10_000)]
    waiting = make_workload(3, nlp, gpus=8, submitted_at=NOW)
    result = estimate(
        make_snapshot(nodes, [nlp], [*busy, waiting]), NOW, {}, Bounds(horizon_s=3600)
    )
    assert 3 not in result.start and 3 not in result.p90
    assert result.until == NOW + 3600


def test_jobs_past_the_cap_of_their_queue_have_no_estimate():
    waiting = [make_workload(i, nlp, gpus=8, submitted_at=NOW + i) for i in (1, 2, 3)]
    result = estimate(make_snapshot(nodes, [nlp], waiting), NOW, {}, Bounds(per_queue=2))
    assert set(result.start) == {1, 2}


def test_history_is_the_mean_of_the_last_two_similar_jobs():
    history = History()
    for run_s in (100, 200, 400):
        history.add(run_s, ("alice", 8), "alice")
    history.add(5000, ("alice", 64), "alice")
    assert history.guess(("alice", 8), "alice").mean_s == 300
    assert history.guess(("alice", 16), "alice").mean_s == (400 + 5000) / 2
    assert history.guess(("bob", 8), "bob") is None


def test_a_running_job_is_expected_to_be_one_of_those_that_ran_longer_than_it_has():
    history = History()
    for run_s in (60, 90, 120, 3000, 7200, 600):
        history.add(run_s, ("alice", 8), "alice")
    assert history.guess(("alice", 8), elapsed=0).mean_s == (7200 + 600) / 2
    assert history.guess(("alice", 8), elapsed=100).mean_s == 3000  # of 120, 600, 3000, 7200
    assert history.guess(("alice", 8), elapsed=5000).mean_s == 7200
    assert history.guess(("alice", 8), elapsed=100).p90_s >= 7200  # the longest of the four
    # none of the job's own kind ran that long: the wider key's, then the mean (outlived)
    history.add(20000, ("alice", 64), "alice")
    assert history.guess(("alice", 8), "alice", elapsed=8000).mean_s == 20000
    assert history.guess(("alice", 8), elapsed=8000).mean_s == (7200 + 600) / 2


@pytest.mark.parametrize(
    ("costs", "budget"),
    [([1.0], 10.0), ([2.0, 1.0], 10.0), ([1.0], 5.0)],
    ids=["even", "uneven", "two and a half plans a pass"],
)
def test_a_budget_of_a_few_plans_still_reaches_the_horizon_and_the_start_it_saw(
    monkeypatch, costs, budget
):
    """Forty jobs end ten minutes apart and the waiting one needs all their GPUs; plans cost
    one or two seconds of a budget of ten (five a pass), as plans do at 100,000 GPUs.
    Counting on the cost of the cheaper plan before, a pass ran out of budget 4.6 h ahead.
    Counting the first plan (both passes share it) as free, a pass with room for two and a
    half plans spent one on a step of seconds and saw a minute ahead."""
    import scheduler.sim.eta as forward_pass

    wide = make_queue("wide", h800=320)
    fleet = make_cluster("H800", nodes=40)
    busy = [
        make_running(i, wide, on(node), started_at=NOW, time_limit_s=600 * (i + 1))
        for i, node in enumerate(fleet)
    ]
    waiting = make_workload(100, wide, gpus=320, submitted_at=NOW)
    seconds = [0.0]
    engine_plan = forward_pass.plan

    def costly(snapshot, now, index=None):
        seconds[0] += costs[len(seconds) % len(costs)]
        seconds.append(0.0)  # one more plan made
        return engine_plan(snapshot, now, index=index)

    monkeypatch.setattr(forward_pass, "plan", costly)
    result = estimate(
        make_snapshot(fleet, [wide], [*busy, waiting]),
        NOW,
        {},
        Bounds(budget_s=budget),
        clock=lambda: seconds[0],
    )
    assert seconds[0] <= budget
    assert result.start[100] == pytest.approx(NOW + 40 * 600)  # when the last GPUs came free
    assert result.p90[100] == pytest.approx(NOW + 40 * 600 + 10)
    assert result.until == NOW + Bounds().horizon_s
