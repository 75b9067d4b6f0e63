"""A job that accepts two GPU models and started on the slower one moves to the faster one when
its GPUs free up, on real processes: `wanka-agent` with the processes backend runs
`examples/train_tiny.py` (PyTorch on the CPU). It is asked for a save first, then restarts on
the faster model's node from that save as a new attempt, and its GPU-hours on each model are
booked to that model."""

import shlex
import sys

import pytest

from portal.cluster.models import NodeCommand
from portal.workloads.choices import CheckpointKind, RecoveryOutcome, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import LogChunk, UsageRecord, Workload
from tests.builders import api_client, make_cluster, make_queue, make_workload
from tests.portal.processes import start_agent, train_tiny, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

pytest.importorskip("torch")

BRIEF = shlex.join([sys.executable, "-c", "import time; time.sleep(12)"])


def _job(job_id):
    return Workload.objects.get(pk=job_id)


def _output(job_id) -> str:
    return "\n".join(c.text for c in LogChunk.objects.filter(workload_id=job_id).order_by("id"))


def test_a_job_moves_to_the_faster_model_when_it_frees(
    portal_server, celery_worker, clean_redis, tmp_path, acme, alice, settings
):
    settings.WANKA = {**settings.WANKA, "MOVE_EVERY_S": 1}
    h800, h20 = make_cluster(
        {"dc1": {"p1": ("H800", 1), "p2": ("H20", 1)}}, nodes_per_leaf=1, connected=False
    )
    agents = [start_agent(portal_server, node, tmp_path / node.name) for node in (h800, h20)]
    try:
        queue = make_queue(acme, "llm", h800=8, h20=8)
        brief = make_workload(queue, "brief", gpus=8, command=BRIEF, checkpoint_policy="none")
        scheduling_cycle()
        asked = {
            "name": "mover",
            "queue": "llm",
            "gpus": 8,
            "gpu_models": ["hopper"],
            "model": "gpt3-1.3b",
            "global_batch": 64,
            "command": train_tiny(100),
            # Routine saves an hour apart: it will not have saved when the H800s free up.
            "checkpoint_policy": "periodic",
            "checkpoint_interval_s": 3600,
        }
        response = api_client(alice).post("/api/v1/workloads/", asked, format="json")
        assert response.status_code == 201, response.json()
        job_id = response.json()["id"]
        scheduling_cycle()
        wait_until(lambda: _job(job_id).state == State.RUNNING, 30, "the job to run")
        assert _job(job_id).gpu_model.name == "H20"
        wait_until(lambda: "step 101 " in _output(job_id), 60, "training to go on")
        wait_until(lambda: _job(brief.pk).state == State.SUCCEEDED, 30, "the H800s to free")

        def moved():
            scheduling_cycle()
            return _job(job_id).attempt == 1 and _job(job_id).state == State.RUNNING

        wait_until(moved, 60, "the job to move")
        job = _job(job_id)
        assert job.gpu_model.name == "H800"
        assert set(job.allocations.values_list("node_id", flat=True)) == {h800.pk}
        asked = NodeCommand.objects.get(workload=job, action="checkpoint")
        assert asked.args["reason"].startswith("before moving: moved from H20 to H800 GPUs")
        save = job.checkpoints.get(kind=CheckpointKind.REQUESTED)
        recovery = job.recoveries.get()
        assert (recovery.outcome, recovery.resume_step) == (RecoveryOutcome.MOVED, save.step)
        wait_until(lambda: f"resumed from step {save.step}" in _output(job_id), 30, "the resume")
        booked = UsageRecord.objects.filter(workload=job).values_list("gpu_model__name", "gpus")
        assert list(booked) == [("H20", 8)]  # its hours on the H20s, booked when it left them
    finally:
        for agent in agents:
            agent.stop()
