"""A tenant admin asks for a larger budget from the quota page; an operator sees it beside the
quota requests with where the budget stands, and approves (the budget grows, audited, the
tenant told) or rejects with a reason. Members cannot ask; other tenants' budgets cannot be
named."""

from portal.core.live import tenant_event
from portal.core.models import AuditEvent
from portal.quotas.choices import RequestStatus
from portal.quotas.models import Budget, BudgetRequest
from tests.builders import make_queue


def test_an_admin_asks_and_an_operator_approves(acme_llm, alice, bob, operator, client):
    budget = Budget.objects.create(tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=100)
    client.force_login(alice)
    page = client.get("/quota/").content.decode()
    assert 'id="budget-form"' in page and 'value="200"' in page  # twice what it has
    too_little = client.post(
        "/quota/budget/", {"budget": budget.pk, "gpu_hours": 100, "reason": "x"}, follow=True
    )
    assert "Ask for more than the 100 GPU-hours it has now." in too_little.content.decode()
    asked = {"budget": budget.pk, "gpu_hours": 400, "reason": "the 70B run"}
    assert client.post("/quota/budget/", asked).status_code == 302
    request = BudgetRequest.objects.get()
    assert (request.requested_by, request.status) == (alice, RequestStatus.PENDING)
    assert "the 70B run" in client.get("/quota/").content.decode()

    client.force_login(operator)
    listed = client.get("/ops/quota-requests/").content.decode()
    assert f'data-budget-request="{request.pk}"' in listed and "0 of 100 GPU-hours used" in listed
    heard = []

    def hear(sender, tenant_id, event, payload, **kwargs):
        heard.append((tenant_id, event, payload["status"]))

    tenant_event.connect(hear)
    try:
        done = client.post(f"/ops/budget-requests/{request.pk}/approve/", {"note": ""})
    finally:
        tenant_event.disconnect(hear)
    assert done.status_code == 302
    budget.refresh_from_db()
    assert budget.gpu_hours == 400
    assert heard == [(acme_llm.tenant_id, "budget.decided", RequestStatus.APPROVED)]
    event = AuditEvent.objects.get(action="budget_request.approved")
    assert (event.actor, event.data["before"], event.data["asked"]) == (operator, 100, 400)
    again = client.post(f"/ops/budget-requests/{request.pk}/reject/", {"note": "late"}, follow=True)
    assert "already decided" in again.content.decode()


def test_a_rejection_needs_a_reason_and_members_and_strangers_cannot_ask(
    acme_llm, alice, bob, charlie, operator, client
):
    budget = Budget.objects.create(tenant=acme_llm.tenant, gpu_hours=100)
    theirs = Budget.objects.create(
        tenant=charlie.membership.tenant,
        queue=make_queue(charlie.membership.tenant, "vision", h800=8),
        gpu_hours=50,
    )
    client.force_login(bob)
    member = client.post("/quota/budget/", {"budget": budget.pk, "gpu_hours": 200, "reason": "x"})
    assert member.status_code == 403 and not BudgetRequest.objects.exists()
    client.force_login(alice)
    client.post("/quota/budget/", {"budget": theirs.pk, "gpu_hours": 200, "reason": "x"})
    assert not BudgetRequest.objects.exists()  # not one of its budgets: refused as unknown
    client.post("/quota/budget/", {"budget": budget.pk, "gpu_hours": 200, "reason": "more"})
    request = BudgetRequest.objects.get()
    client.force_login(operator)
    blank = client.post(f"/ops/budget-requests/{request.pk}/reject/", {"note": " "})
    assert "Say why" in blank.content.decode()
    client.post(f"/ops/budget-requests/{request.pk}/reject/", {"note": "not this month"})
    request.refresh_from_db()
    budget.refresh_from_db()
    assert (request.status, request.decision_note, budget.gpu_hours) == (
        RequestStatus.REJECTED,
        "not this month",
        100,
    )


def test_an_approval_never_lowers_a_budget_raised_since(acme_llm, alice, operator, client):
    budget = Budget.objects.create(tenant=acme_llm.tenant, gpu_hours=100)
    client.force_login(alice)
    client.post("/quota/budget/", {"budget": budget.pk, "gpu_hours": 200, "reason": "more"})
    Budget.objects.filter(pk=budget.pk).update(gpu_hours=500)  # an operator raised it meanwhile
    client.force_login(operator)
    client.post(f"/ops/budget-requests/{BudgetRequest.objects.get().pk}/approve/", {"note": ""})
    budget.refresh_from_db()
    assert budget.gpu_hours == 500
