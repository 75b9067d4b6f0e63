"""PostgreSQL through a bounded pool per process: when every connection is taken longer than
the pool waits, a request gets a 503 with Retry-After and a reason, not a 500."""

import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_an_exhausted_pool_answers_503_with_retry_after(bob):
    client = APIClient()
    client.force_login(bob)
    assert client.get("/api/v1/workloads/").status_code == 200
    connections.close_all()  # this thread's connection back to the pool
    pool = connection.pool
    before, taken = pool.timeout, []
    try:
        while len(taken) < pool.max_size:  # opening them may take a while on a busy machine
            taken.append(pool.getconn(timeout=30))
        pool.timeout = 0.3  # what the request waits before it is told the pool is full
        answer = client.get("/api/v1/workloads/")
    finally:
        for held in taken:
            pool.putconn(held)
        pool.timeout = before
    assert answer.status_code == 503
    assert answer["Retry-After"] == "2"
    assert "every database connection is in use" in answer.json()["errors"][0]["reason"]
    assert client.get("/api/v1/workloads/").status_code == 200  # and back once they are free
