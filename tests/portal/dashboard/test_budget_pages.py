"""Operators set budgets and GPU prices in the portal, not Django's admin: the API's checks and
errors, thresholds typed as "80, 100", every change audited with its reason; and tenants are
refused."""

from portal.core.models import AuditEvent
from portal.quotas.models import Budget, GpuRate


def test_an_operator_creates_and_changes_a_budget(acme_llm, operator, client):
    client.force_login(operator)
    page = client.get("/ops/budgets/").content.decode()
    assert "No budget yet." in page and 'value="80, 100"' in page
    new = {"tenant": "acme", "queue": "llm", "gpu_hours": "500", "window": "month",
           "window_days": "30", "thresholds": "50, 90", "reason": "the quarter's plan"}  # fmt: skip
    assert client.post("/ops/budgets/", new).status_code == 302
    budget = Budget.objects.get()
    assert (budget.queue, budget.gpu_hours, budget.hard, budget.thresholds) == (
        acme_llm,
        500,
        False,
        [50, 90],
    )
    created = AuditEvent.objects.get(action="budget.created")
    assert (created.actor, created.data["reason"]) == (operator, "the quarter's plan")
    again = client.post("/ops/budgets/", new).content.decode()
    assert "Queue llm has a budget already." in again  # the API's own check, on the page
    bad = client.post("/ops/budgets/", {**new, "queue": "", "thresholds": "eighty"})
    assert "Whole percentages separated by commas" in bad.content.decode()

    edit = f"/ops/budgets/{budget.pk}/"
    assert 'value="50, 90"' in client.get(edit).content.decode()
    changed = {"gpu_hours": "800", "window": "month", "window_days": "30", "hard": "on",
               "thresholds": "50, 90", "reason": "a bigger run"}  # fmt: skip
    assert client.post(edit, changed).status_code == 302
    budget.refresh_from_db()
    assert (budget.gpu_hours, budget.hard) == (800, True)
    event = AuditEvent.objects.get(action="budget.changed")
    assert event.data == {
        "changed": {"gpu_hours": [500, 800], "hard": [False, True]},
        "reason": "a bigger run",
    }
    assert "Say why" in client.post(edit, {**changed, "reason": ""}).content.decode()


def test_an_operator_sets_a_gpu_models_weight_and_price(cluster, operator, client):
    client.force_login(operator)
    h20 = cluster[-1].gpu_model
    assert h20.name == "H20"
    done = client.post(
        f"/ops/budgets/rates/{h20.pk}/", {"weight": "0.4", "price": "1.2", "reason": "list price"}
    )
    assert done.status_code == 302
    rate = GpuRate.objects.get(gpu_model=h20)
    assert (rate.weight, str(rate.price)) == (0.4, "1.2000")
    event = AuditEvent.objects.get(action="gpu_rate.changed")
    assert event.data["before"] == {"weight": 1.0, "price": "0"}
    refused = client.post(
        f"/ops/budgets/rates/{h20.pk}/", {"weight": "-1", "price": "1", "reason": "x"}, follow=True
    )
    assert "H20, weight:" in refused.content.decode()
    assert GpuRate.objects.get(gpu_model=h20).weight == 0.4


def test_tenants_are_refused(acme_llm, alice, client):
    client.force_login(alice)
    assert client.get("/ops/budgets/").status_code == 403
    new = {"tenant": "acme", "gpu_hours": "9999", "window": "month", "reason": "x"}
    assert client.post("/ops/budgets/", new).status_code == 403
    assert not Budget.objects.exists()
