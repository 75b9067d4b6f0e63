"""The cycle's numbered steps are timed only by a clock passed in; the engine reads no clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scheduler.engine import plan
from scheduler.engine.testing import make_cluster, make_queue, make_snapshot, make_workload

ENGINE = Path(__file__).resolve().parents[3] / "scheduler" / "engine"
STEPS = [
    "1. take stock",
    "2. queue",
    "3-4. nominate and decide",
    "5. grow",
    "6. explain",
    "7. usage",
]


class FakeClock:
    """Ticks one second per reading."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return float(self.readings)


def snapshot():
    nlp = make_queue("nlp", h800=64)
    return make_snapshot(make_cluster(nodes=2), [nlp], [make_workload(1, nlp, 8)])


def test_each_numbered_step_is_timed_with_the_clock_given() -> None:
    clock = FakeClock()
    result = plan(snapshot(), now=0.0, clock=clock)
    assert list(result.timings) == STEPS
    assert all(seconds == 1.0 for seconds in result.timings.values())
    assert clock.readings == 2 * len(STEPS)


def test_without_a_clock_nothing_is_timed_and_the_plan_is_the_same() -> None:
    timed = plan(snapshot(), now=0.0, clock=FakeClock())
    untimed = plan(snapshot(), now=0.0)
    assert untimed.timings == {}
    assert (untimed.admissions, untimed.pending) == (timed.admissions, timed.pending)


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda path: path.name)
def test_the_engine_reads_no_clock_and_draws_no_random_numbers(path: Path) -> None:
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"time", "datetime", "random", "os", "socket"}
