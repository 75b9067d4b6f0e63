"""The conformance bench's own pieces: what the simulator predicts for the new scenarios, the
training command's pace on fewer GPUs, and which scenario a violation belongs to."""

import shlex
import subprocess

import pytest

from bench.conformance import MODELS, SCENARIOS, for_processes, owns, simulate
from bench.real_agents import train_tiny

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
MOVED = ["running", "recovering (spare)", "running", "succeeded"]


@pytest.mark.parametrize("backend", ["simulated", "processes"])
@pytest.mark.parametrize(
    ("name", "job", "history", "lowest", "highest"),
    [
        pytest.param("rare-saves", "train", MOVED, 0.75, 0.85, id="XID 79 before the first save "
                     "moves the job to the spare, from the start: 20 s lost"),
        pytest.param("never-saves", "train", ["running", "succeeded"], 1.0, 1.0,
                     id="a job that never saves runs undisturbed"),
        pytest.param("valley", "elastic", ["running", "recovering (grown)", "running",
                     "succeeded"], 0.99, 1.0, id="an elastic job started small grows into the "
                     "valley once the other job ends"),
        pytest.param("broken-spare", "train", MOVED, 0.98, 1.0,
                     id="the job moves to the second spare when the first is down"),
    ],
)  # fmt: skip
def test_new_scenarios_simulate_as_the_portal_recovers(
    backend, name, job, history, lowest, highest
):
    scenario = BY_NAME[name]
    scenario = for_processes(scenario) if backend == "processes" else scenario
    predicted = simulate(scenario, MODELS[backend])[job]
    assert predicted["history"] == history
    assert lowest <= predicted["ettr"] <= highest


def test_the_hung_job_saves_nothing_with_real_processes_and_starts_again_from_scratch():
    hang = for_processes(BY_NAME["hang"])
    assert [job.policy for job in hang.jobs] == ["none"]
    predicted = simulate(hang, MODELS["processes"])["train"]
    assert predicted["history"] == ["running", "recovering (in place)", "running", "succeeded"]
    assert predicted["ettr"] < 0.8  # 20 s of work and the hang itself are lost


@pytest.mark.parametrize(("world", "pause"), [(16, "1000e-3"), (8, "2000e-3"), (24, "666e-3")])
def test_the_training_steps_slow_in_proportion_on_fewer_gpus(world, pause):
    sh, flag, script, _python = shlex.split(train_tiny(90, 16))
    shown = subprocess.run(
        [sh, flag, script, "echo"], env={"WORLD_SIZE": str(world)}, capture_output=True, text=True
    ).stdout.split()
    assert shown[-4:] == ["--device", "cpu", "--sleep-s", pause]
    assert shown[shown.index("--steps") + 1] == "90"


def test_a_violation_belongs_to_the_scenario_whose_workload_or_node_it_names():
    hang = BY_NAME["hang"]
    assert owns(hang, [7], "workload 7 is succeeded but still holds GPUs")
    assert not owns(hang, [7], "workload 17 is succeeded but still holds GPUs")
    assert owns(hang, [], "node hang-p1-l1-n01 GPU 0: pid 12 is no workload's, running")
    assert not owns(hang, [7], "node drain-p1-l1-n01 runs workload 9, which holds none")
    assert not owns(hang, [7], "tenant 1 is billed for 8 GPUs in use, but holds 0")
