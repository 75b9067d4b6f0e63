"""examples/train_tiny.py for real, on the CPU, run by the process backend: periodic saves, a
save on request, then a crash, and a second run that resumes from the newest save."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

from scheduler.agent.backends import Assignment, BackendEvent
from scheduler.agent.processes import ProcessBackend, recorded_group
from scheduler.agent.simulated import SimulatedGpus

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "examples" / "train_tiny.py"
COMMAND = shlex.join(
    [sys.executable, str(SCRIPT), "--steps", "100000", "--log-every", "1", "--sleep-s", "0.005",
     "--device", "cpu", "--lr", "1e-4"]
)  # fmt: skip
LOSS = re.compile(r"^step (\d+) loss ([0-9.]+)$", re.MULTILINE)


async def wait_for(predicate, what: str, timeout_s: float = 30.0) -> None:
    """Poll until `predicate()` holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def losses(text: str) -> list[tuple[int, float]]:
    """(step, loss) for every loss line of a log."""
    return [(int(step), float(loss)) for step, loss in LOSS.findall(text)]


def mean(points: list[tuple[int, float]]) -> float:
    """The mean loss of some (step, loss) points."""
    return sum(loss for _, loss in points) / len(points)


def test_it_saves_periodically_and_on_request_and_resumes_from_the_newest_save(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
        machine = SimulatedGpus("node-a", "H100-SXM-80GB", 1, 81559)
        backend = ProcessBackend(machine, tmp_path, grace_s=5.0, poll_s=0.05, base_env=env)
        events: list[BackendEvent] = []
        backend.subscribe(events.append)

        def saves() -> list[dict]:
            return [dict(e.detail) for e in events if e.kind == "checkpoint_saved"]

        job = Assignment(1, (0,), COMMAND, {"WANKA_CHECKPOINT_INTERVAL_S": "0.5"})
        log = tmp_path / "workloads" / "1" / "output.log"

        # First run: periodic saves until it has learnt a little, then one on request.
        await backend.start(job)
        await wait_for(lambda: saves() and saves()[-1]["step"] >= 100, "100 steps saved")
        assert len(saves()) >= 2
        requested = await backend.checkpoint(1, request_id="req-1", timeout_s=15)
        assert (requested["kind"], requested["request_id"]) == ("requested", "req-1")
        assert {s["kind"] for s in saves() if s is not requested} >= {"periodic"}
        assert Path(requested["location"]).stat().st_size == requested["size_bytes"] > 0

        # A crash: no chance to save on the way out.
        os.killpg(recorded_group(log.parent)["pgid"], signal.SIGKILL)
        assert (await backend.wait(1)).exit_code == -signal.SIGKILL
        newest = max(s["step"] for s in saves())
        first_run = losses(log.read_text())

        # Second run: resumes from the newest save, not from step 0, and keeps learning.
        await backend.start(job)
        await wait_for(lambda: saves()[-1]["step"] > newest + 60, "60 more steps saved")
        await backend.stop(1)
        await backend.wait(1)
        second_text = log.read_text()
        assert f"resumed from step {newest}\n" in second_text
        second_run = losses(second_text.split(f"resumed from step {newest}\n", 1)[1])
        assert second_run[0][0] == newest + 1  # the step after the save
        start, before_crash = mean(first_run[:10]), mean(first_run[-10:])
        after_resume, later = mean(second_run[:10]), mean(second_run[-10:])
        assert before_crash < 0.8 * start  # it had learnt something
        assert after_resume < 0.8 * start  # and did not start over
        assert later < 0.9 * before_crash  # and learns on

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_an_async_save_stalls_training_only_for_its_copy_to_host_memory(tmp_path: Path) -> None:
    async def scenario() -> None:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
        machine = SimulatedGpus("node-a", "H100-SXM-80GB", 1, 81559)
        backend = ProcessBackend(machine, tmp_path, grace_s=5.0, poll_s=0.05, base_env=env)
        job = Assignment(1, (0,), COMMAND, {"WANKA_CHECKPOINT_POLICY": "async"})
        log = tmp_path / "workloads" / "1" / "output.log"
        await backend.start(job)
        await wait_for(lambda: log.exists() and losses(log.read_text()), "training to start")
        saved = await backend.checkpoint(1, request_id="c-1", timeout_s=15, kind="async")
        assert (saved["kind"], saved["request_id"], saved["status"]) == ("async", "c-1", "complete")
        assert 0 < saved["stall_s"] < saved["duration_s"]  # persisting took the rest
        assert Path(saved["location"]).stat().st_size == saved["size_bytes"] > 0
        assert "saving step" in log.read_text() and "(async)" in log.read_text()
        await backend.stop(1)

    asyncio.run(scenario())
