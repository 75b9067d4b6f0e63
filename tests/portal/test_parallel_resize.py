"""A real resize of a real job, every layer real: a job submitted through the API with its model
and global batch runs as 4 torchrun processes under a `wanka-agent` (processes backend) on the
plan for 4 GPUs; a higher-priority job makes the engine shrink it to 3; it saves first, then
the new attempt gets the plan for 3, resumes from that save with the same global batch and
learns on; the job page shows both plans."""

import json
import re
import shlex
import sys

import pytest
from django.urls import reverse

from portal.cluster.models import Node
from portal.workloads.choices import PriorityClass, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from tests.builders import api_client, make_cluster, make_queue, make_workload
from tests.portal.processes import ROOT, Child, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
pytest.importorskip("torch")

SCRIPT = ROOT / "examples" / "train_elastic.py"
TINY = {"name": "tiny", "layers": 1, "hidden": 64, "heads": 1, "ffn": 256, "vocab": 256, "seq": 16}
SAMPLES = re.compile(r"^step (\d+) loss ([0-9.]+) samples (\d+)$", re.MULTILINE)


@pytest.fixture
def agent(portal_server, celery_worker, clean_redis, tmp_path):
    (node,) = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    # The job's master address is its node's name: here, one this machine resolves.
    Node.objects.filter(pk=node.pk).update(gpu_count=4, name="localhost")
    command = [sys.executable, "-m", "scheduler.agent.cli", "--backend", "processes",
               "--url", f"ws://127.0.0.1:{portal_server}/ws/agent/", "--token", node.issue_token(),
               "--hostname", "localhost", "--gpus", "4", "--gpu-model", "H800",
               "--state-dir", str(tmp_path), "--heartbeat-s", "0.2", "--grace-s", "5"]  # fmt: skip
    child = Child("agent", command, PYTHONPATH=str(ROOT))
    wait_until(lambda: Node.objects.get(pk=node.pk).connected, 30, "the agent", check=child)
    yield tmp_path
    child.stop()


def test_the_engine_shrinks_a_real_job_and_its_new_attempt_trains_on_the_new_plan(
    agent, acme, alice, client
):
    queue = make_queue(acme, "llm", h800=4)
    torchrun = [sys.executable, "-m", "torch.distributed.run", str(SCRIPT), "--steps", "100000",
                "--log-every", "1", "--sleep-s", "0.01", "--lr", "1e-3"]  # fmt: skip
    body = {"name": "elastic", "queue": "llm", "gpu_model": "H800", "gpus": 4, "min_gpus": 3,
            "model": TINY, "global_batch": 30, "command": shlex.join(torchrun),
            "checkpoint_policy": "periodic",
            "env": {"WANKA_CHECKPOINT_INTERVAL_S": "0.3"}}  # fmt: skip
    response = api_client(alice).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.json()
    job = Workload.objects.get(pk=response.json()["id"])
    log = agent / "workloads" / str(job.pk) / "output.log"

    def state():
        return Workload.objects.get(pk=job.pk).state

    scheduling_cycle()
    wait_until(lambda: state() == State.RUNNING, 60, "the job to run")
    wait_until(lambda: job.checkpoints.filter(step__gte=40).exists(), 60, "a save at step 40")
    assert "plan DP 4, micro-batch 8, shares [8, 8, 7, 7]" in log.read_text()

    urgent = make_workload(
        queue, "urgent", gpus=1, priority=PriorityClass.HIGH, command="sleep 600"
    )
    plan = scheduling_cycle()
    assert [s.workload_id for s in plan.shrinks] == [job.pk]
    resumed = re.compile(r"resumed from step (\d+) \(saved with DP 4, now DP 3\)")
    wait_until(lambda: resumed.search(log.read_text()), 60, "the job to resume on 3 processes")
    wait_until(lambda: state() == State.RUNNING, 60, "the job to run again")

    def urgent_runs() -> bool:
        scheduling_cycle()
        return Workload.objects.get(pk=urgent.pk).state == State.RUNNING

    wait_until(urgent_runs, 30, "the urgent job to run on the GPU given back")
    line = resumed.search(log.read_text())
    step = int(line.group(1))
    assert "plan DP 3, micro-batch 8, shares [10, 10, 10]" in log.read_text()

    def after_resume() -> list:
        return SAMPLES.findall(log.read_text().split(line.group(0))[1])

    wait_until(lambda: len(after_resume()) > 30, 60, "30 steps on 3 processes")
    before, after = SAMPLES.findall(log.read_text().split(line.group(0))[0]), after_resume()
    assert {int(n) for *_, n in before + after} == {30}  # the global batch, before and after
    assert int(after[0][0]) == step + 1
    assert float(after[-1][1]) < float(before[0][1])  # it learns on
    asked = job.checkpoints.get(kind="requested")  # the save asked for before the shrink
    assert job.checkpoints.filter(step=step).exists() and step >= asked.step

    job.refresh_from_db()
    records = list(job.parallel_plans.values_list("gpus", "plan"))
    assert [(gpus, plan["dp"]) for gpus, plan in records] == [(4, 4), (3, 3)]
    checkpoints = agent / "workloads" / str(job.pk) / "checkpoints"
    assert json.loads((checkpoints / "parallel_plan.json").read_text())["dp"] == 3
    client.force_login(alice)
    page = client.get(reverse("workload-detail", args=[job.pk])).content.decode()
    assert "TP1 × PP1 × DP4" in page and "TP1 × PP1 × DP3" in page
    for workload in (job, urgent):
        api_client(alice).post(f"/api/v1/workloads/{workload.pk}/cancel/")
