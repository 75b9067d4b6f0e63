"""The workload list's rows, read by `QuickRows`' plan (the queue's and GPU model's names read
as columns of the row), are exactly what DRF's own field by field serialization makes of them."""

import json
from datetime import timedelta
from zoneinfo import ZoneInfo

from django.test import RequestFactory
from django.utils import timezone
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from portal.workloads.api.serializers import WorkloadSerializer
from portal.workloads.models import Workload, with_version
from tests.builders import api_client, make_queue, make_workload


def test_rows_are_those_drf_would_write(acme_llm, bob):
    now = timezone.now()
    make_workload(acme_llm, "bare", gpus=8)
    make_workload(
        acme_llm,
        "full",
        gpus=16,
        time_limit_s=3600,
        env={"SEED": "1"},
        command="python train.py",
        pending_reason="reclaimed for workload 9: queue umbrella/prod is over its quota (4/2)",
        submitted_at=now - timedelta(hours=2),
        started_at=now - timedelta(hours=1),
        estimated_start=now + timedelta(minutes=5),
        simulated_duration_s=12.5,
    )
    make_workload(make_queue(acme_llm.tenant, "sft", h20=8), "tune", gpus=4, model="H20")
    rows = api_client(bob).get("/api/v1/workloads/").json()["results"]

    request = RequestFactory().get("/api/v1/workloads/")
    request.user = bob
    drf = WorkloadSerializer(context={"request": request})
    workloads = with_version(Workload.objects.filter(tenant=acme_llm.tenant))
    expected = [serializers.ModelSerializer.to_representation(drf, w) for w in workloads]
    assert len(rows) == 3
    assert rows == json.loads(JSONRenderer().render(expected))
    assert {(r["queue"], r["gpu_model"]) for r in rows} == {("llm", "H800"), ("sft", "H20")}
    assert "umbrella" not in str(rows)  # the reason as bob may read it


def test_dates_are_in_each_serializers_time_zone(acme_llm, bob):
    """The time zone is read once a serializer, so each request still gets its own."""
    make_workload(acme_llm, "dated", gpus=8, started_at=timezone.now())
    workloads = with_version(Workload.objects.filter(tenant=acme_llm.tenant))

    def dates():
        rows = WorkloadSerializer(workloads, many=True).data
        drf = WorkloadSerializer()
        expected = [serializers.ModelSerializer.to_representation(drf, w) for w in workloads]
        assert rows == expected
        return rows[0]["started_at"], rows[0]["submitted_at"]

    utc = dates()
    with timezone.override(ZoneInfo("Asia/Kolkata")):
        kolkata = dates()
    assert utc[0].endswith("Z") and kolkata[0].endswith("+05:30")
    assert dates() == utc
