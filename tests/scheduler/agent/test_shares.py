"""A share job on the process backend: MPS limits where a daemon runs, time slicing where none
does. No MPS daemon can run here (no GPU): the detection is a seam (`mps=`), faked in the MPS
case, and `mps_running` is tested against a pipe directory laid out as the daemon lays it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.agent.backends import Assignment, ShareLimits
from scheduler.agent.host import mps_running
from scheduler.agent.processes import ProcessBackend
from scheduler.agent.protocol import AGENT, encode, parse
from scheduler.agent.simulated import SimulatedGpus
from tests.scheduler.agent.test_processes import DUMP_ENV, REPO, run

MPS_VARS = ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")


@pytest.mark.parametrize(
    ("mps", "seen", "limits"),
    [
        pytest.param(
            True,
            {
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20389MB",
            },
            ShareLimits(True, 25, 20389),
            id="with MPS: a quarter of the SMs and of the memory, pinned",
        ),
        pytest.param(False, {}, ShareLimits(False), id="without MPS: time slicing, no limits"),
    ],
)
def test_a_quarter_gpu_job_sees_its_gpu_and_its_limits(tmp_path: Path, mps, seen, limits) -> None:
    async def scenario() -> None:
        machine = SimulatedGpus("node-a", "H100-SXM-80GB", 4, 81559, seed=1)
        base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO),
                "CUDA_MPS_PIPE_DIRECTORY": "/run/mps"}  # fmt: skip
        backend = ProcessBackend(machine, tmp_path / "state", base_env=base, mps=lambda: mps)
        await backend.start(Assignment(7, (2,), DUMP_ENV, slices=2))
        assert backend.share(7) == limits
        assert (await backend.wait(7)).exit_code == 0
        env = json.loads((tmp_path / "state" / "workloads" / "7" / "seen.json").read_text())["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == "2"
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps"  # it finds the daemon the agent saw
        assert {k: env[k] for k in MPS_VARS if k in env} == seen

    run(scenario())


def test_a_whole_gpu_job_has_no_share_and_no_mps_variables(tmp_path: Path) -> None:
    async def scenario() -> None:
        machine = SimulatedGpus("node-a", "H100-SXM-80GB", 4, 81559, seed=1)
        backend = ProcessBackend(machine, tmp_path / "state", mps=lambda: True)
        await backend.start(Assignment(8, (0,), DUMP_ENV))
        assert backend.share(8) is None
        assert (await backend.wait(8)).exit_code == 0
        env = json.loads((tmp_path / "state" / "workloads" / "8" / "seen.json").read_text())["env"]
        assert not set(MPS_VARS) & set(env)

    run(scenario())


def test_the_share_record_is_on_the_wire() -> None:
    report = {"workload_id": 7, "state": "running", "exit_code": None, "step": 0}
    message = encode("heartbeat", generation=1, gpus=[], workloads=[
        report | {"share": ShareLimits(True, 25, 20389).message()}
    ])  # fmt: skip
    assert parse(message, AGENT)["workloads"][0]["share"] == {
        "mode": "mps",
        "sm_percent": 25,
        "memory_mb": 20389,
    }


def test_mps_is_seen_only_where_its_daemon_lives(tmp_path: Path) -> None:
    environ = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}
    assert not mps_running(environ)  # no daemon ever ran
    (tmp_path / "control").touch()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "nvidia-cuda-mps-control.pid").write_text(f"{alive.pid}\n")
        assert mps_running(environ)
    finally:
        alive.kill()
        alive.wait()
    assert not mps_running(environ)  # a daemon that died leaves its files behind
