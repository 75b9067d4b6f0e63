"""`gpus` below 1 asks for a share of one GPU: stored in eighths, read back as asked."""

import pytest

from portal.cluster.models import GpuModel
from portal.workloads.models import Workload
from tests.builders import api_client

JOB = {"name": "notebook", "queue": "llm", "gpu_model": "H800", "gpus": 0.25}


@pytest.fixture
def h800_80gb(db):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)


@pytest.mark.parametrize(
    ("asked", "slices", "reads"),
    [
        ({"gpus": 0.25}, 2, 0.25),
        ({"gpus": 0.25, "gpu_memory_gb": 20}, 2, 0.25),
        ({"gpus": 0.25, "gpu_memory_gb": 40}, 4, 0.5),
        ({"gpus": 0.3}, 3, 0.375),
        ({"gpus": 0.5, "gpu_memory_gb": 80}, 0, 1),
        ({"gpus": 2}, 0, 2),
    ],
    ids=[
        "a quarter is two eighths",
        "20 GB of 80 is no more than a quarter",
        "40 GB of 80 makes the share a half (the larger of the two)",
        "0.3 is rounded up to 3/8",
        "all the memory is the whole GPU",
        "whole GPUs read back as integers",
    ],
)
def test_a_share_is_the_larger_of_compute_and_memory_in_eighths(
    acme_llm, bob, h800_80gb, asked, slices, reads
):
    response = api_client(bob).post("/api/v1/workloads/", {**JOB, **asked}, format="json")
    assert response.status_code == 201, response.json()
    workload = Workload.objects.get()
    assert workload.slices == slices
    assert response.json()["gpus"] == reads
    assert type(response.json()["gpus"]) is type(reads)


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            {"gpus": 1.5},
            "gpus",
            "A share of a GPU is below 1, and more than one GPU is a whole number of them (a gang "
            "takes whole GPUs): 1.5 is neither.",
        ),
        (
            {"gpus": 0.5, "min_gpus": 1},
            "min_gpus",
            "A share of a GPU runs on one GPU of one node: it has no min_gpus or max_gpus.",
        ),
        ({"gpu_memory_gb": 96}, "gpu_memory_gb", "A H800 GPU has 80 GB; 96 GB asked."),
        ({"gpus": 0}, "gpus", "Ensure this value is greater than or equal to 0.01."),
    ],
    ids=["a fraction above one", "an elastic share", "more memory than the GPU has", "nothing"],
)
def test_bad_shares_are_refused(acme_llm, bob, h800_80gb, change, field, reason):
    response = api_client(bob).post("/api/v1/workloads/", {**JOB, **change}, format="json")
    assert response.status_code == 400
    assert {"field": field, "reason": reason} in response.json()["errors"]
    assert not Workload.objects.exists()
