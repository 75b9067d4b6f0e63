"""A pod's defragmentation on real processes: `wanka-agent` with the processes backend runs
`examples/train_tiny.py` (PyTorch on the CPU) on two 8-GPU nodes of one pod. Two small jobs hold
half of each node, and a gang of one whole node waits with 8 GPUs free but scattered. With the
pod's defragmentation on, the small job that may move is asked for a save, then restarts on the
other node from that save, and the gang starts on the node it left; the job submitted from a job
file with `movable: false` (by `wanka submit`) never moves, though it is first by name."""

import json
import shlex
import subprocess
import sys

import pytest

from portal.cluster.models import NodeCommand, Pod
from portal.tenancy.models import ApiToken
from portal.workloads import defrag
from portal.workloads.choices import CheckpointKind, RecoveryOutcome, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import LogChunk, Workload
from tests.builders import api_client, make_cluster, make_queue
from tests.portal.processes import ROOT, child_env, start_agent, train_tiny, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

pytest.importorskip("torch")

BRIEF = shlex.join([sys.executable, "-c", "import time; time.sleep(8)"])
LONG = shlex.join([sys.executable, "-c", "import time; time.sleep(600)"])


def _job(job_id):
    return Workload.objects.get(pk=job_id)


def _output(job_id) -> str:
    return "\n".join(c.text for c in LogChunk.objects.filter(workload_id=job_id).order_by("id"))


def _nodes(job_id) -> set[int]:
    return set(_job(job_id).allocations.values_list("node_id", flat=True))


def _submit(client, name, gpus, command, **fields) -> int:
    asked = {"name": name, "queue": "llm", "gpu_model": "H800", "gpus": gpus, "command": command}
    response = client.post("/api/v1/workloads/", {**asked, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def _wanka_submit(port, key, job_file) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.client.cli", "submit", str(job_file), "--json",
         "--url", f"http://127.0.0.1:{port}", "--token", key],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["id"]


def test_a_small_job_moves_so_that_a_waiting_gang_gets_a_whole_node(
    portal_server, celery_worker, clean_redis, tmp_path, acme, alice, settings
):
    settings.WANKA = {**settings.WANKA, "MOVE_EVERY_S": 1}
    n1, n2 = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=2, connected=False)
    Pod.objects.update(defrag=True, defrag_when_scattered=True, defrag_moves=1)
    agents = [start_agent(portal_server, node, tmp_path / node.name) for node in (n1, n2)]
    try:
        make_queue(acme, "llm", h800=16)
        client = api_client(alice)
        # Saves only when asked: the move must ask for one first.
        saving = {"checkpoint_policy": "periodic", "checkpoint_interval_s": 3600}
        _, key = ApiToken.issue(alice, "laptop")
        job_file = tmp_path / "pinned.yaml"
        job_file.write_text(
            "name: pinned\nqueue: llm\ngpu_model: H800\ngpus: 4\nmovable: false\n"
            "checkpoint_policy: periodic\ncheckpoint_interval_s: 3600\n"
            f"command: {json.dumps(LONG)}\n"
        )
        pinned = _wanka_submit(portal_server, key, job_file)
        assert _job(pinned).movable is False
        scheduling_cycle()  # n1[0-3]
        filler = _submit(client, "filler", 4, BRIEF, checkpoint_policy="none")
        scheduling_cycle()  # n1[4-7]
        mover = _submit(client, "mover", 4, train_tiny(100), **saving)
        scheduling_cycle()  # breaks n2: n2[0-3]
        wait_until(lambda: _job(mover).state == State.RUNNING, 30, "the mover to run")
        assert _nodes(pinned) == {n1.pk} and _nodes(mover) == {n2.pk}
        wait_until(lambda: "step 101 " in _output(mover), 60, "training to go on")
        wait_until(lambda: _job(filler).state == State.SUCCEEDED, 30, "the filler to end")
        gang = _submit(client, "gang", 8, LONG, checkpoint_policy="none")

        def gang_runs():
            scheduling_cycle()
            return _job(gang).state in (State.ADMITTED, State.STARTING, State.RUNNING)

        wait_until(gang_runs, 60, "the gang to start")
        assert _nodes(gang) == {n2.pk}  # the node the mover left
        job = _job(mover)
        assert _nodes(mover) == {n1.pk} and job.attempt == 1
        asked = NodeCommand.objects.get(workload=job, action="checkpoint")
        assert asked.args["reason"].startswith("before moving: moved within pod dc1/p1 to node")
        save = job.checkpoints.get(kind=CheckpointKind.REQUESTED)
        recovery = job.recoveries.get()
        assert (recovery.outcome, recovery.resume_step) == (RecoveryOutcome.DEFRAGMENTED, save.step)
        assert recovery.lost_nodes == [n2.pk]
        wait_until(lambda: f"resumed from step {save.step}" in _output(mover), 30, "the resume")
        # Never the job marked not to move: same node, first attempt, never asked to save.
        assert _nodes(pinned) == {n1.pk} and _job(pinned).attempt == 0
        assert not NodeCommand.objects.filter(workload_id=pinned, action="checkpoint").exists()
        # The pod's one move this hour is spent.
        assert defrag.due(job.started_at) == (("dc1/p1", 0),)
        page = client.get(f"/api/v1/workloads/{pinned}/").json()
        assert page["movable"] is False
    finally:
        for agent in agents:
            agent.stop()
