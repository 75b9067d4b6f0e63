"""A submission previewed: the engine's own answer on the current snapshot, nothing saved."""

from portal.workloads.models import Workload
from tests.builders import api_client, make_workload

JOB = {"name": "preview-me", "queue": "llm", "gpu_model": "H800", "gpus": 16}


def test_a_job_that_fits_would_start_and_nothing_is_saved(acme_llm, bob):
    answer = api_client(bob).post("/api/v1/workloads/preview/", JOB, format="json")
    assert answer.status_code == 200
    assert answer.json() == {
        "starts": True, "nodes": 2, "reason": "", "position": None, "models": []
    }  # fmt: skip
    assert not Workload.objects.exists()


def test_a_job_over_the_quota_would_wait_and_says_why_in_the_tenants_words(acme_llm, bob, charlie):
    make_workload(acme_llm, "first", gpus=64)
    answer = api_client(bob).post("/api/v1/workloads/preview/", JOB, format="json").json()
    assert answer["starts"] is False and answer["position"] == 1  # behind nobody still waiting
    assert "queue llm" in answer["reason"] and "acme/" not in answer["reason"]
    assert Workload.objects.count() == 1
    refused = api_client(charlie).post("/api/v1/workloads/preview/", JOB, format="json")
    assert refused.status_code == 400  # Globex has no queue llm: the submission's own check


def test_the_submit_page_previews_and_keeps_the_form(acme_llm, bob, client):
    client.force_login(bob)
    page = client.post(
        "/workloads/new/",
        {**JOB, "kind": "training", "priority": 100, "topology": "pod",
         "checkpoint_policy": "async", "preview": "1"},
    ).content.decode()  # fmt: skip
    assert "It would start in the next cycle, on 2 nodes." in page
    assert 'value="preview-me"' in page and not Workload.objects.exists()
