"""The submit form asks for a MIG profile: a job of one, or the API's reason on the field."""

import pytest

from portal.cluster.models import GpuModel
from portal.workloads.models import Workload

FORM = {"name": "form", "queue": "llm", "kind": "training", "gpus": "1", "priority": "0",
        "gpu_model": "H800", "checkpoint_policy": "none"}  # fmt: skip


@pytest.fixture
def h800_80gb(db):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)


def test_the_form_submits_a_mig_job_and_clones_it(acme_llm, alice, client, h800_80gb):
    client.force_login(alice)
    client.post("/workloads/new/", {**FORM, "mig": "2g.20gb"})
    job = Workload.objects.get()
    assert (job.gpus, job.mig) == (1, "2g.20gb")
    assert "2g.20gb × H800" in client.get(f"/workloads/{job.pk}/").content.decode()
    again = client.get(f"/workloads/new/?from={job.pk}").content.decode()
    assert 'name="mig" value="2g.20gb"' in again


def test_a_profile_the_model_lacks_is_refused_on_its_field(acme_llm, alice, client, h800_80gb):
    client.force_login(alice)
    page = client.post("/workloads/new/", {**FORM, "mig": "2g.40gb"}).content.decode()
    assert "H800 GPUs have MIG profiles 1g.10gb, 1g.20gb, 2g.20gb" in page
    assert not Workload.objects.exists()


def test_without_a_profile_the_form_submits_whole_gpus(acme_llm, alice, client):
    client.force_login(alice)
    client.post("/workloads/new/", {**FORM, "mig": ""})
    assert Workload.objects.get().mig == ""
