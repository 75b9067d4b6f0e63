"""`/api/v1/usage/`: GPUs in use and GPU-hours over a window, per queue and GPU model; each
tenant its own, operators every tenant's."""

from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import UsageRecord
from tests.builders import api_client, make_queue, make_workload


def test_usage_counts_held_gpus_and_prorates_booked_stretches(cluster, acme, globex, bob, operator):
    acme_q, globex_q = make_queue(acme, "llm", h800=16), make_queue(globex, "train", h800=16)
    running = make_workload(acme_q, "run", gpus=8)
    make_workload(globex_q, "theirs", gpus=8)
    scheduling_cycle()
    now = timezone.now()
    # 10 GPU-hours over 10 hours ending 2 hours ago: the last 5 hours of a window ending now
    # hold 3 of them.
    UsageRecord.objects.create(
        tenant=acme, workload=running, gpu_model=running.gpu_model, gpus=1,
        started_at=now - timedelta(hours=12), ended_at=now - timedelta(hours=2), gpu_hours=10,
    )  # fmt: skip
    since = (now - timedelta(hours=5)).isoformat()
    body = api_client(bob).get("/api/v1/usage/", {"since": since}).json()
    [row] = body["rows"]  # Globex's queue is not there, nor named
    assert (row["tenant"], row["queue"], row["gpu_model"], row["in_use"]) == (
        "Acme",
        "llm",
        "H800",
        8,
    )
    assert abs(row["gpu_hours"] - 3) < 0.01  # plus seconds of the 8 GPUs held now
    assert "train" not in str(body)
    ops = APIClient()
    ops.force_login(operator)
    rows = ops.get("/api/v1/usage/", {"since": since}).json()["rows"]
    assert {(r["tenant"], r["queue"], r["in_use"]) for r in rows} == {
        ("Acme", "llm", 8),
        ("Globex", "train", 8),
    }
    refused = api_client(bob).get("/api/v1/usage/", {"since": now.isoformat(), "until": since})
    assert refused.status_code == 400
    assert refused.json()["errors"] == [{"field": "since", "reason": "Must be before until."}]
