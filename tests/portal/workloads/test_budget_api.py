"""`/api/v1/budgets/`: operators write (audited, with what a change was before); a tenant's
members read their own with where each stands, and never another tenant's."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.core.models import AuditEvent
from portal.quotas.models import Budget
from portal.workloads.choices import State
from portal.workloads.models import UsageRecord
from tests.builders import api_client, make_queue, make_workload


@pytest.fixture
def ops(operator):
    client = APIClient()
    client.force_login(operator)
    return client


def test_operators_create_change_and_delete_budgets_audited(ops, acme_llm):
    made = ops.post(
        "/api/v1/budgets/",
        {
            "tenant": "acme",
            "queue": "llm",
            "gpu_hours": 5000,
            "hard": True,
            "thresholds": [100, 80],
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    body = made.json()
    assert (body["queue"], body["window"], body["thresholds"], body["used"]) == (
        "llm",
        "month",
        [80, 100],
        0.0,
    )
    budget = Budget.objects.get(pk=body["id"])
    changed = ops.patch(f"/api/v1/budgets/{budget.pk}/", {"gpu_hours": 6000}, format="json")
    assert changed.status_code == 200 and changed.json()["gpu_hours"] == 6000
    assert ops.delete(f"/api/v1/budgets/{budget.pk}/").status_code == 204
    events = AuditEvent.objects.filter(action__startswith="budget.").order_by("id")
    assert [e.action for e in events] == ["budget.created", "budget.changed", "budget.deleted"]
    assert events[1].data["changed"] == {"gpu_hours": [5000, 6000]}
    assert events[0].tenant == acme_llm.tenant and events[0].data["owner"] == "acme/llm"


@pytest.mark.parametrize(
    ("sent", "field", "reason"),
    [
        ({"queue": "nope"}, "queue", "Tenant acme has no queue nope."),
        ({"queue": "llm"}, "queue", "Queue llm has a budget already."),
        ({"tenant": "initech"}, "tenant", "Unknown tenant initech."),
        ({"thresholds": [0]}, "thresholds", "Ensure this value is greater than or equal to 1."),
        ({"window": "rolling", "window_days": 0}, "window_days", None),
    ],
    ids=["unknown queue", "second budget", "unknown tenant", "threshold", "no days"],
)
def test_a_budget_that_cannot_be_is_refused_with_its_field(ops, acme_llm, sent, field, reason):
    Budget.objects.create(tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=1)
    answer = ops.post(
        "/api/v1/budgets/", {"tenant": "acme", "gpu_hours": 10, **sent}, format="json"
    )
    assert answer.status_code == 400
    [error] = answer.json()["errors"]
    assert error["field"] == field and (reason is None or error["reason"] == reason)


def test_a_budget_keeps_its_tenant_and_queue(ops, acme_llm, globex):
    budget = Budget.objects.create(tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=1)
    moved = ops.patch(f"/api/v1/budgets/{budget.pk}/", {"tenant": "globex"}, format="json")
    assert moved.status_code == 400 and moved.json()["errors"][0]["field"] == "queue"


def test_members_read_their_own_budgets_and_where_they_stand_but_never_write(
    acme_llm, alice, victor, charlie
):
    budget = Budget.objects.create(
        tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=1000, window="rolling"
    )
    done = make_workload(acme_llm, "done", gpus=10, state=State.SUCCEEDED)
    now = timezone.now()
    UsageRecord.objects.create(
        tenant=done.tenant, workload=done, gpu_model=done.gpu_model, gpus=10,
        started_at=now - timedelta(hours=12), ended_at=now - timedelta(hours=2), gpu_hours=100,
    )  # fmt: skip
    [row] = api_client(victor).get("/api/v1/budgets/").json()["results"]
    assert (row["used"], row["left"], row["percent"]) == (100.0, 900.0, 10.0)
    assert row["burn_per_hour"] == pytest.approx(100 / 24, abs=1e-3)
    assert row["runs_out_at"] is not None
    refused = api_client(alice).post("/api/v1/budgets/", {"tenant": "acme", "gpu_hours": 1})
    assert refused.status_code == 403
    assert api_client(alice).delete(f"/api/v1/budgets/{budget.pk}/").status_code == 403
    theirs = api_client(charlie)
    assert theirs.get("/api/v1/budgets/").json()["results"] == []
    assert theirs.get(f"/api/v1/budgets/{budget.pk}/").status_code == 404


def test_a_list_of_budgets_costs_a_few_queries(
    cluster, acme, operator, django_assert_max_num_queries
):
    for i in range(10):
        Budget.objects.create(tenant=acme, queue=make_queue(acme, f"q{i}"), gpu_hours=100)
    client = api_client(operator)
    with django_assert_max_num_queries(12):
        assert len(client.get("/api/v1/budgets/").json()["results"]) == 10
