"""`Idempotency-Key`: a retry with the same key gets the first answer and creates nothing."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from portal.core.models import IdempotencyKey
from portal.quotas.models import Budget, QuotaRequest
from portal.services.models import Service
from portal.workloads.models import Workload
from tests.builders import api_client

JOB = {"name": "pretrain", "queue": "llm", "gpu_model": "H800", "gpus": 16}
QUOTA = {"queue": "llm", "gpu_model": "H800", "region": "cn-east", "count": 16, "reason": "more"}
SERVICE = {
    "name": "chat",
    "queue": "llm",
    "gpu_model": "H800",
    "gpus_per_replica": 8,
    "min_replicas": 1,
}
BUDGET = {"tenant": "acme", "queue": "llm", "gpu_hours": 5000}
CREATES = [
    ("/api/v1/workloads/", JOB, Workload),
    ("/api/v1/quota-requests/", QUOTA, QuotaRequest),
    ("/api/v1/services/", SERVICE, Service),
    ("/api/v1/budgets/", BUDGET, Budget),
]


def post(client, path, body, key):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.parametrize(
    ("path", "body", "model"),
    CREATES,
    ids=["a workload", "a quota request", "a service", "a budget"],
)
def test_a_retry_with_the_same_key_gets_the_first_answer_and_creates_nothing(
    acme_llm, alice, operator, path, body, model
):
    if model is Budget:  # operators set budgets
        client = APIClient()
        client.force_login(operator)
    else:
        client = api_client(alice)
    first, retry = post(client, path, body, "k-1"), post(client, path, body, "k-1")
    assert first.status_code == retry.status_code == 201, first.json()
    assert retry.json() == first.json()
    assert retry["Idempotent-Replayed"] == "true"
    assert model.objects.count() == 1
    if model in (Workload, QuotaRequest):  # the others are one per name or queue
        assert post(client, path, body, "k-2").status_code == 201  # a new key creates again
        assert model.objects.count() == 2


def test_the_same_key_on_a_different_request_is_refused_with_the_reason(acme_llm, bob):
    client = api_client(bob)
    assert post(client, "/api/v1/workloads/", JOB, "k").status_code == 201
    refused = post(client, "/api/v1/workloads/", {**JOB, "gpus": 8}, "k")
    assert refused.status_code == 422
    [error] = refused.json()["errors"]
    assert error["field"] == "Idempotency-Key" and "different request" in error["reason"]
    assert Workload.objects.count() == 1


def test_keys_are_each_users_own(acme_llm, alice, bob):
    assert post(api_client(alice), "/api/v1/workloads/", JOB, "k").status_code == 201
    assert post(api_client(bob), "/api/v1/workloads/", JOB, "k").status_code == 201
    assert Workload.objects.count() == 2


def test_a_refused_request_stores_nothing_so_the_corrected_one_may_reuse_its_key(acme_llm, bob):
    client = api_client(bob)
    assert post(client, "/api/v1/workloads/", {**JOB, "gpus": 0}, "k").status_code == 400
    assert post(client, "/api/v1/workloads/", JOB, "k").status_code == 201
    assert Workload.objects.count() == 1


def test_keys_older_than_a_day_are_forgotten(acme_llm, bob):
    client = api_client(bob)
    post(client, "/api/v1/workloads/", JOB, "old")
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=25))
    assert post(client, "/api/v1/workloads/", JOB, "new").status_code == 201
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]
    assert post(client, "/api/v1/workloads/", JOB, "old").status_code == 201
    assert Workload.objects.count() == 3


@pytest.mark.parametrize("key", ["", "x" * 256, "naïve"], ids=["empty", "too long", "not ascii"])
def test_a_malformed_key_is_a_400(acme_llm, bob, key):
    response = post(api_client(bob), "/api/v1/workloads/", JOB, key)
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "Idempotency-Key"
    assert not Workload.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_requests_with_one_key_create_one_workload(acme_llm, bob):
    clients = [api_client(bob) for _ in range(8)]
    answers = [None] * len(clients)
    start = threading.Barrier(len(clients))

    def send(i):
        start.wait()
        answers[i] = post(clients[i], "/api/v1/workloads/", JOB, "together")
        connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["id"] for a in answers}) == 1
    assert Workload.objects.count() == 1


def test_a_submission_answers_201_when_redis_and_the_broker_are_down(
    acme_llm, bob, settings, monkeypatch, django_capture_on_commit_callbacks, caplog
):
    """What was committed is answered as created: the live event and the cycle's head start
    fail after the commit, are logged, and the beat's cycle admits the job anyway. Redis is
    really unreachable (a dead port); the broker's refusal is simulated, since the Celery app's
    connection is made once per process."""
    from celery import current_app
    from kombu.exceptions import OperationalError

    from portal.core import redis

    def refused(*args, **kwargs):
        raise OperationalError("[Errno 111] Connection refused")

    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    redis.client.cache_clear()
    monkeypatch.setattr(current_app, "send_task", refused)
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            answer = api_client(bob).post("/api/v1/workloads/", JOB, format="json")
    finally:
        redis.client.cache_clear()
    assert answer.status_code == 201, answer.content
    assert Workload.objects.get(pk=answer.json()["id"]).state == "pending"
    assert len(callbacks) >= 2
    failed = {r.getMessage().split(" in on_commit")[0] for r in caplog.records}
    assert {
        "Error calling publish.<locals>.<lambda>",
        "Error calling trigger_cycle.<locals>.<lambda>",
    } <= failed
