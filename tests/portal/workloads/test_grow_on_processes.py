"""A shrunk or smaller-started elastic job grows back into GPUs that free up, on real
processes: `wanka-agent` with the processes backend runs `examples/train_tiny.py` (PyTorch on
the CPU). It has never saved, yet it grows: asked for a save first, it restarts larger from
that save as a new attempt, losing nothing."""

import shlex
import sys

import pytest

from portal.cluster.models import NodeCommand
from portal.workloads.choices import CheckpointKind, RecoveryOutcome, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import LogChunk, Workload
from tests.builders import make_cluster, make_queue, make_workload
from tests.portal.processes import start_agent, train_tiny, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

pytest.importorskip("torch")

BRIEF = shlex.join([sys.executable, "-c", "import time; time.sleep(12)"])


def _job(workload):
    return Workload.objects.get(pk=workload.pk)


def _output(workload) -> str:
    return "\n".join(c.text for c in LogChunk.objects.filter(workload=workload).order_by("id"))


def test_an_elastic_job_that_never_saved_grows_by_saving_first(
    portal_server, celery_worker, clean_redis, tmp_path, acme, settings
):
    settings.WANKA = {**settings.WANKA, "GROW_EVERY_S": 1}
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    try:
        queue = make_queue(acme, "llm", h800=8)
        brief = make_workload(queue, "brief", gpus=4, command=BRIEF, checkpoint_policy="none")
        scheduling_cycle()
        # Routine saves an hour apart: it will not have saved when the GPUs free up.
        job = make_workload(
            queue,
            "elastic",
            gpus=8,
            min_gpus=2,
            max_gpus=8,
            command=train_tiny(100),
            checkpoint_policy="periodic",
            checkpoint_interval_s=3600,
        )
        scheduling_cycle()
        wait_until(lambda: _job(job).state == State.RUNNING, 30, "the job to run")
        assert job.allocations.count() == 4  # what was free
        wait_until(lambda: "step 101 " in _output(job), 60, "training to go on")
        wait_until(lambda: _job(brief).state == State.SUCCEEDED, 30, "the valley")
        assert not job.checkpoints.exists()

        def grown():
            scheduling_cycle()
            return _job(job).attempt == 1 and _job(job).state == State.RUNNING

        wait_until(grown, 60, "the job to grow")
        assert job.allocations.count() == 8
        asked = NodeCommand.objects.get(workload=job, action="checkpoint")
        assert asked.args["reason"].startswith("before growing: grown from 4 to 8 GPUs")
        save = job.checkpoints.get(kind=CheckpointKind.REQUESTED)
        recovery = job.recoveries.get()
        assert (recovery.outcome, recovery.resume_step) == (RecoveryOutcome.GROWN, save.step)
        assert recovery.lost_s < 1
        wait_until(lambda: f"resumed from step {save.step}" in _output(job), 30, "the resumed run")
    finally:
        agent.stop()
