"""Budgets in the scheduling cycle: a hard budget keeps a job out with the exact reason until
the window rolls, a soft one stops borrowing, no budget stops a running job, and members are
warned once per threshold and window, with when the budget runs out."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from portal.cluster.models import GpuModel
from portal.core.live import tenant_event
from portal.notifications.events import topics_of
from portal.quotas.models import Budget, GpuRate
from portal.workloads import budgets
from portal.workloads.choices import HOLDING, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import UsageRecord
from tests.builders import api_client, make_queue, make_workload

DAY = timedelta(days=1)


def book(queue, gpu_hours, hours, model="H800"):
    """A finished job of `queue` that booked `gpu_hours` over `hours` until 5 minutes ago."""
    ended = timezone.now() - timedelta(minutes=5)
    gpus = round(gpu_hours / hours)
    workload = make_workload(queue, "done", gpus=gpus, model=model, state=State.SUCCEEDED)
    return UsageRecord.objects.create(
        tenant=queue.tenant, workload=workload, gpu_model=workload.gpu_model, gpus=gpus,
        started_at=ended - timedelta(hours=hours), ended_at=ended, gpu_hours=gpu_hours,
    )  # fmt: skip


def test_a_hard_budget_keeps_a_job_out_with_the_exact_reason_until_the_window_rolls(
    acme_llm, bob, operator
):
    Budget.objects.create(
        tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=2000, hard=True, window="rolling"
    )
    spent = book(acme_llm, 800, hours=2)
    job = make_workload(acme_llm, "big", gpus=16, time_limit_s=96 * 3600)
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.PENDING
    reason = (
        "budget of queue {}: 1,200 GPU-hours left in the last 30 days, this job needs up to "
        "1,536 (16 H800 GPUs for 96 h), 336 more than is left"
    )
    assert job.pending_reason == reason.format("acme/llm")  # as the operator reads it
    read = api_client(bob).get(f"/api/v1/workloads/{job.pk}/").json()["pending_reason"]
    assert read == reason.format("llm")

    # The 800 GPU-hours leave the window: the job starts.
    UsageRecord.objects.filter(pk=spent.pk).update(
        started_at=spent.started_at - 31 * DAY, ended_at=spent.ended_at - 31 * DAY
    )
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.ADMITTED


def test_a_month_budget_counts_this_calendar_month_only():
    budget = Budget(window="month")
    assert budget.window_at(datetime(2025, 3, 15, 12, tzinfo=UTC)) == (
        datetime(2025, 3, 1, tzinfo=UTC),
        datetime(2025, 4, 1, tzinfo=UTC),
    )
    assert budget.window_at(datetime(2025, 12, 31, 23, tzinfo=UTC))[1] == datetime(
        2026, 1, 1, tzinfo=UTC
    )


def test_a_job_without_a_time_limit_waits_under_a_hard_budget(acme_llm):
    Budget.objects.create(tenant=acme_llm.tenant, gpu_hours=1000, hard=True)
    job = make_workload(acme_llm, "untimed", gpus=8)
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.PENDING
    assert job.pending_reason == (
        "budget of tenant acme is hard and this job has no time limit: only jobs with one "
        "start under it (1,000 GPU-hours left this month)"
    )


@pytest.mark.parametrize("hard", [True, False], ids=["hard", "soft"])
def test_no_running_job_is_ever_stopped_by_a_budget(acme_llm, hard):
    running = make_workload(acme_llm, "running", gpus=32, time_limit_s=3600, min_gpus=8)
    scheduling_cycle()
    running.refresh_from_db()
    assert running.state in HOLDING
    Budget.objects.create(tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=10, hard=hard)
    book(acme_llm, 5000, hours=10)
    waiting = make_workload(acme_llm, "waiting", gpus=8, time_limit_s=3600)
    for _ in range(3):
        scheduling_cycle()
    running.refresh_from_db()
    assert running.state in HOLDING and running.allocations.count() == 32
    assert not running.events.filter(to_state=State.PREEMPTING).exists()
    waiting.refresh_from_db()
    assert (waiting.state == State.PENDING) == hard  # a soft budget lets it run in quota


def test_over_a_soft_budget_a_queue_stops_borrowing(cluster, acme, globex):
    nlp = make_queue(acme, "nlp", cohort="research", h800=8)
    make_queue(globex, "lender", cohort="research", h800=64)
    budget = Budget.objects.create(tenant=acme, queue=nlp, gpu_hours=100, window="rolling")
    book(nlp, 150, hours=15)
    job = make_workload(nlp, "borrower", gpus=16, time_limit_s=3600)
    scheduling_cycle()
    job.refresh_from_db()
    assert job.pending_reason == (
        "budget of queue acme/nlp is spent in the last 30 days (150 of 100 GPU-hours used): "
        "its jobs start only within their queue's nominal H800 quota, and this one would borrow"
    )
    budget.gpu_hours = 1000
    budget.save()
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.ADMITTED  # under budget again, it borrows


def test_the_engine_gets_each_budget_weighted_and_a_tenants_over_all_its_queues(acme_llm):
    acme = acme_llm.tenant
    other = make_queue(acme, "cv", h20=32)
    GpuRate.objects.create(gpu_model=GpuModel.objects.get(name="H20"), weight=0.4)
    Budget.objects.create(tenant=acme, gpu_hours=1000, hard=True, window="rolling")
    book(other, 100, hours=10, model="H20")
    book(acme_llm, 100, hours=10)
    [tenant] = budgets.engine_budgets(timezone.now())
    assert tenant.name == "tenant acme" and set(tenant.queue_ids) == {acme_llm.pk, other.pk}
    assert tenant.used == pytest.approx(100 + 0.4 * 100, rel=1e-6) and tenant.hard
    assert tenant.window == "in the last 30 days" and tenant.weight("H20") == 0.4


def test_a_budget_weighs_a_stretch_by_the_model_it_ran_on(acme_llm):
    """A job that moved from H20 to H800 spent its H20 hours at H20's weight."""
    GpuRate.objects.create(gpu_model=GpuModel.objects.get(name="H20"), weight=0.4)
    Budget.objects.create(tenant=acme_llm.tenant, gpu_hours=1000, window="rolling")
    job = make_workload(acme_llm, "moved", gpus=8, model="H20")
    UsageRecord.objects.create(
        tenant=job.tenant, workload=job, gpu_model=job.gpu_model, gpus=8,
        started_at=timezone.now() - timedelta(hours=3),
        ended_at=timezone.now() - timedelta(hours=1), gpu_hours=16,
    )  # fmt: skip
    job.gpu_model = GpuModel.objects.get(name="H800")
    job.save()
    [tenant] = budgets.engine_budgets(timezone.now())
    assert tenant.used == pytest.approx(0.4 * 16, rel=1e-6)


def test_a_month_budget_tells_the_engine_when_the_month_ends_a_rolling_one_does_not(acme_llm):
    acme = acme_llm.tenant
    Budget.objects.create(tenant=acme, queue=acme_llm, gpu_hours=10, hard=True)
    Budget.objects.create(tenant=acme, gpu_hours=1000, hard=True, window="rolling")
    now = datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    month, rolling = sorted(budgets.engine_budgets(now), key=lambda b: b.name)  # queue, tenant
    assert month.ends_at == datetime(2027, 1, 1, tzinfo=UTC).timestamp()
    assert rolling.ends_at is None
    # 8 GPUs for a 10 h limit count the hour left of December: 8 of the 10 GPU-hours.
    assert month.within(10 * 3600, now.timestamp()) == 3600


def test_members_are_warned_once_per_threshold_and_window_with_the_forecast(acme_llm):
    told = []

    def hear(sender, tenant_id, event, payload, **kwargs):
        told.append((tenant_id, event, payload))

    tenant_event.connect(hear)
    try:
        budget = Budget.objects.create(
            tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=1000, window="rolling"
        )
        book(acme_llm, 850, hours=17)  # in the last day: a burn of 850 / 24 an hour
        assert [a.threshold for a in budgets.warn()] == [80]
        assert budgets.warn() == []  # told once
        [(tenant_id, event, payload)] = told
        assert (tenant_id, event) == (acme_llm.tenant_id, "budget.threshold")
        assert topics_of(event, payload) == ["budget"]
        assert (payload["threshold"], payload["percent"], payload["scope"]) == (
            80,
            85.0,
            "queue llm",
        )
        out = datetime.fromisoformat(payload["runs_out_at"]) - timezone.now()
        assert abs(out.total_seconds() / 3600 - 150 / (850 / 24)) < 0.01
        book(acme_llm, 200, hours=20)
        assert [a.threshold for a in budgets.warn()] == [100]
        # A new window: crossing again is told again.
        budget.alerts.update(at=timezone.now() - 31 * DAY)
        assert [a.threshold for a in budgets.warn()] == [80, 100]
        assert len(told) == 3 and told[-1][2]["threshold"] == 100
    finally:
        tenant_event.disconnect(hear)


def test_members_see_a_spent_budget_on_the_dashboard_the_form_and_the_preview(
    acme_llm, alice, bob, client
):
    """Where people act: the dashboard and the submit form say what a budget past its warning
    means for their jobs, the preview says it of the queue it previews, and a tenant admin is
    pointed to where more is asked for."""
    other = make_queue(acme_llm.tenant, "other", h800=8)
    Budget.objects.create(tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=100)  # soft
    Budget.objects.create(tenant=acme_llm.tenant, queue=other, gpu_hours=100_000, thresholds=[80])
    book(acme_llm, 102, 2)
    book(other, 500, 5)  # far from its warning, and it lasts the month: nothing to say
    client.force_login(bob)
    spent = "Budget of queue llm spent: 102 of 100 GPU-hours this month."
    dashboard = client.get("/").content.decode()
    assert spent in dashboard and "borrow no more" in dashboard
    assert "Budget of queue other" not in dashboard
    assert "Ask the operators for more" not in dashboard  # a member asks no one
    form = client.get("/workloads/new/").content.decode()
    assert spent in form
    job = {"name": "next", "queue": "llm", "gpu_model": "H800", "gpus": "8", "preview": "1",
           "kind": "training", "priority": "0", "checkpoint_policy": "none"}  # fmt: skip
    preview = client.post("/workloads/new/", job).content.decode()
    assert "It would start in the next cycle" in preview and spent in preview
    quiet = client.post("/workloads/new/", {**job, "queue": "other"}).content.decode()
    assert "It would start in the next cycle" in quiet and "Budget of queue" not in quiet
    client.force_login(alice)
    assert "Ask the operators for more" in client.get("/").content.decode()


def test_a_rolling_budget_is_said_only_when_a_windows_worth_of_its_burn_overruns_it(
    acme_llm, bob, client
):
    """A rolling window always ends now: whether it holds is whether a window of the last
    day's burn fits in it, not whether it "lasts until the window ends"."""
    Budget.objects.create(
        tenant=acme_llm.tenant, queue=acme_llm, gpu_hours=1000, window="rolling", window_days=7
    )
    book(acme_llm, 24, 1)  # 24 GPU-hours in the last day: 168 a week, of 1,000
    client.force_login(bob)
    assert "Budget of queue llm" not in client.get("/").content.decode()
    book(acme_llm, 200, 2)  # 224 in the last day: 1,568 a week
    said = client.get("/").content.decode()
    assert "Budget of queue llm: 22 % used in the last 7 days" in said
    assert "At the last day&#x27;s rate it runs out in" in said


def test_a_burn_too_small_to_spend_a_budget_before_any_date_never_runs_it_out(acme_llm):
    """A share started seconds ago burns a few GPU-seconds an hour: the budget would run out
    tens of thousands of years on, past any date (the dashboard failed on it)."""
    budget = Budget.objects.create(tenant=acme_llm.tenant, gpu_hours=100_000, window="month")
    now = timezone.now()
    standing = budgets.Standing(budget, now, now, now + timedelta(days=30), 1.0, burn=1e-6)
    assert standing.runs_out_at is None and standing.lasts
