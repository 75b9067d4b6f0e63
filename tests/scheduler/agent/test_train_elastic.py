"""examples/train_elastic.py for real (torchrun, gloo on the CPU), run by the process backend:
4 data-parallel processes on the plan for 4 GPUs, then the same job resumed on 3 with the plan
for 3, keeping its global batch and learning on."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from scheduler import parallelism
from scheduler.agent.backends import Assignment, BackendEvent
from scheduler.agent.contract import ENV_PARALLEL_PLAN, PLAN_FILE, read_manifest
from scheduler.agent.processes import ProcessBackend
from scheduler.agent.simulated import SimulatedGpus
from tests.portal.processes import free_port
from tests.scheduler.agent.test_train_tiny import mean, wait_for

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "examples" / "train_elastic.py"
COMMAND = shlex.join(
    [sys.executable, "-m", "torch.distributed.run", str(SCRIPT), "--steps", "100000",
     "--log-every", "1", "--sleep-s", "0.01", "--lr", "1e-3"]
)  # fmt: skip
# One layer and one head: the planner can only choose data parallelism, which is what the
# example runs.
TINY = parallelism.model_spec(
    {"name": "tiny", "layers": 1, "hidden": 64, "heads": 1, "ffn": 256, "vocab": 256, "seq": 16}
)
BATCH = 30  # not divisible by 4: two replicas take 8 samples, two take 7
LOSS = re.compile(r"^step (\d+) loss ([0-9.]+) samples (\d+)$", re.MULTILINE)


def plan_for(gpus: int) -> str:
    return json.dumps(parallelism.plan(TINY, parallelism.GPUS["H800"], gpus, BATCH).as_json())


def test_a_job_shrunk_from_4_processes_to_3_resumes_with_the_same_global_batch(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
        machine = SimulatedGpus("node-a", "H800", 4, 81559)
        backend = ProcessBackend(machine, tmp_path, grace_s=5.0, poll_s=0.05, base_env=env)
        events: list[BackendEvent] = []
        backend.subscribe(events.append)
        log = tmp_path / "workloads" / "1" / "output.log"
        checkpoints = tmp_path / "workloads" / "1" / "checkpoints"

        def saves() -> list[int]:
            return [e.detail["step"] for e in events if e.kind == "checkpoint_saved"]

        def job(gpus: int, attempt: int) -> Assignment:
            variables = {ENV_PARALLEL_PLAN: plan_for(gpus), "WANKA_CHECKPOINT_INTERVAL_S": "0.3"}
            return Assignment(1, tuple(range(gpus)), COMMAND, variables, master_port=free_port(),
                              attempt=attempt)  # fmt: skip

        await backend.start(job(4, 0))
        await wait_for(lambda: saves() and saves()[-1] >= 60, "60 steps saved", 90)
        await backend.stop(1)
        await backend.wait(1)
        newest = max(saves())
        first = log.read_text()
        assert "plan DP 4, micro-batch 8, shares [8, 8, 7, 7]" in first

        await backend.start(job(3, 1))
        await wait_for(lambda: saves()[-1] > newest + 60, "60 more steps saved", 90)
        await backend.stop(1)
        await backend.wait(1)
        text = log.read_text()
        resumed = f"resumed from step {newest} (saved with DP 4, now DP 3)\n"
        assert "plan DP 3, micro-batch 8, shares [10, 10, 10]" in text and resumed in text
        before = [(int(s), float(loss), int(n)) for s, loss, n in LOSS.findall(first)]
        after = [
            (int(s), float(loss), int(n)) for s, loss, n in LOSS.findall(text.split(resumed)[1])
        ]
        assert {n for *_, n in before + after} == {BATCH}  # every step took the whole batch
        assert after[0][0] == newest + 1  # the step after the save
        start, later = (
            mean([(s, x) for s, x, _ in before[:10]]),
            mean([(s, x) for s, x, _ in after[-10:]]),
        )
        assert later < 0.8 * start  # it learns on across the resize
        plans = [e.plan["dp"] for e in read_manifest(checkpoints) if e.plan]
        assert plans[0] == 4 and plans[-1] == 3 and sorted(plans, reverse=True) == plans
        assert json.loads((checkpoints / PLAN_FILE).read_text())["dp"] == 3

    asyncio.run(asyncio.wait_for(scenario(), 240))
