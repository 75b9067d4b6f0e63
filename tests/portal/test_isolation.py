"""Tenant Globex (Charlie) never sees Acme's objects, nor their names: one table over every
tenant-scoped model, through each door (the API: 404, never 403; the pages; the live updates),
all cut by one rule, `TenantQuerySet.visible_to`."""

import pytest
from django.test import Client

from portal.agents.intake import record_fault
from portal.cluster.models import FaultEvent
from portal.core.live import CLUSTER_GROUP, send_now
from portal.quotas.models import QuotaRequest
from portal.workloads import lifecycle
from portal.workloads.cycle import scheduling_cycle
from scheduler import faults
from tests.builders import api_client, make_queue, make_workload
from tests.portal.live_client import LiveClient


@pytest.fixture
def acme_things(acme_llm, alice, bob, cluster):
    """One object of each tenant-scoped model, each carrying a name only Acme may read."""
    workload = make_workload(acme_llm, name="secret-pretrain")
    fault = FaultEvent.objects.create(node=cluster[0], kind="xid", code=79, message="fell off")
    fault.workloads.add(workload)
    quota_request = QuotaRequest.objects.create(
        tenant=acme_llm.tenant,
        queue=acme_llm,
        gpu_model=workload.gpu_model,
        region=acme_llm.region,
        count=8,
        reason="secret-reason",
        requested_by=alice,
    )
    return {
        "workloads": workload,
        "queues": acme_llm,
        "faults": fault,
        "quota-requests": quota_request,
    }


# model: (the page that lists it, the text that names it there)
PAGES = {
    "workloads": ("/workloads/", "secret-pretrain"),
    "queues": ("/quota/", "acme-llm-secret"),
    "faults": ("/", "secret-pretrain"),
    "quota-requests": ("/quota/", "secret-reason"),
}
ENDPOINTS = list(PAGES)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_another_tenant_gets_404_on_each_object(acme_things, charlie, endpoint):
    client = api_client(charlie)
    response = client.get(f"/api/v1/{endpoint}/{acme_things[endpoint].pk}/")
    assert response.status_code == 404
    assert response.json()["errors"][0]["reason"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_another_tenant_lists_none_of_them(acme_things, charlie, endpoint):
    make_queue(charlie.membership.tenant, "globex-q", h800=8)
    body = api_client(charlie).get(f"/api/v1/{endpoint}/").json()
    ids = {item["id"] for item in body["results"]}
    assert acme_things[endpoint].pk not in ids


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_the_owner_sees_them(acme_things, bob, endpoint):
    response = api_client(bob).get(f"/api/v1/{endpoint}/{acme_things[endpoint].pk}/")
    assert response.status_code == 200


@pytest.mark.parametrize("model", ENDPOINTS)
def test_the_pages_name_them_to_their_tenant_only(acme_things, bob, charlie, model):
    acme_things["queues"].name = "acme-llm-secret"
    acme_things["queues"].save()
    page, secret = PAGES[model]
    owner, other = Client(), Client()
    owner.force_login(bob)
    other.force_login(charlie)
    assert secret in owner.get(page).content.decode()
    assert secret not in other.get(page).content.decode()


def test_another_tenants_workload_page_is_a_404(acme_things, charlie, client):
    client.force_login(charlie)
    assert client.get(f"/workloads/{acme_things['workloads'].pk}/").status_code == 404


def _cancel(things, operator):
    lifecycle.cancel(things["workloads"])


def _fault(things, operator):
    scheduling_cycle()  # the workload takes GPUs, so the fault hits it
    node = things["workloads"].allocations.first().node_id
    record_fault(node, faults.lookup("xid-79"), "fell off the bus")


def _decide(things, operator):
    things["quota-requests"].decide(operator, approve=True)


# model: (what changes it, the live event that tells its tenant)
LIVE = {
    "workloads": (_cancel, "workload.state"),
    "faults": (_fault, "fault"),
    "quota-requests": (_decide, "quota.decided"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", sorted(LIVE))
def test_live_updates_name_them_to_their_tenant_only(
    acme_things, bob, charlie, operator, portal_server, clean_redis, model
):
    browsers = []
    for user in (bob, charlie):
        browser = Client()
        browser.force_login(user)
        browsers.append(LiveClient(portal_server, browser))
    bobs, charlies = browsers
    try:
        change, event = LIVE[model]
        change(acme_things, operator)
        bobs.wait_for(event)
        send_now(CLUSTER_GROUP, {"type": "live.event", "event": "marker", "payload": {"n": 1}})
        charlies.wait_for("marker")  # by now Charlie would have had Acme's events
        heard = str(charlies.events)
        for secret in ("secret-pretrain", "secret-reason", acme_things["queues"].name):
            assert secret not in heard
        assert all(e["event"] in {"marker", "utilization"} for e in charlies.events)
    finally:
        for browser in browsers:
            browser.close()


def test_another_tenants_queue_cannot_be_named_in_a_submission(acme_things, charlie):
    response = api_client(charlie).post(
        "/api/v1/workloads/",
        {"name": "sneaky", "queue": "llm", "gpu_model": "H800", "gpus": 8},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "queue", "reason": "Your tenant has no queue llm."}
    ]


def test_nodes_are_shared_but_name_no_workload(acme_things, charlie):
    body = api_client(charlie).get("/api/v1/nodes/").json()
    assert body["count"] == 16
    assert "secret-pretrain" not in str(body)


def test_viewers_cannot_write(acme_things, victor):
    client = api_client(victor)
    submit = client.post(
        "/api/v1/workloads/",
        {"name": "x", "queue": "llm", "gpu_model": "H800", "gpus": 8},
        format="json",
    )
    cancel = client.post(f"/api/v1/workloads/{acme_things['workloads'].pk}/cancel/")
    assert submit.status_code == cancel.status_code == 403
    assert "Viewer" in submit.json()["errors"][0]["reason"]
    assert client.get("/api/v1/workloads/").status_code == 200


def test_members_cannot_request_quota_but_admins_can(acme_things, bob, alice):
    body = {"queue": "llm", "gpu_model": "H800", "region": "cn-east", "count": 8, "reason": "more"}
    assert api_client(bob).post("/api/v1/quota-requests/", body).status_code == 403
    assert api_client(alice).post("/api/v1/quota-requests/", body).status_code == 201


def test_unauthenticated_and_revoked_tokens_are_refused(acme_things, bob):
    from rest_framework.test import APIClient

    from portal.tenancy.models import ApiToken

    assert APIClient().get("/api/v1/workloads/").status_code == 401
    client = api_client(bob)
    ApiToken.objects.update(revoked=True)
    response = client.get("/api/v1/workloads/")
    assert response.status_code == 401
    assert response.json()["errors"][0]["reason"] == "Invalid or revoked API token."
