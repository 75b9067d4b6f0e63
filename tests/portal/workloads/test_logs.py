"""Workload output in the portal: reading by attempt, node and cursor, following, isolation,
bad queries, and what is kept."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from portal.workloads import logs
from portal.workloads.models import LogChunk
from tests.builders import api_client, make_workload


@pytest.fixture
def job(acme_llm, cluster):
    job = make_workload(acme_llm, "printer", gpus=8)
    a, b = cluster[0], cluster[1]
    logs.record_many(
        [
            (a.pk, job.pk, 0, 0, ["a0 one", "a0 two"]),
            (b.pk, job.pk, 0, 0, ["b0 one"]),
            (a.pk, job.pk, 1, 0, ["a1 one"]),
            (a.pk, job.pk, 0, 0, ["a0 one", "a0 two"]),  # resent: kept once
            (a.pk, 10**9, 0, 0, ["no such workload"]),
        ]
    )
    LogChunk.objects.update(at=timezone.now() - timedelta(seconds=10))  # settled
    return job


def _get(api, job, **query):
    return api.get(f"/api/v1/workloads/{job.pk}/logs/", query)


def test_output_reads_by_attempt_node_and_cursor(job, bob, cluster):
    api = api_client(bob)
    body = _get(api, job).json()
    assert [c["lines"] for c in body["chunks"]] == [["a0 one", "a0 two"], ["b0 one"], ["a1 one"]]
    assert body["runs"] == [
        {"attempt": 1, "node": cluster[0].name, "lines": 1},
        {"attempt": 0, "node": cluster[0].name, "lines": 2},
        {"attempt": 0, "node": cluster[1].name, "lines": 1},
    ]
    assert (body["writing"], body["more"]) == (True, False)
    one = _get(api, job, attempt=0, node=cluster[1].name).json()["chunks"]
    assert [c["lines"] for c in one] == [["b0 one"]]
    after = _get(api, job, since=body["chunks"][0]["id"]).json()
    assert [c["lines"][0] for c in after["chunks"]] == ["b0 one", "a1 one"]
    assert _get(api, job, since=body["next"]).json()["chunks"] == []


def test_another_tenant_sees_no_output_and_bad_queries_say_why(job, charlie, victor, operator):
    assert _get(api_client(charlie), job).status_code == 404
    assert _get(api_client(victor), job).status_code == 200  # viewers read
    refused = _get(api_client(victor), job, since=-1, attempt="x")
    assert refused.status_code == 400
    fields = {e["field"] for e in refused.json()["errors"]}
    assert fields == {"since", "attempt"}
    assert _get(api_client(victor), job, since=2**63).status_code == 400
    ops = APIClient()
    ops.force_login(operator)  # operators read every tenant's
    assert len(_get(ops, job).json()["chunks"]) == 3


@pytest.mark.django_db(transaction=True)
def test_follow_waits_for_new_output_and_returns_when_it_comes(job, bob, cluster):
    api = api_client(bob)
    cursor = _get(api, job).json()["next"]

    def write_later():
        time.sleep(1.0)
        logs.record_many([(cluster[0].pk, job.pk, 1, 100, ["late line"])])
        connection.close()  # this thread's own

    writer = threading.Thread(target=write_later)
    writer.start()
    started = time.monotonic()
    body = _get(api, job, since=cursor, follow="true").json()
    waited = time.monotonic() - started
    writer.join()
    assert [c["lines"] for c in body["chunks"]] == [["late line"]]
    assert 0.8 < waited < logs.FOLLOW_S


def test_a_finished_workload_is_not_followed(job, bob):
    job.state, job.finished_at = "succeeded", timezone.now() - timedelta(minutes=1)
    job.save(update_fields=["state", "finished_at"])
    started = time.monotonic()
    body = _get(api_client(bob), job, since=10**9, follow="true").json()
    assert (body["chunks"], body["writing"]) == ([], False)
    assert time.monotonic() - started < 2


def test_trim_drops_old_output_and_the_oldest_beyond_the_size_limit(job, cluster, settings):
    settings.WANKA = {**settings.WANKA, "LOG_CHARS_PER_WORKLOAD": 20}
    LogChunk.objects.filter(text="b0 one").update(at=timezone.now() - timedelta(days=31))
    logs.record_many([(cluster[0].pk, job.pk, 1, 7, ["x" * 12])])
    # Left: "a0 one\na0 two" (13), "a1 one" (6), "x" * 12: 31 characters, over 20.
    assert logs.trim() == 2  # the month-old chunk, then the oldest until under the limit
    assert list(job.log_chunks.values_list("text", flat=True)) == ["a1 one", "x" * 12]


def test_a_chunk_is_read_only_once_settled(job, bob, cluster):
    api = api_client(bob)
    cursor = _get(api, job).json()["next"]
    logs.record_many([(cluster[0].pk, job.pk, 1, 50, ["fresh"])])
    assert _get(api, job, since=cursor).json()["chunks"] == []  # it could pass one to commit
    LogChunk.objects.filter(text="fresh").update(at=timezone.now() - timedelta(seconds=2))
    assert [c["lines"] for c in _get(api, job, since=cursor).json()["chunks"]] == [["fresh"]]
