"""The whole foundation flow, every layer real: quota requested in the browser, approved in the
operator console, a 16-GPU job submitted in the browser, scheduled by a Celery cycle that beat
triggers, run by simulated agents over WebSockets, watched live, booked to the tenant."""

import pytest
from django.test import Client

from portal.cluster.models import Node
from portal.core.models import AuditEvent
from portal.quotas.models import QueueQuota, QuotaRequest
from portal.workloads.choices import State
from portal.workloads.models import UsageRecord, Workload
from tests.builders import make_cluster, make_queue
from tests.portal.live_client import LiveClient
from tests.portal.processes import start_beat, start_fleet, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fleet_and_beat(portal_server, celery_worker, clean_redis):
    make_cluster(connected=False)
    fleet, beat = start_fleet(portal_server), start_beat()
    yield
    fleet.stop()
    beat.stop()


def _browser(user):
    browser = Client()
    browser.force_login(user)
    return browser


def test_quota_request_to_finished_job(fleet_and_beat, portal_server, acme, alice, bob, operator):
    queue = make_queue(acme, "llm", h800=0)
    wait_until(
        lambda: Node.objects.filter(connected=True).count() == 16, 30, "16 agents to register"
    )

    # 1. Alice, tenant admin, asks for 16 H800 in the browser.
    page = _browser(alice).post(
        "/quota/",
        {
            "queue": "llm",
            "gpu_model": "H800",
            "region": "cn-east",
            "count": 16,
            "reason": "Llama pre-training",
        },
    )
    assert page.status_code == 302
    quota_request = QuotaRequest.objects.get()

    # 2. The operator sees the capacity check and approves in the admin console.
    console = _browser(operator)
    change = console.get(f"/admin/quotas/quotarequest/{quota_request.pk}/change/")
    assert "0 committed + 16 requested = 16 of 96 GPUs: fits" in change.content.decode()
    console.post(
        "/admin/quotas/quotarequest/", {"action": "approve", "_selected_action": [quota_request.pk]}
    )
    assert QueueQuota.objects.get(queue=queue).nominal == 16
    assert AuditEvent.objects.filter(action="quota_request.approved").exists()

    # 3. Bob watches live while he submits a 16-GPU training job in the browser.
    bobs_browser = _browser(bob)
    live = LiveClient(portal_server, bobs_browser)
    try:
        submitted = bobs_browser.post(
            "/workloads/new/",
            {
                "name": "llama-8b",
                "queue": "llm",
                "kind": "training",
                "gpu_model": "H800",
                "gpus": 16,
                "priority": 100,
                "topology": "pod",
                "checkpoint_policy": "async",
                "simulated_duration_s": 8,
            },
        )
        assert submitted.status_code == 302
        workload = Workload.objects.get(name="llama-8b")

        # 4. Live events from the submit on: pending -> admitted -> starting -> running ->
        # succeeded, each version newer than the one before.
        done = live.wait_for("workload.state", lambda p: p["state"] == State.SUCCEEDED, 60)
        assert done["id"] == workload.pk
        events = [p for p in live.of("workload.state") if p["id"] == workload.pk]
        states = [p["state"] for p in events]
        assert states == [
            State.PENDING, State.ADMITTED, State.STARTING, State.RUNNING, State.SUCCEEDED
        ]  # fmt: skip
        versions = [p["version"] for p in events]
        assert versions[0] == 0 and versions == sorted(set(versions))
        # The dashboard's utilization feed saw the job's 16 GPUs allocated and busy.
        busy = [p["point"] for p in live.of("utilization") if p["point"]["allocated"] == 16]
        assert busy and max(p["busy"] for p in busy) > 8
    finally:
        live.close()

    workload.refresh_from_db()
    assert workload.state == State.SUCCEEDED and workload.exit_code == 0
    placed = workload.events.get(to_state=State.ADMITTED)
    assert placed.reason == "placed on 2 nodes"
    assert not workload.allocations.exists()
    usage = UsageRecord.objects.get(workload=workload)
    assert usage.tenant == acme and usage.gpus == 16
    assert 16 * 7 / 3600 < usage.gpu_hours < 16 * 40 / 3600
    assert "llama-8b" in bobs_browser.get("/").content.decode()
    detail = bobs_browser.get(f"/api/v1/workloads/{workload.pk}/").json()
    assert detail["gpu_hours"] == round(usage.gpu_hours, 4)
