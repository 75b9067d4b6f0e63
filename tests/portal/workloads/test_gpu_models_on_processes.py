"""A job that accepts two GPU models, on real agents: submitted through the API, it starts on the
model with room, its process runs on that model's node, and it runs there to the end."""

import shlex
import sys

import pytest

from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import LogChunk, Workload
from tests.builders import api_client, make_cluster, make_queue, make_workload
from tests.portal.processes import SLEEPER, start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SAYS = shlex.join([sys.executable, "-c", "print('trained')"])


def test_a_job_accepting_two_models_runs_on_the_one_with_room(
    portal_server, celery_worker, clean_redis, tmp_path, acme, alice
):
    h800, h20 = make_cluster(
        {"dc1": {"p1": ("H800", 1), "p2": ("H20", 1)}}, nodes_per_leaf=1, connected=False
    )
    agents = [start_agent(portal_server, node, tmp_path / node.name) for node in (h800, h20)]
    try:
        queue = make_queue(acme, "llm", h800=8, h20=8)
        busy = make_workload(queue, "busy", gpus=8, command=SLEEPER, checkpoint_policy="none")
        scheduling_cycle()
        wait_until(lambda: Workload.objects.get(pk=busy.pk).state == State.RUNNING, 30, "busy")
        asked = {
            "name": "either",
            "queue": "llm",
            "gpus": 8,
            "gpu_models": ["H800", "H20"],
            "command": SAYS,
            "checkpoint_policy": "none",
        }
        response = api_client(alice).post("/api/v1/workloads/", asked, format="json")
        assert response.status_code == 201, response.json()
        job_id = response.json()["id"]
        scheduling_cycle()
        done = lambda: Workload.objects.get(pk=job_id).state == State.SUCCEEDED  # noqa: E731
        wait_until(done, 60, "the job to run to the end")
        job = Workload.objects.get(pk=job_id)
        assert job.gpu_model.name == "H20"
        [chunk] = LogChunk.objects.filter(workload=job)
        assert (chunk.node_id, chunk.text.strip()) == (h20.pk, "trained")
        placed = job.events.get(to_state=State.ADMITTED).reason
        assert placed == "placed on 1 node (GPU model H20: H800, listed before it, has no room now)"
    finally:
        for agent in agents:
            agent.stop()
