"""A job the planner knows nothing of (no model named) is started on the GPU model where its
own earlier runs went fastest: each run's steps, timed by the fleet's calibration from the
agents' heartbeats, are kept per GPU model; the tenant's next workload of the same name that
accepts several models is placed by them, says it was measured, and its page says so too.
Another tenant's runs of a job of that name count for nothing."""

import time

import pytest
from django.urls import reverse

from portal.workloads import lifecycle
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import RunPace, Workload
from tests.builders import api_client, make_cluster, make_queue
from tests.portal.workloads.test_calibration import _report

JOB = {"name": "sweep", "queue": "llm", "gpus": 8, "command": "python sweep.py"}
PLACED = (
    "placed on 1 node (GPU model H800: the fastest of the GPU models it accepts (2.0x H20), "
    "as measured over 2 earlier runs)"
)


@pytest.fixture
def llm(acme):
    make_cluster()  # H800 in dc1 and dc2, H20 in dc2
    return make_queue(acme, "llm", h800=64, h20=32)


def _submit(user, models) -> Workload:
    response = api_client(user).post(
        "/api/v1/workloads/", {**JOB, "gpu_models": models}, format="json"
    )
    assert response.status_code == 201, response.json()
    return Workload.objects.get(pk=response.json()["id"])


def _run(redis, job: Workload, step_s: float) -> None:
    """Place the job, let its node start it and report a step every `step_s` for five
    minutes (the detector looking every 10 s), then let it exit 0."""
    scheduling_cycle()
    nodes = sorted(set(job.allocations.values_list("node_id", flat=True)))
    lifecycle.mark_started_many([(job.pk, node_id, 0) for node_id in nodes])
    _report(redis, job, nodes, step_s, seconds=300, start=time.time())
    for node_id in nodes:
        lifecycle.finish(job.pk, node_id, 0)
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED


def test_the_next_submission_starts_where_its_earlier_runs_went_fastest(
    llm, globex, clean_redis, alice, client
):
    first = _submit(alice, ["H20"])
    _run(clean_redis, first, step_s=2.0)
    second = _submit(alice, ["H800"])
    _run(clean_redis, second, step_s=1.0)
    paces = RunPace.objects.order_by("id").values_list("gpu_model__name", "gpus", "step_s")
    assert [(model, gpus, round(step_s, 1)) for model, gpus, step_s in paces] == [
        ("H20", 8, 2.0),
        ("H800", 8, 1.0),
    ]

    # Listed H20 first, with room on both: its runs say H800 goes twice as fast.
    third = _submit(alice, ["H20", "H800"])
    make_queue(globex, "llm", h800=64, h20=32)
    other = Workload.objects.create(
        tenant=globex, queue=globex.queues.get(), name="sweep", gpus=8,
        gpu_model=third.gpu_model, accepts=["H20", "H800"],
    )  # fmt: skip
    scheduling_cycle()
    third.refresh_from_db()
    other.refresh_from_db()
    assert third.gpu_model.name == "H800"
    assert third.events.get(to_state=State.ADMITTED).reason == PLACED
    assert other.gpu_model.name == "H20"  # Acme's runs are not Globex's
    assert "the first of the GPU models it accepts" in other.events.last().reason

    client.force_login(alice)
    page = client.get(reverse("workload-detail", args=[third.pk])).content.decode()
    speeds = page[page.index("data-speeds") : page.index("</dd>", page.index("data-speeds"))]
    assert "H20 ×1.0 · H800 ×2.0 (measured over 2 earlier runs of this job)" in speeds


def test_a_job_that_names_its_model_shows_the_planners_speeds(llm, alice, client):
    fields = {"gpu_models": ["H20", "H800"], "model": "gpt3-1.3b", "global_batch": 64}
    response = api_client(alice).post("/api/v1/workloads/", {**JOB, **fields}, format="json")
    client.force_login(alice)
    page = client.get(reverse("workload-detail", args=[response.json()["id"]])).content.decode()
    speeds = page[page.index("data-speeds") : page.index("</dd>", page.index("data-speeds"))]
    assert "H20 ×1.0 · H800 ×" in speeds and "(predicted by the planner)" in speeds
    assert "measured" not in speeds
