"""Where a job's time went, over the API and on its page; the checkpoint advisor."""

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.agents.intake import record_fault
from portal.cluster.models import NodeCommand
from portal.workloads import ettr, recovery
from portal.workloads.models import Recovery, Workload, WorkloadEvent
from scheduler import faults
from tests.builders import api_client, make_workload
from tests.portal.workloads.test_recovery import running_job, saved, spare_in_pod_of


def backdate(workload, seconds):
    """Shift the job's whole history `seconds` into the past."""
    shift = timedelta(seconds=seconds)
    for event in workload.events.all():
        WorkloadEvent.objects.filter(pk=event.pk).update(at=event.at - shift)
    type(workload).objects.filter(pk=workload.pk).update(submitted_at=workload.submitted_at - shift)


@pytest.fixture
def recovered(acme_llm):
    """A job that ran an hour, lost ten minutes of work to a fault and runs again."""
    workload, (master, lost) = running_job(acme_llm, checkpoint_policy="async")
    backdate(workload, 3600)
    spare_in_pod_of(lost)
    saved(workload, master, step=50, ago_s=600)
    record_fault(lost, faults.lookup("xid-79"))
    recovery.advance(Recovery.objects.get(workload=workload).pk)
    return workload


def test_the_timeline_books_lost_work_and_recovery(recovered, bob):
    body = api_client(bob).get(f"/api/v1/workloads/{recovered.pk}/timeline/").json()
    seconds = body["seconds"]
    assert 595 <= seconds["lost"] <= 610
    assert seconds["productive"] == pytest.approx(3600 - seconds["lost"] - 3, abs=10)
    assert seconds["checkpoint_stall"] == pytest.approx(3.0)  # the periodic save's stall
    assert 0.8 < body["ettr"] < 0.85
    assert [r["outcome"] for r in body["recoveries"]] == ["spare"]
    assert body["recoveries"][0]["resume_step"] == 50
    assert body["checkpoints"][0]["step"] == 50


def test_another_tenant_sees_neither_timeline_nor_ettr(recovered, charlie):
    client = api_client(charlie)
    assert client.get(f"/api/v1/workloads/{recovered.pk}/timeline/").status_code == 404
    assert client.get("/api/v1/ettr/").json()["jobs"] == 0


def test_tenant_ettr_over_a_window(recovered, bob):
    until = timezone.now()
    body = (
        api_client(bob)
        .get(
            "/api/v1/ettr/",
            {
                "since": (until - timedelta(hours=2)).isoformat(),
                "until": until.isoformat(),
                "buckets": 4,
            },
        )
        .json()
    )
    assert body["jobs"] == 1 and 0.8 < body["ettr"] < 0.86
    assert len(body["series"]) == 4 and body["series"][0]["ettr"] is None
    assert body["goodput"] == pytest.approx(body["ettr"], abs=0.02)


def test_a_bad_window_is_refused_with_the_field(bob, acme_llm):
    now = timezone.now().isoformat()
    response = api_client(bob).get("/api/v1/ettr/", {"since": now, "until": now})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "since"


def test_the_advisor_gives_every_policy_best_first(bob, acme_llm):
    body = api_client(bob).get("/api/v1/checkpoint-advice/", {"gpus": 16384}).json()
    ettrs = [p["expected_ettr"] for p in body["policies"]]
    assert ettrs == sorted(ettrs, reverse=True)
    assert body["policies"][0]["policy"] == "triggered" and ettrs[0] >= 0.96
    assert "Llama 3" in body["source"]
    bad = api_client(bob).get("/api/v1/checkpoint-advice/", {"gpus": 0})
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "gpus"


def test_the_job_page_shows_its_time_recoveries_and_advice(recovered, bob, client):
    client.force_login(bob)
    page = client.get(f"/workloads/{recovered.pk}/").content.decode()
    assert "Effective training time" in page and "ettr-spans" in page
    assert "Restarted on hot spares" in page and "step 50" in page
    assert "Expected ETTR" in page


def test_the_fault_drill_is_for_operators_and_sends_the_fault(cluster, operator, bob, client):
    client.force_login(bob)
    assert client.get("/ops/drill/").status_code == 403  # the portal's refusal
    client.force_login(operator)
    assert client.get("/ops/drill/").status_code == 200
    response = client.post("/ops/drill/", {"node": cluster[0].pk, "code": "xid-79", "gpu_index": 2})
    assert response.status_code == 302
    command = NodeCommand.objects.get()
    assert (command.node_id, command.action, command.args) == (
        cluster[0].pk,
        "inject_fault",
        {"code": "xid-79", "gpu_index": 2},
    )
    client.post("/ops/drill/", {"node": cluster[0].pk, "code": "xid-999999"})
    assert NodeCommand.objects.count() == 1


def test_the_dashboards_series_is_each_slices_window_report(recovered, acme_llm):
    """The series splits each job's spans over the slices in one pass; each slice must be what
    a window report of that slice says, and a job still waiting for its first admission is
    in none of them."""
    from portal.workloads.ettr import series, window_report
    from portal.workloads.models import Workload
    from tests.builders import make_workload

    make_workload(acme_llm, "never-admitted", gpus=8)
    until = timezone.now()
    since = until - timedelta(hours=2)
    points = series(Workload.objects.all(), since, until, buckets=8)
    assert sum(point["jobs"] for point in points) == 5  # the recovered job's hour, 15-min slices
    for i, point in enumerate(points):
        a = since + (until - since) * i / 8
        report = window_report(Workload.objects.all(), a, a + (until - since) / 8)
        assert point["jobs"] == report["jobs"]
        assert point["ettr"] == pytest.approx(report["ettr"])
        assert point["goodput"] == pytest.approx(report["goodput"])


def test_goodput_weighs_a_share_as_its_part_of_a_gpu(acme_llm):
    """A whole GPU productive for the hour beside a share of an eighth that only started:
    productive GPU-hours are 1 of the 1.125 held (a share weighed as a whole GPU made it 1 of
    2)."""
    since = timezone.now()
    until = since + timedelta(hours=1)
    for name, fields, state in [("whole", {}, "running"), ("share", {"slices": 1}, "starting")]:
        job = make_workload(acme_llm, name, gpus=1, **fields)
        Workload.objects.filter(pk=job.pk).update(submitted_at=since)
        event = WorkloadEvent.objects.create(workload=job, from_state="pending", to_state=state)
        WorkloadEvent.objects.filter(pk=event.pk).update(at=since)
    report = ettr.window_report(Workload.objects.all(), since, until)
    assert report["goodput"] == pytest.approx(1 / 1.125)
