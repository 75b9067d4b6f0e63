"""Cohorts hold quota of their own and nest; the API's "could this queue ever hold it" check
and the scheduling cycle count them the same way."""

from portal.cluster.models import GpuModel
from portal.quotas.models import Cohort, CohortQuota
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from tests.builders import api_client, make_queue


def test_a_queue_borrows_the_quota_its_parent_cohort_holds(cluster, acme, bob):
    """Acme's queue of 16 H800 sits in cohort "acme", under "org", which holds 64 H800 of
    its own: a 64-GPU job is within what the tree could lend, so the API takes it and the
    cycle admits it."""
    org = Cohort.objects.create(name="org")
    Cohort.objects.create(name="acme", parent=org)
    CohortQuota.objects.create(cohort=org, gpu_model=GpuModel.objects.get(name="H800"), nominal=64)
    make_queue(acme, "llm", cohort="acme", h800=16)
    job = {"name": "big", "queue": "llm", "gpu_model": "H800", "gpus": 64}
    response = api_client(bob).post("/api/v1/workloads/", job, format="json")
    assert response.status_code == 201, response.json()
    scheduling_cycle()
    assert Workload.objects.get(name="big").state == State.ADMITTED


def test_the_parent_cohorts_limits_bind_the_api_and_the_cycle_alike(cluster, acme, bob):
    org = Cohort.objects.create(name="org")
    Cohort.objects.create(name="acme", parent=org)
    h800 = GpuModel.objects.get(name="H800")
    CohortQuota.objects.create(cohort=org, gpu_model=h800, nominal=64)
    queue = make_queue(acme, "llm", cohort="acme", h800=16)
    queue.quotas.update(borrowing_limit=32)  # 16 own + 32 borrowed at the most
    client = api_client(bob)
    job = {"name": "too-big", "queue": "llm", "gpu_model": "H800", "gpus": 56}
    refused = client.post("/api/v1/workloads/", job, format="json")
    assert refused.status_code == 400
    assert "come to 48" in refused.json()["errors"][0]["reason"]
    job.update(name="fits", gpus=48)
    assert client.post("/api/v1/workloads/", job, format="json").status_code == 201
    scheduling_cycle()
    assert Workload.objects.get(name="fits").state == State.ADMITTED


def test_the_console_edits_a_cohorts_quota(db, client, operator, cluster):
    cohort = Cohort.objects.create(name="org")
    client.force_login(operator)
    page = client.get(f"/admin/quotas/cohort/{cohort.pk}/change/").content.decode()
    assert "quotas-TOTAL_FORMS" in page  # the cohort's quotas, inline
