"""Scheduled defragmentation in the simulator: small jobs that save move within their pod so
that a waiting gang of a whole node starts, on time, within the moves of an hour, never
moving a job marked not to move."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from scheduler.sim import Simulator
from scheduler.sim.__main__ import main
from scheduler.sim.defrag import Defrag, DefragMeter
from scheduler.sim.policies import wanka
from scheduler.sim.simulator import SimConfig
from scheduler.sim.state import SimulationError
from scheduler.sim.summary import summarize as summary_of
from scheduler.sim.trace import TraceError, TraceJob, read_csv, write_csv
from tests.scheduler.sim.scenarios import cluster

HOUR = 3600.0
LONG = 20 * HOUR


def trace(movable: tuple[bool, bool] = (True, True)) -> list[TraceJob]:
    """Two nodes filled by four 4-GPU jobs; one on each ends after 10 minutes, leaving a long
    job on each (8 GPUs free, no whole node) when the gang of 8 arrives."""
    keep1, keep2 = movable
    return [
        TraceJob(1, 0.0, 4, "H800", LONG, "prod", movable=keep1),
        TraceJob(2, 0.0, 4, "H800", 600.0, "prod"),
        TraceJob(3, 0.0, 4, "H800", LONG, "prod", movable=keep2),
        TraceJob(4, 0.0, 4, "H800", 600.0, "prod"),
        TraceJob(5, 900.0, 8, "H800", HOUR, "prod"),
    ]


def run(jobs: list[TraceJob], defrag: Defrag | None) -> Simulator:
    spec = cluster(leaves=1, nodes=2, queues={"prod": (16, 0)})
    config = SimConfig(failures_per_gpu_hour=0.0, defrag=defrag)
    sim = Simulator(jobs, spec, wanka(spec), config, on_event=bounded)
    sim.run()
    return sim


def bounded(sim: Simulator) -> None:
    """Fail a run that would go on for ever (these take a few hundred events)."""
    assert sim.events < 100_000, "the run does not end"


def summarize(sim: Simulator) -> dict:
    return summary_of(
        sim.recorder,
        start=sim.start,
        end=sim.end,
        capacity={"H800": 16},
        nominal={"prod": 16},
        large_gang_gpus=8,
    )


def test_the_gang_waits_for_a_long_job_without_defragmentation() -> None:
    sim = run(trace(), None)
    assert sim.recorder.defrag_moves == 0
    assert sim.jobs[5].started_at >= LONG


@pytest.mark.parametrize(
    "defrag, starts_by",
    [
        # Whenever scattered: once a long job has run the hour a job must run before it moves.
        (Defrag(), HOUR + 60),
        # Daily at 02:00 only: not before the run begins.
        (Defrag(when_scattered=False, at_s=2 * HOUR), 2 * HOUR + 60),
    ],
)
def test_defragmentation_moves_one_small_job_and_the_gang_starts_hours_sooner(
    defrag: Defrag, starts_by: float
) -> None:
    sim = run(trace(), defrag)
    started = sim.jobs[5].started_at
    assert starts_by - 120 <= started <= starts_by
    assert (sim.recorder.defrag_moves, sim.recorder.moves) == (1, 0)
    moved = [job for job in (sim.jobs[1], sim.jobs[3]) if job.resized_at is not None]
    assert len(moved) == 1 and moved[0].resized_at < started
    assert "recovering (moved within p1 to free whole nodes)" in moved[0].history
    # It restarted from its save: it ends within its restart of when it ends unmoved.
    unmoved = run(trace(), None).jobs[moved[0].id]
    assert 0 < moved[0].finished_at - unmoved.finished_at <= 120
    assert summarize(sim)["preemptions"]["defrag_moves"] == 1


def test_a_job_marked_not_to_move_stays_and_the_other_moves_to_its_node() -> None:
    sim = run(trace(movable=(False, True)), Defrag())
    assert sim.jobs[1].resized_at is None and "recovering" not in " ".join(sim.jobs[1].history)
    assert sim.jobs[3].resized_at is not None
    assert sim.jobs[5].started_at <= HOUR + 60


def test_nothing_moves_when_no_job_may_move_or_no_move_is_left() -> None:
    for jobs, defrag in (
        (trace(movable=(False, False)), Defrag()),
        (trace(), Defrag(moves_per_hour=0)),
        (trace(), Defrag(when_scattered=False, at_s=23 * HOUR)),  # the window comes too late
    ):
        sim = run(jobs, defrag)
        assert sim.recorder.defrag_moves == 0
        assert sim.jobs[1].resized_at is None and sim.jobs[3].resized_at is None
        assert sim.jobs[5].started_at >= LONG


def test_a_gang_that_can_never_start_still_ends_the_run() -> None:
    """No cycle is booked for a daily run once nothing runs that could move."""
    jobs = [*trace(), TraceJob(6, 900.0, 24, "H800", HOUR, "prod")]
    sim = run(jobs, Defrag(at_s=2 * HOUR))
    assert sim.jobs[6].started_at is None and sim.end < 2 * LONG
    assert sim.jobs[5].started_at <= HOUR + 60


def test_moves_are_counted_over_the_last_hour_per_pod() -> None:
    meter = DefragMeter(Defrag(moves_per_hour=2), ["p1", "p2"])
    meter.moved("p1", 100.0)
    meter.moved("p1", 200.0)
    assert meter.due(300.0) == (("p1", 0), ("p2", 2))
    assert meter.next_change(300.0) == 100.0 + HOUR
    assert meter.due(100.0 + HOUR) == (("p1", 1), ("p2", 2))
    daily = DefragMeter(Defrag(pods=("p2",), when_scattered=False, at_s=HOUR), ["p1", "p2"])
    assert daily.due(0.0) == () and daily.next_change(0.0) == HOUR
    assert daily.due(HOUR + 10) == (("p2", 4),) and daily.due(86400.0 + 2 * HOUR) == ()
    assert daily.next_change(HOUR + 10) == 86400.0 + HOUR


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="say when"):
        Defrag(when_scattered=False)
    with pytest.raises(ValueError, match="within a day"):
        Defrag(at_s=86400.0)
    with pytest.raises(SimulationError, match="pod"):
        run(trace(), Defrag(pods=("nowhere",)))


def test_movable_reads_and_writes_in_a_trace_csv() -> None:
    job = replace(trace()[0], movable=False)
    assert read_csv(write_csv([job]).splitlines()) == [job]
    header = "submit_s,gpus,gpu_model,duration_s,queue,movable\n"
    assert read_csv([header, "0,4,H800,60,prod,\n"])[0].movable is True
    assert read_csv([header, "0,4,H800,60,prod,no\n"])[0].movable is False
    with pytest.raises(TraceError, match="line 2, column movable: 'maybe' is neither"):
        read_csv([header, "0,4,H800,60,prod,maybe\n"])


def test_the_command_line_compares_with_and_without(tmp_path, capsys) -> None:
    (tmp_path / "jobs.csv").write_text(write_csv(trace(movable=(False, True))))
    (tmp_path / "cluster.json").write_text(
        json.dumps(
            {
                "name": "two",
                "datacenters": [
                    {
                        "name": "dc1",
                        "pods": [
                            {"name": "p1", "leaves": 1, "nodes_per_leaf": 2, "gpu_model": "H800"}
                        ],
                    }
                ],
                "queues": [{"name": "prod", "quotas": {"H800": 16}}],
            }
        )
    )
    args = ["--trace", str(tmp_path / "jobs.csv"), "--cluster", str(tmp_path / "cluster.json")]
    args += ["--policy", "wanka", "--failures-per-gpu-hour", "0", "--quiet"]
    waits = {}
    for label, extra in (("off", []), ("on", ["--defrag", "scattered,02:00"])):
        out = tmp_path / f"{label}.json"
        assert main([*args, *extra, "--json", str(out)]) == 0
        figures = json.loads(out.read_text())["policies"]["wanka"]
        waits[label] = (figures["wait_s"]["max"], figures["preemptions"])  # the gang's
    assert waits["off"][0] >= LONG - 900 and waits["off"][1]["defrag_moves"] == 0
    assert waits["on"][0] <= HOUR and waits["on"][1]["defrag_moves"] == 1
    assert main([*args, "--defrag", "at night"]) == 2
    assert main([*args, "--defrag", "scattered", "--defrag-pods", "p9"]) == 2
    assert "no pod p9" in capsys.readouterr().err
