"""Budgets replayed by the simulator: metered from the GPUs jobs hold, given to the engine in
each snapshot, renewed with their windows; the same refusals as the portal's cycle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import Budget
from scheduler.sim.budgets import BudgetMeter, BudgetSpec
from scheduler.sim.runner import simulate
from scheduler.sim.simulator import SimConfig
from scheduler.sim.spec import SpecError, parse_spec
from scheduler.sim.trace import TraceJob

DAY = 86400.0
TIMED = SimConfig(failures_per_gpu_hour=0.0, cycle_s=10.0, time_limits=True)


def _spec(budget: dict, cohort: str | None = None):
    """Four 8-GPU nodes; queues a and b, 16 GPUs of quota each (in `cohort`), and `budget`."""
    pod = {"name": "p1", "leaves": 2, "nodes_per_leaf": 2, "gpu_model": "H800"}
    return parse_spec(
        {
            "datacenters": [{"name": "dc1", "pods": [pod]}],
            "cohorts": [{"name": cohort}] if cohort else [],
            "queues": [{"name": q, "cohort": cohort, "quotas": {"H800": 16}} for q in "ab"],
            "budgets": [budget],
        }
    )


def _starts(trace, spec, config=TIMED) -> dict[int, float | None]:
    outcomes = simulate(trace, spec, "wanka", config).recorder.outcomes
    return {o.id: o.first_start_s for o in sorted(outcomes, key=lambda o: o.id)}


def test_a_hard_budget_keeps_a_job_out_until_its_window_renews():
    spec = _spec(
        {"name": "queue a", "queues": ["a"], "gpu_hours": 10, "hard": True, "window_days": 1}
    )
    trace = [
        TraceJob(1, 0.0, 8, "H800", 3600.0, "a"),  # 8 GPU-hours: fits
        TraceJob(2, 10.0, 8, "H800", 3600.0, "a"),  # 8 more: 16 > 10 until the day is over
        TraceJob(3, 10.0, 8, "H800", 3600.0, "b"),  # another queue: no budget
    ]
    starts = _starts(trace, spec)
    assert starts[1] == 0.0 and starts[3] == 10.0
    assert starts[2] == DAY  # the cycle at the window's renewal
    without = _starts(trace, replace(spec, budgets=()))
    assert without[2] == 10.0


def test_a_job_the_budget_can_never_hold_waits_and_the_run_ends():
    spec = _spec({"name": "queue a", "queues": ["a"], "gpu_hours": 4, "hard": True})
    starts = _starts([TraceJob(1, 0.0, 8, "H800", 3600.0, "a")], spec)
    assert starts == {1: None}


def test_a_soft_budget_spent_stops_its_queue_borrowing():
    spec = _spec({"name": "queue a", "queues": ["a"], "gpu_hours": 1, "used": 5}, cohort="all")
    trace = [TraceJob(1, 0.0, 16, "H800", 600.0, "a"), TraceJob(2, 0.0, 8, "H800", 600.0, "a")]
    # Queue a's quota is 16: its second job would borrow b's idle quota, which its spent soft
    # budget forbids; without the budget it borrows at once.
    assert _starts(trace, spec)[2] == 600.0
    assert _starts(trace, replace(spec, budgets=()))[2] == 0.0


def test_the_meter_renews_calendar_windows_and_lets_rolling_ones_forget_an_hour_at_a_time():
    calendar = BudgetSpec(Budget("c", (1,), 100.0, used=6.0), window_s=DAY, first_ends_in_s=3600.0)
    rolling = BudgetSpec(Budget("r", (1,), 100.0, used=6.0), window_s=6 * 3600.0, rolling=True)
    meter = BudgetMeter([calendar, rolling], start=0.0)
    meter.changed(0.0, 1, "H800", 2)  # 2 GPUs from the start
    c, r = meter.budgets(1800.0)
    assert c.used == pytest.approx(7.0) and r.used == pytest.approx(6 * (1 - 1 / 12) + 1.0)
    assert meter.next_renewal(1800.0) == 3600.0
    c, r = meter.budgets(3 * 3600.0)
    assert c.used == pytest.approx(4.0)  # the first window ended at 1 h: two hours since
    assert r.used == pytest.approx(6 * 0.5 + 6.0)
    c, r = meter.budgets(10 * 3600.0)
    assert r.used == pytest.approx(12.0)  # the last six hours of 2 GPUs; the start's 6 gone
    meter.changed(10 * 3600.0, 2, "H800", 8)  # a queue of no budget
    assert meter.budgets(11 * 3600.0)[0].used == pytest.approx(c.used + 2.0)


@pytest.mark.parametrize(
    ("budget", "words"),
    [
        ({"name": "x", "queues": ["nope"], "gpu_hours": 1}, "budgets[0].queues"),
        ({"name": "x", "queues": ["a"], "gpu_hours": -1}, "budgets[0].gpu_hours"),
        ({"name": "x", "queues": ["a"], "gpu_hours": 1, "weights": {"H800": "x"}}, "weights"),
        ({"queues": ["a"], "gpu_hours": 1}, "budgets[0]: must be an object with a name"),
    ],
)
def test_a_bad_budget_in_a_spec_is_refused_naming_the_place(budget, words):
    with pytest.raises(SpecError, match=words.replace("[", r"\[").replace("]", r"\]")):
        _spec(budget)
