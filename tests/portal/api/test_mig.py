"""`mig` asks for a MIG instance of one GPU: a profile of the GPU model, checked against the
model's profiles, charged its share of the GPU."""

import pytest

from portal.cluster.models import GpuModel
from portal.workloads.cycle import build_snapshot
from portal.workloads.models import Workload
from tests.builders import api_client

JOB = {"name": "notebook", "queue": "llm", "gpu_model": "H800", "gpus": 1, "mig": "1g.10gb"}


@pytest.fixture
def h800_80gb(db):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)


@pytest.mark.parametrize(
    ("profile", "charge"),
    [("1g.10gb", 1 / 7), ("3g.40gb", 0.5), ("7g.80gb", 1.0)],
    ids=["1g.10gb is a seventh", "3g.40gb is half (its memory)", "7g.80gb is the GPU"],
)
def test_a_mig_job_is_one_gpu_charged_its_profiles_share(acme_llm, bob, h800_80gb, profile, charge):
    response = api_client(bob).post("/api/v1/workloads/", {**JOB, "mig": profile}, format="json")
    assert response.status_code == 201, response.json()
    assert (response.json()["gpus"], response.json()["mig"]) == (1, profile)  # as asked
    workload = Workload.objects.get()
    assert (workload.gpus, workload.slices, workload.mig) == (1, 0, profile)
    [seen] = build_snapshot().workloads
    assert (seen.mig, seen.share) == (profile, pytest.approx(charge))


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            {"mig": "3g.20gb"},
            "mig",
            "H800 GPUs have MIG profiles 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb; "
            "not 3g.20gb.",
        ),
        ({"gpu_model": "H20"}, "mig", "H20 GPUs have no MIG."),
        ({"gpus": 2}, "gpus", "A MIG instance is of one GPU: gpus is 1."),
        (
            {"gpu_memory_gb": 10},
            "gpu_memory_gb",
            "A MIG instance has its profile's memory: 1g.10gb has no gpu_memory_gb.",
        ),
        (
            {"max_gpus": 2},
            "min_gpus",
            "A MIG instance runs on one GPU of one node: it has no min_gpus or max_gpus.",
        ),
        (
            {"gpu_model": None, "gpu_models": ["H800", "H20"]},
            "gpu_models",
            "A MIG instance is of one GPU model: give gpu_model, not gpu_models.",
        ),
    ],
    ids=[
        "a profile the model lacks",
        "a model without MIG",
        "two GPUs",
        "memory besides the profile",
        "elastic",
        "several models",
    ],
)
def test_bad_mig_jobs_are_refused_with_the_field_and_why(
    acme_llm, bob, h800_80gb, change, field, reason
):
    asked = {k: v for k, v in {**JOB, **change}.items() if v is not None}
    response = api_client(bob).post("/api/v1/workloads/", asked, format="json")
    assert response.status_code == 400
    assert {"field": field, "reason": reason} in response.json()["errors"]
    assert not Workload.objects.exists()
