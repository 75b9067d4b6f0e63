"""Budgets, GPU rates and priority factors in the operator console; budget changes audited."""

from portal.core.models import AuditEvent
from portal.quotas.models import Budget

NO_ALERTS = {
    "alerts-TOTAL_FORMS": 0,
    "alerts-INITIAL_FORMS": 0,
    "alerts-MIN_NUM_FORMS": 0,
    "alerts-MAX_NUM_FORMS": 1000,
}


def _form(tenant, queue="", **fields):
    return {
        "tenant": tenant.pk,
        "queue": queue,
        "gpu_hours": 5000,
        "window": "month",
        "window_days": 30,
        "thresholds": "[100, 80]",
        **NO_ALERTS,
        **fields,
    }


def test_operators_add_and_change_budgets_in_the_console_audited(acme_llm, operator, client):
    client.force_login(operator)
    added = client.post("/admin/quotas/budget/add/", _form(acme_llm.tenant, acme_llm.pk, hard="on"))
    assert added.status_code == 302
    budget = Budget.objects.get()
    assert budget.hard and budget.thresholds == [80, 100]
    changed = client.post(
        f"/admin/quotas/budget/{budget.pk}/change/",
        _form(acme_llm.tenant, acme_llm.pk, gpu_hours=6000),
    )
    assert changed.status_code == 302
    events = AuditEvent.objects.filter(action__startswith="budget.").order_by("id")
    assert [e.action for e in events] == ["budget.created", "budget.changed"]
    assert events[1].data["changed"] == {"gpu_hours": [5000, 6000], "hard": [True, False]}
    assert "acme/llm" in client.get("/admin/quotas/budget/").content.decode()


def test_a_budget_for_another_tenants_queue_is_refused(acme_llm, globex, operator, client):
    client.force_login(operator)
    refused = client.post("/admin/quotas/budget/add/", _form(globex, acme_llm.pk))
    assert "The queue belongs to another tenant." in refused.content.decode()
    assert not Budget.objects.exists()


def test_rates_and_priority_factors_have_pages(operator, client, db):
    client.force_login(operator)
    for page in ("gpurate", "priorityfactor"):
        assert client.get(f"/admin/quotas/{page}/").status_code == 200
