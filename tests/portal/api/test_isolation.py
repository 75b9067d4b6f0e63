"""Tenant Globex (Charlie) must never see or touch Acme's objects: 404, never 403."""

import pytest

from portal.cluster.models import FaultEvent
from portal.quotas.models import QuotaRequest
from tests.builders import api_client, make_queue, make_workload


@pytest.fixture
def acme_things(acme_llm, alice, bob, cluster):
    workload = make_workload(acme_llm, name="secret-pretrain")
    fault = FaultEvent.objects.create(node=cluster[0], kind="xid", code=79, message="fell off")
    fault.workloads.add(workload)
    quota_request = QuotaRequest.objects.create(
        tenant=acme_llm.tenant,
        queue=acme_llm,
        gpu_model=workload.gpu_model,
        region=acme_llm.region,
        count=8,
        reason="more",
        requested_by=alice,
    )
    return {
        "workloads": workload,
        "queues": acme_llm,
        "faults": fault,
        "quota-requests": quota_request,
    }


ENDPOINTS = ["workloads", "queues", "faults", "quota-requests"]


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


def test_another_tenant_cannot_cancel(acme_things, charlie):
    workload = acme_things["workloads"]
    response = api_client(charlie).post(f"/api/v1/workloads/{workload.pk}/cancel/")
    assert response.status_code == 404
    workload.refresh_from_db()
    assert workload.state == "pending"


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


def test_browser_pages_hide_other_tenants_workloads(acme_things, charlie, client):
    client.force_login(charlie)
    assert client.get(f"/workloads/{acme_things['workloads'].pk}/").status_code == 404
    assert "secret-pretrain" not in client.get("/workloads/").content.decode()


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
