"""Shares of a GPU in the simulator: a fractional `gpus` in a trace, jobs side by side on one
GPU at their full pace, and a whole-GPU job that waits for a shared GPU to empty."""

from __future__ import annotations

import pytest

from scheduler.sim.runner import simulate
from scheduler.sim.trace import TraceError, TraceJob, read_csv, write_csv
from tests.scheduler.sim.scenarios import cluster
from tests.scheduler.sim.test_scenarios import NO_FAULTS

HEADER = "id,submit_s,gpus,gpu_model,duration_s,queue,min_gpus"


def test_four_quarters_run_together_on_one_gpu_and_a_whole_gpu_job_waits_for_it() -> None:
    """Seven GPUs go to job 1; the four quarters share the eighth and finish together at 50;
    job 6, one whole GPU, waits for that GPU to empty (the cycle after 50)."""
    trace = [TraceJob(1, 0.0, 7, "H800", 100.0, "a")]
    trace += [TraceJob(i, 0.0, 1, "H800", 50.0, "a", slices=2) for i in range(2, 6)]
    trace += [TraceJob(6, 0.0, 1, "H800", 50.0, "a")]
    one_node = cluster(leaves=1, nodes=1, queues={"a": (8, 0)})
    outcomes = {o.id: o for o in simulate(trace, one_node, "wanka", NO_FAULTS).recorder.outcomes}
    for share in range(2, 6):
        assert (outcomes[share].wait_s, outcomes[share].jct_s) == (0.0, 50.0)
    assert outcomes[6].wait_s >= 50.0
    assert outcomes[6].status == "finished"


@pytest.mark.parametrize(
    ("gpus", "slices"),
    [("0.25", 2), ("0.3", 3), ("0.125", 1), ("0.99", 0), ("2", 0)],
    ids=["a quarter", "rounded up", "an eighth", "all but nothing is a GPU", "whole GPUs"],
)
def test_a_fractional_gpus_cell_is_a_share_in_eighths(gpus: str, slices: int) -> None:
    [job] = read_csv([HEADER, f"1,0,{gpus},H800,10,a,"])
    assert (job.gpus, job.slices) == (max(1, int(float(gpus))), slices)
    assert read_csv(write_csv([job]).splitlines()) == [job]


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ("1,0,1.5,H800,10,a,", "line 2, column gpus: 1.5 is neither a whole number nor a share"),
        ("1,0,0.5,H800,10,a,1", "line 2, column min_gpus: a share of a GPU is not elastic"),
    ],
    ids=["a fraction above one", "an elastic share"],
)
def test_a_bad_share_names_its_line_and_column(row: str, error: str) -> None:
    with pytest.raises(TraceError, match=error):
        read_csv([HEADER, row])


def test_a_shares_gpu_seconds_are_its_share_of_a_gpus() -> None:
    """ETTR and goodput weigh a share as its part of a GPU (an eighth run 100 s is 12.5 GPU
    seconds), as the portal's do."""
    trace = [TraceJob(1, 0.0, 1, "H800", 100.0, "a", slices=1)]
    one = cluster(leaves=1, nodes=1, queues={"a": (8, 0)})
    [outcome] = simulate(trace, one, "wanka", NO_FAULTS).recorder.outcomes
    assert outcome.wall_gpu_s == pytest.approx(100.0 / 8)
    assert outcome.productive_gpu_s == pytest.approx(100.0 / 8)
