"""The usage page (a tenant's members their own, operators everyone's; a chart fed by
json_script, the API's CSV behind its download link) and the quota page's bars and budgets."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from portal.quotas.models import Budget
from portal.workloads.choices import Kind, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import UsageRecord
from portal.workloads.usage import series, tide
from tests.builders import make_queue, make_workload


@pytest.fixture
def used(cluster, acme, globex, bob, charlie):
    llm, train = make_queue(acme, "llm", h800=16), make_queue(globex, "train", h800=16)
    for queue, who in ((llm, bob), (train, charlie)):
        done = make_workload(queue, f"{queue.name}-done", submitted_by=who, state=State.SUCCEEDED)
        ended = timezone.now() - timedelta(hours=1)
        UsageRecord.objects.create(
            tenant=queue.tenant, workload=done, gpu_model=done.gpu_model, gpus=8,
            started_at=ended - timedelta(hours=2), ended_at=ended, gpu_hours=16,
        )  # fmt: skip
    return llm


def _chart(page: str) -> dict:
    found = re.search(r'<script id="usage-series" type="application/json">(.*?)</script>', page)
    return json.loads(found.group(1))


def test_members_see_their_tenants_usage_only(used, victor, client):
    client.force_login(victor)
    page = client.get("/usage/?window=7d&group_by=queue&group_by=user").content.decode()
    assert "llm" in page and "bob" in page and "16.0" in page
    assert "train" not in page and "charlie" not in page and "Globex" not in page
    chart = _chart(page)
    assert list(chart["series"]) == ["llm"] and sum(chart["series"]["llm"]) == pytest.approx(16)
    assert 'src="/static/js/usage.js"' in page and "<script>" not in page  # no inline script
    link = re.search(r'href="([^"]+)" id="usage-csv"', page).group(1).replace("&amp;", "&")
    assert link.startswith("/api/v1/usage/?format=csv&")
    csv = client.get(link).content.decode()
    assert csv.splitlines()[0].startswith("since,until,queue,user,") and "charlie" not in csv


def test_operators_see_every_tenant_and_others_none(used, operator, client, db):
    client.force_login(operator)
    page = client.get("/usage/").content.decode()
    assert "Acme" in page and "Globex" in page
    nobody = User.objects.create_user("nobody", password="pw-nobody")
    client.force_login(nobody)
    assert client.get("/usage/").status_code == 403


def test_a_bad_group_says_so_and_shows_the_default(used, bob, client):
    client.force_login(bob)
    page = client.get("/usage/?group_by=colour").content.decode()
    assert "Group by one or more of" in page and "llm" in page


def test_the_usage_page_costs_a_few_queries(used, bob, client, django_assert_max_num_queries):
    client.force_login(bob)
    with django_assert_max_num_queries(14):
        assert client.get("/usage/").status_code == 200


def test_the_quota_page_shows_use_against_quota_and_the_budget_with_its_forecast(
    used, acme, bob, client
):
    cv = make_queue(acme, "cv", cohort="research", h800=8)
    cv.quotas.update(guarantee=4)
    make_queue(acme, "lender", cohort="research", h800=32)
    make_workload(cv, "borrower", gpus=16)
    scheduling_cycle()
    Budget.objects.create(tenant=acme, gpu_hours=100, hard=True, window="rolling")
    client.force_login(bob)
    page = client.get("/quota/").content.decode()
    row = re.search(r'<tr data-bar="cv/H800">.*?</tr>', page, re.S).group(0)
    assert "16 in use · guarantee 4 · nominal 8 · borrowed 8 of ∞" in row
    assert row.count('class="seg ') == 3 and row.count('class="mark"') == 2
    budget = re.search(r"<tr data-budget=.*?</tr>", page, re.S).group(0)
    assert "tenant Acme" in budget and "16 of 100 GPU-hours in the last 30 days (16 %)" in budget
    assert "runs out" in budget and "GPU-hours/h (the last 24 h)" in budget


def test_the_tide_is_the_gpus_inference_and_training_held_per_quarter_hour(cluster, acme):
    queue = make_queue(acme, "mixed", h800=64)
    until = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    for kind, gpus, hours in [(Kind.INFERENCE, 8, 1), (Kind.TRAINING, 16, 2), (Kind.SFT, 8, 1)]:
        workload = make_workload(queue, kind, gpus=gpus, kind=kind)
        UsageRecord.objects.create(
            tenant=acme,
            workload=workload,
            gpu_model=workload.gpu_model,
            gpus=gpus,
            started_at=until - timedelta(hours=hours),
            ended_at=until,
            gpu_hours=gpus * hours,
        )
    found = tide(acme.workloads.all(), until - timedelta(hours=24), until)
    assert len(found["starts"]) == 96
    assert found["inference"][-5:] == [0, 8, 8, 8, 8]  # the last hour
    assert found["training"][-9:] == [0, *[16] * 4, *[24] * 4]  # training and fine-tuning


def test_a_long_stretch_spreads_over_its_slices_as_each_slice_would_count_it(cluster, acme):
    queue = make_queue(acme, "long", h800=64)
    workload = make_workload(queue, "week-long", gpus=8)
    start = datetime(2026, 11, 24, 9, 20, tzinfo=UTC)
    end = start + timedelta(days=6, hours=5, minutes=7)
    UsageRecord.objects.create(
        tenant=acme, workload=workload, gpu_model=workload.gpu_model, gpus=8,
        started_at=start, ended_at=end, gpu_hours=8 * (end - start).total_seconds() / 3600,
    )  # fmt: skip
    since, until = start - timedelta(hours=3, minutes=30), end - timedelta(hours=2)
    found = series(acme.workloads.all(), since, until, "queue", timedelta(hours=1))
    hours = found["series"]["long"]
    for slice_start, value in zip(found["starts"], hours, strict=True):
        lo, hi = max(slice_start, since, start), min(slice_start + timedelta(hours=1), until, end)
        assert value == pytest.approx(8 * max(0, (hi - lo).total_seconds()) / 3600)
    assert sum(hours) == pytest.approx(8 * (until - start).total_seconds() / 3600)
