"""Operators do through /api/v1/ what the console lets them: move nodes along their lifecycle,
keep spares, decide quota requests, change queues, cancel any tenant's job; all audited, and
none of it open to tenants."""

import pytest
from rest_framework.test import APIClient

from portal.agents.intake import record_acks
from portal.cluster.choices import Health
from portal.cluster.models import GpuModel, Node, NodeCommand
from portal.core.models import AuditEvent
from portal.quotas.models import Cohort, FamilyQuota, QueueQuota
from portal.tenancy.models import ApiToken
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from tests.builders import api_client, make_workload


@pytest.fixture
def ops(operator):
    _, key = ApiToken.issue(operator, "ops")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_operators_move_nodes_and_keep_spares_tenants_cannot(ops, bob, cluster):
    node = cluster[0]
    answer = ops.post(f"/api/v1/nodes/{node.pk}/health/", {"health": "cordoned", "reason": "fan"})
    assert (answer.status_code, answer.json()["health"]) == (200, "cordoned")
    entry = AuditEvent.objects.get(action="node.cordoned")
    assert entry.data == {"previous": "ready", "reason": "fan"}
    refused = ops.post(f"/api/v1/nodes/{node.pk}/health/", {"health": "repairing", "reason": "x"})
    assert refused.status_code == 409 and "cannot go from cordoned to repairing" in str(
        refused.json()
    )
    bad = ops.post(f"/api/v1/nodes/{node.pk}/health/", {"health": "melted"})
    assert {e["field"] for e in bad.json()["errors"]} == {"health", "reason"}
    assert ops.post(f"/api/v1/nodes/{node.pk}/spare/", {"spare": True}).json()["spare"] is True
    member = api_client(bob)
    assert (
        member.post(
            f"/api/v1/nodes/{node.pk}/health/", {"health": "ready", "reason": "x"}
        ).status_code
        == 403
    )
    node.refresh_from_db()
    assert node.health == Health.CORDONED


def test_a_repaired_node_is_ready_once_its_agent_passes_a_health_check(ops, cluster):
    passes, fails, offline = cluster[0], cluster[1], cluster[2]
    Node.objects.filter(pk=offline.pk).update(connected=False)
    for node in (passes, fails, offline):
        for health in ("down", "repairing"):
            ops.post(f"/api/v1/nodes/{node.pk}/health/", {"health": health, "reason": "psu"})
    asked = ops.post(f"/api/v1/nodes/{passes.pk}/health/", {"health": "ready", "reason": "psu"})
    assert (asked.status_code, asked.json()["health"]) == (200, "repairing")
    assert asked.json()["health_reason"] == "health check asked of its agent"
    ops.post(f"/api/v1/nodes/{fails.pk}/health/", {"health": "ready", "reason": "psu"})
    refused = ops.post(f"/api/v1/nodes/{offline.pk}/health/", {"health": "ready", "reason": "x"})
    assert refused.status_code == 409 and "agent is not connected" in str(refused.json())
    sent = {c.node_id: c for c in NodeCommand.objects.filter(action="health_check")}
    assert set(sent) == {passes.pk, fails.pk}
    record_acks([
        (passes.pk, str(sent[passes.pk].pk), True, "8 GPUs answer NVML and ran a short kernel"),
        (fails.pk, str(sent[fails.pk].pk), False, "GPU 3 has fallen off the bus"),
    ])  # fmt: skip
    assert [
        (n.health, n.health_reason) for n in Node.objects.filter(pk__in=[passes.pk, fails.pk])
    ] == [
        ("ready", "passed its health check: 8 GPUs answer NVML and ran a short kernel"),
        ("down", "failed its health check: GPU 3 has fallen off the bus"),
    ]


def test_a_node_running_a_job_is_not_kept_as_a_spare(ops, acme_llm):
    job = make_workload(acme_llm, "busy", gpus=8)
    scheduling_cycle()
    node = job.allocations.first().node
    refused = ops.post(f"/api/v1/nodes/{node.pk}/spare/", {"spare": True})
    assert refused.status_code == 409 and "cannot be kept as a spare" in str(refused.json())
    node.refresh_from_db()
    assert not node.spare
    assert not AuditEvent.objects.filter(action="node.spare").exists()


def test_operators_decide_quota_requests_once(ops, alice, acme_llm):
    filed = api_client(alice).post(
        "/api/v1/quota-requests/",
        {"queue": "llm", "gpu_model": "H800", "region": "cn-east", "count": 16, "reason": "sft"},
        format="json",
    )
    assert filed.status_code == 201, filed.json()
    pk = filed.json()["id"]
    assert api_client(alice).post(f"/api/v1/quota-requests/{pk}/approve/").status_code == 403
    before = QueueQuota.objects.get(queue=acme_llm, gpu_model__name="H800").nominal
    approved = ops.post(f"/api/v1/quota-requests/{pk}/approve/", {"note": "ok"})
    assert (approved.status_code, approved.json()["status"]) == (200, "approved")
    assert QueueQuota.objects.get(queue=acme_llm, gpu_model__name="H800").nominal == before + 16
    again = ops.post(f"/api/v1/quota-requests/{pk}/reject/")
    assert again.status_code == 409
    assert again.json()["errors"][0]["reason"].startswith("Not rejected: the request is approved")


def test_operators_change_queues_with_a_reason_an_audit_trail_and_a_cycle(
    ops, bob, acme_llm, django_capture_on_commit_callbacks
):
    Cohort.objects.create(name="research")
    change = f"/api/v1/queues/{acme_llm.pk}/change/"
    unexplained = ops.post(change, {"weight": 3}, format="json")
    assert unexplained.status_code == 400
    assert unexplained.json()["errors"][0]["field"] == "reason"
    body = {"weight": 3, "cohort": "research", "reason": "research joins the pool"}
    with django_capture_on_commit_callbacks() as callbacks:
        answer = ops.post(change, body, format="json")
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["weight"], answer.json()["cohort"]) == (3, "research")
    assert "reason" not in answer.json()
    entry = AuditEvent.objects.get(action="queue.changed")
    assert entry.data["changed"]["cohort"] == [None, "research"]
    assert entry.data["changed"]["weight"][1] == 3
    assert entry.data["reason"] == "research joins the pool"
    assert any("trigger_cycle" in repr(callback) for callback in callbacks)
    refused = ops.post(change, {"max_priority_threshold": 5, "reason": "x"}, format="json")
    assert (
        refused.status_code == 400
        and refused.json()["errors"][0]["field"] == "max_priority_threshold"
    )
    assert api_client(bob).post(change, {"weight": 9, "reason": "mine"}).status_code == 403


def test_operators_cancel_any_tenants_job(ops, acme_llm, charlie):
    job = make_workload(acme_llm, "stuck", gpus=8)
    assert api_client(charlie).post(f"/api/v1/workloads/{job.pk}/cancel/").status_code == 404
    answer = ops.post(f"/api/v1/workloads/{job.pk}/cancel/")
    assert (answer.status_code, answer.json()["state"]) == (200, State.CANCELLED)
    assert ops.post("/api/v1/workloads/", {"name": "x"}).status_code == 403  # submit: tenants only


def test_a_tenant_asks_for_a_familys_quota_and_an_approval_lets_its_jobs_run_on_any_model(
    ops, alice, acme_llm, client, operator
):
    """Hopper (H800 and H20, 128 GPUs in cn-east): a request names the family where it names a
    model; its capacity check is the family's; approved, the queue gets a family quota and its
    H20 work, which had no quota, starts."""
    GpuModel.objects.filter(name__in=["H800", "H20"]).update(family="hopper")
    ask = {"queue": "llm", "gpu_model": "hopper", "region": "cn-east", "reason": "any hopper"}
    tenant = api_client(alice)
    too_many = tenant.post("/api/v1/quota-requests/", {**ask, "count": 200}, format="json")
    assert too_many.status_code == 400
    assert "200 hopper family GPUs exceeds the 128" in str(too_many.json())
    unknown = tenant.post("/api/v1/quota-requests/", {**ask, "gpu_model": "volta", "count": 8})
    assert "Unknown GPU model or family volta." in str(unknown.json())
    filed = tenant.post("/api/v1/quota-requests/", {**ask, "count": 16}, format="json")
    assert filed.status_code == 201, filed.json()
    assert (filed.json()["gpu_model"], filed.json()["family"]) == (None, "hopper")
    client.force_login(operator)
    listed = client.get("/ops/quota-requests/").content.decode()
    # its H800 quota of 64 counts as committed to the family: it may be spent on either model
    assert "hopper family" in listed and "64 committed + 16 requested = 80 of 128 GPUs" in listed
    job = make_workload(acme_llm, "on-h20", gpus=8, model="H20")
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.PENDING
    approved = ops.post(f"/api/v1/quota-requests/{filed.json()['id']}/approve/", {"note": "ok"})
    assert approved.status_code == 200
    assert FamilyQuota.objects.get(queue=acme_llm, family="hopper").nominal == 16
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.ADMITTED
    [queue] = tenant.get("/api/v1/queues/").json()["results"]
    assert queue["family_quotas"] == [
        {"family": "hopper", "gpu_models": ["H20", "H800"], "nominal": 16, "borrowing_limit": None}
    ]  # what `wanka quota` sums the family's use over
    client.force_login(alice)
    page = client.get("/quota/").content.decode()
    assert "16 × hopper family" in page
    assert "hopper family (H20, H800): quota 16, 128 in the region" in page
