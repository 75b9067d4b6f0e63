"""PostgreSQL through a bounded pool per process: when every connection is taken longer than
the pool waits, a request gets a 503 with Retry-After and a reason, not a 500."""

import pytest
from django.db import connection, connections
from psycopg_pool import PoolTimeout
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
        # Every connection the pool has left (threads of earlier tests may hold some), given
        # time to open on a busy machine.
        while len(taken) < pool.max_size:
            try:
                taken.append(pool.getconn(timeout=5))
            except PoolTimeout:
                break
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
