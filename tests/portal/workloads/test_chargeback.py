"""Chargeback: `/api/v1/usage/` grouped by tenant, queue, GPU model or user, priced per GPU model
and priority class, as JSON or CSV; what it bills reconciles with the allocation records
(`invariants.unreconciled_usage`); a tenant never sees another's usage."""

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.cluster.models import GpuModel
from portal.quotas.models import GpuRate, PriorityFactor
from portal.workloads import invariants
from portal.workloads.choices import PriorityClass, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation, UsageRecord
from portal.workloads.usage import held_now, report
from tests.builders import api_client, make_queue, make_workload


def book(workload, gpus, hours, ago_h=1.0):
    """A stretch of `gpus` GPUs for `hours`, ending `ago_h` hours ago."""
    ended = timezone.now() - timedelta(hours=ago_h)
    return UsageRecord.objects.create(
        tenant=workload.tenant, workload=workload, gpu_model=workload.gpu_model, gpus=gpus,
        started_at=ended - timedelta(hours=hours), ended_at=ended, gpu_hours=gpus * hours,
    )  # fmt: skip


@pytest.fixture
def billed(cluster, acme, globex, alice, bob, charlie):
    """Acme: Alice's 80 H800 GPU-hours at high priority, Bob's 40 at normal and 20 H20; Globex:
    Charlie's 10. H800 costs 2.50 an hour, H20 1.00, high priority twice as much."""
    GpuRate.objects.create(gpu_model=GpuModel.objects.get(name="H800"), price="2.50")
    GpuRate.objects.create(gpu_model=GpuModel.objects.get(name="H20"), price="1.00", weight=0.4)
    PriorityFactor.objects.create(priority=PriorityClass.HIGH, factor=2)
    llm, cv = make_queue(acme, "llm", h800=64), make_queue(acme, "cv", h20=32)
    train = make_queue(globex, "train", h800=16)
    done = {"state": State.SUCCEEDED}
    book(make_workload(llm, "a", submitted_by=alice, priority=PriorityClass.HIGH, **done), 8, 10)
    book(make_workload(llm, "b", submitted_by=bob, **done), 8, 5)
    book(make_workload(cv, "c", submitted_by=bob, model="H20", **done), 4, 5)
    book(make_workload(train, "d", submitted_by=charlie, **done), 2, 5)


def rows(client, **params):
    body = client.get("/api/v1/usage/", params).json()
    return body, {tuple(r.get(k) for k in body["group_by"]): r for r in body["rows"]}


def test_usage_by_user_and_gpu_model_with_cost(billed, alice):
    body, by_user = rows(api_client(alice), group_by="user")
    assert body["group_by"] == ["user"] and body["currency"] == "USD"
    assert {k: (r["gpu_hours"], r["cost"]) for k, r in by_user.items()} == {
        ("alice",): (80.0, 400.0),
        ("bob",): (60.0, 120.0),
    }
    assert (body["gpu_hours"], body["cost"]) == (140.0, 520.0)
    _, by_model = rows(api_client(alice), group_by="gpu_model,queue")
    assert {k: r["cost"] for k, r in by_model.items()} == {
        ("H20", "cv"): 20.0,
        ("H800", "llm"): 500.0,
    }


def test_the_default_rows_keep_what_the_wanka_command_reads(billed, bob):
    body, found = rows(api_client(bob))
    assert body["group_by"] == ["tenant", "queue", "gpu_model"]
    row = found["Acme", "llm", "H800"]
    assert {"tenant", "queue", "gpu_model", "in_use", "gpu_hours", "cost"} <= set(row)
    assert row["gpu_hours"] == 120.0 and "user" not in row


def test_the_csv_parses_and_says_what_the_json_says(billed, alice):
    client = api_client(alice)
    answer = client.get("/api/v1/usage/", {"format": "csv", "group_by": "queue,user"})
    assert answer["Content-Type"].startswith("text/csv")
    assert answer["Content-Disposition"].startswith('attachment; filename="wanka-usage-')
    lines = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert list(lines[0]) == [
        "since", "until", "queue", "user", "in_use", "gpu_hours", "cost", "currency",
    ]  # fmt: skip
    _, found = rows(client, group_by="queue,user")
    assert {(r["queue"], r["user"]): float(r["cost"]) for r in lines} == {
        k: r["cost"] for k, r in found.items()
    }
    bad = client.get("/api/v1/usage/", {"format": "csv", "group_by": "colour"})
    assert bad.status_code == 400 and bad.content.decode().startswith("field,reason")


def test_a_tenant_never_sees_another_tenants_usage(billed, charlie, operator):
    for group_by in ("tenant", "user", "queue,gpu_model"):
        body, found = rows(api_client(charlie), group_by=group_by)
        text = str(body)
        assert "Acme" not in text and "alice" not in text and "llm" not in text
        assert body["gpu_hours"] == 10.0
    csv_text = api_client(charlie).get("/api/v1/usage/", {"format": "csv", "group_by": "user"})
    assert "alice" not in csv_text.content.decode() and "bob" not in csv_text.content.decode()
    ops = APIClient()
    ops.force_login(operator)
    _, everyone = rows(ops, group_by="tenant")
    assert {k: r["gpu_hours"] for k, r in everyone.items()} == {("Acme",): 140.0, ("Globex",): 10.0}


def test_an_unknown_group_is_refused(billed, bob):
    answer = api_client(bob).get("/api/v1/usage/", {"group_by": "tenant,colour"})
    assert answer.status_code == 400
    [error] = answer.json()["errors"]
    assert error["field"] == "group_by" and "tenant, queue, gpu_model, user" in error["reason"]


def test_reports_sum_to_the_allocation_records(billed, acme, bob):
    llm = acme.queues.get(name="llm")
    make_workload(llm, "running", gpus=16, submitted_by=bob)
    # Elastic, started on fewer GPUs than it asked for: it is billed for those it holds.
    make_workload(llm, "elastic", gpus=64, min_gpus=8, submitted_by=bob)
    scheduling_cycle()
    held = Allocation.objects.filter(workload__tenant=acme).count()
    assert 16 < held < 16 + 64
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Allocation.objects.update(created_at=an_hour_ago)
    acme.workloads.filter(admitted_at__isnull=False).update(admitted_at=an_hour_ago)
    # One GPU a grow added half an hour ago: counted from then.
    grown = Allocation.objects.filter(workload__tenant=acme).first()
    Allocation.objects.filter(pk=grown.pk).update(created_at=an_hour_ago + timedelta(minutes=30))
    assert not invariants.unreconciled_usage()
    now = timezone.now()
    since = now - timedelta(days=400)
    booked = sum(UsageRecord.objects.filter(tenant=acme).values_list("gpu_hours", flat=True))
    expected = booked + (held - 1) * 1.0 + 0.5  # each GPU held for the last hour, but one
    for group_by in (("tenant",), ("queue",), ("gpu_model",), ("user",), ("queue", "user")):
        found = report(acme.workloads.all(), since, now, group_by, now)
        assert sum(r["gpu_hours"] for r in found) == pytest.approx(expected, rel=1e-3)
        assert sum(r["in_use"] for r in found) == held
    assert held_now(acme.workloads.all())[0] == held


def test_the_invariant_catches_a_stretch_booked_twice_over(billed, acme):
    record = UsageRecord.objects.filter(tenant=acme).first()
    UsageRecord.objects.filter(pk=record.pk).update(gpu_hours=record.gpu_hours * 2)
    found = invariants.unreconciled_usage()
    assert found == [
        f"workload {record.workload_id} booked {record.gpu_hours * 2:.3f} GPU-hours for a "
        f"stretch its {record.gpus} GPUs held for {record.gpu_hours:.3f}"
    ]
    assert found[0] in invariants.violations()


def test_a_stretch_is_billed_at_the_model_it_ran_on_after_its_job_moved(billed, acme, bob):
    llm = make_queue(acme, "mixed", h800=8, h20=8)
    job = make_workload(llm, "moved", gpus=8, model="H20", submitted_by=bob)
    book(job, 8, 2)  # two hours on H20 ...
    job.gpu_model = GpuModel.objects.get(name="H800")  # ... then it moved to H800
    job.save()
    _, by_model = rows(api_client(bob), group_by="gpu_model,queue")
    assert by_model["H20", "mixed"]["gpu_hours"] == 16.0
    assert by_model["H20", "mixed"]["cost"] == 16.0  # at H20's 1.00, not H800's 2.50
    assert ("H800", "mixed") not in by_model
