"""Two quarter-GPU jobs share one GPU on real processes: `wanka-agent --backend processes`
runs both at once on the same GPU index, without MPS (this machine has no MPS daemon: the
agent detects none and says its shares are time-sliced), and the job page says so, in both
languages. So do two replicas of a service of a quarter GPU each."""

import shlex
import sys

import pytest

from portal.services import autoscaling
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation, LogChunk, Workload
from tests.builders import api_client, make_cluster, make_queue, make_workload
from tests.portal.processes import start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SAYS_ENV = shlex.join(
    [
        sys.executable,
        "-c",
        "import os, time; e = os.environ; print('gpus', e['CUDA_VISIBLE_DEVICES'], "
        "'mps', e.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'), flush=True); time.sleep(60)",
    ]
)


def _output(workload) -> str:
    return "\n".join(c.text for c in LogChunk.objects.filter(workload=workload).order_by("id"))


def test_two_quarter_gpu_jobs_run_side_by_side_on_one_gpu(
    portal_server, celery_worker, clean_redis, tmp_path, acme, alice, client
):
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    try:
        queue = make_queue(acme, "llm", h800=1)
        jobs = [
            make_workload(queue, name, gpus=1, slices=2, command=SAYS_ENV, checkpoint_policy="none")
            for name in ("a", "b")
        ]
        scheduling_cycle()
        for job in jobs:
            wait_until(
                lambda job=job: Workload.objects.get(pk=job.pk).state == State.RUNNING,
                30,
                f"{job.name} to run",
                check=agent,
            )
        [(index, slices)] = set(Allocation.objects.values_list("gpu_index", "slices"))
        assert slices == 2
        for job in jobs:
            wait_until(lambda job=job: "gpus" in _output(job), 30, f"{job.name}'s output")
            assert f"gpus {index} mps None" in _output(job)
        client.force_login(alice)
        page = wait_until(
            lambda: (
                "time slicing: not isolated"
                in (text := client.get(f"/workloads/{jobs[0].pk}/").content.decode())
                and text
            ),
            10,
            "the job page to say how its share is held",
        )
        assert "0.25 × H800" in page
        client.cookies["django_language"] = "zh-hans"
        assert "时间片轮转：未隔离" in client.get(f"/workloads/{jobs[0].pk}/").content.decode()
        detail = api_client(alice).get(f"/api/v1/workloads/{jobs[0].pk}/").json()
        assert detail["share"] == {"mode": "time_slicing", "sm_percent": 0, "memory_mb": 0}
    finally:
        agent.stop()


def test_a_service_of_quarter_gpu_replicas_runs_two_on_one_gpu(
    portal_server, celery_worker, clean_redis, tmp_path, acme, alice
):
    """Created through the API with `gpus_per_replica: 0.25`, the service's two replicas are
    share jobs of 2/8 of a GPU each, placed on the node's one GPU and run there side by side."""
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    try:
        make_queue(acme, "infer", h800=1)
        asked = {
            "name": "chat",
            "queue": "infer",
            "gpu_model": "H800",
            "gpus_per_replica": 0.25,
            "min_replicas": 2,
            "command": SAYS_ENV,
        }
        created = api_client(alice).post("/api/v1/services/", asked, format="json")
        assert created.status_code == 201, created.json()
        assert created.json()["gpus_per_replica"] == 0.25
        autoscaling.tick()
        replicas = list(Workload.objects.filter(replica__service_id=created.json()["id"]))
        assert [(r.gpus, r.slices, r.gpu_share) for r in replicas] == [(1, 2, 0.25)] * 2
        scheduling_cycle()
        for replica in replicas:
            wait_until(lambda r=replica: "gpus" in _output(r), 30, f"{replica.name}'s output")
            assert "gpus 0 mps None" in _output(replica)
        assert sorted(Allocation.objects.values_list("gpu_index", "slices")) == [(0, 2), (0, 2)]
    finally:
        agent.stop()


def test_a_lender_takes_its_gpu_back_from_a_borrowers_share(
    portal_server, celery_worker, clean_redis, tmp_path, acme, globex
):
    """Quota lent to a share job comes back as any lent quota: Globex's half-GPU job borrows
    Acme's one GPU, Acme's job asks for it, the share is stopped on the node and requeued, and
    Acme's job runs there."""
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    try:
        lender = make_queue(acme, "llm", cohort="research", h800=1)
        borrower = make_queue(globex, "nb", cohort="research", h800=0)
        notebook = make_workload(
            borrower, "nb", gpus=1, slices=4, command=SAYS_ENV, checkpoint_policy="none"
        )
        scheduling_cycle()
        running = lambda job: Workload.objects.get(pk=job.pk).state == State.RUNNING  # noqa: E731
        wait_until(lambda: running(notebook), 30, "the share to run", check=agent)
        train = make_workload(lender, "train", gpus=1, command=SAYS_ENV, checkpoint_policy="none")
        scheduling_cycle()
        notebook.refresh_from_db()
        assert notebook.state == State.PREEMPTING
        train.refresh_from_db()
        assert train.state == State.PENDING and "preempting 1 workload" in train.pending_reason

        def train_runs() -> bool:
            scheduling_cycle()
            return running(train)

        wait_until(train_runs, 40, "the lender's job to run", check=agent)
        notebook.refresh_from_db()
        assert notebook.state == State.PENDING  # requeued, to run again when room comes back
        assert list(Allocation.objects.values_list("workload_id", "slices")) == [(train.pk, 0)]
    finally:
        agent.stop()
