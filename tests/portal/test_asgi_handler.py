"""The server's HTTP side (`portal.asgi.application`, `core.handler`): requests answered the same
as through Django's own handler, each in one of a fixed set of threads, every database
connection back in the pool when they end; a streamed download served whole."""

import asyncio
import threading
from datetime import timedelta

import pytest
from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.core.signals import request_started
from django.db import connection
from django.test import Client
from django.utils import timezone

from portal.asgi import application
from portal.tenancy.models import ApiToken
from portal.workloads.models import LogChunk
from tests.builders import api_client, make_cluster, make_queue, make_workload

pytestmark = pytest.mark.django_db(transaction=True)


def _serve(requests: list[tuple[str, list]]) -> list[dict]:
    """Each (path, headers) asked of the ASGI application, all at once: status and body."""

    async def ask(path, headers):
        path, _, query = path.partition("?")
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "GET",
            "path": path,
            "query_string": query.encode(),
            "headers": [(b"host", b"testserver"), *headers],
        }
        server = ApplicationCommunicator(application, scope)
        await server.send_input({"type": "http.request", "body": b""})
        start = await server.receive_output(30)
        body, more = b"", True
        while more:
            part = await server.receive_output(30)
            body, more = body + part.get("body", b""), part.get("more_body", False)
        await server.wait(30)
        return {"status": start["status"], "body": body}

    async def ask_all():
        return await asyncio.gather(*(ask(path, headers) for path, headers in requests))

    return asyncio.run(ask_all())


@pytest.fixture
def threads_seen():
    seen = set()

    def note(**kwargs):
        seen.add(threading.current_thread().name)

    request_started.connect(note, dispatch_uid="threads_seen")
    yield seen
    request_started.disconnect(dispatch_uid="threads_seen")


def test_requests_at_once_are_answered_on_the_servers_threads(acme_llm, bob, threads_seen):
    for i in range(60):
        make_workload(acme_llm, f"job-{i}", gpus=8)
    _, token = ApiToken.issue(bob, "asgi")
    auth = [(b"authorization", f"Bearer {token}".encode())]
    expected = api_client(bob).get("/api/v1/workloads/?limit=50").content
    threads_seen.clear()  # the test client's

    answers = _serve([("/api/v1/workloads/?limit=50", auth)] * 40)

    assert [a["status"] for a in answers] == [200] * 40
    assert {a["body"] for a in answers} == {expected}
    assert len(threads_seen) <= settings.HTTP_THREADS  # not a thread a request
    assert all(name.startswith("http") for name in threads_seen)
    if connection.vendor == "postgresql":  # none of the server's connections still taken
        stats = connection.pool.get_stats()
        taken = stats["pool_size"] - stats["pool_available"]
        assert taken <= 1  # this test's own


def test_a_streamed_download_is_served_whole(cluster, acme, bob):
    [node] = make_cluster({"dc9": {"p1": ("H800", 1)}}, nodes_per_leaf=1)
    job = make_workload(make_queue(acme, "logs", h800=8), "printer", gpus=8)
    for i in range(30):
        text = "\n".join(f"line {i}.{j}" for j in range(100))
        LogChunk.objects.create(
            workload=job, attempt=0, node=node, offset=i, text=text, lines=100, size=len(text)
        )
    LogChunk.objects.update(at=timezone.now() - timedelta(seconds=10))  # settled: readable
    browser = Client()
    browser.force_login(bob)
    cookie = [(b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode())]

    [answer] = _serve([(f"/workloads/{job.pk}/output.txt", cookie)])

    assert answer["status"] == 200
    lines = answer["body"].decode().splitlines()
    assert len(lines) == 3000
    assert lines[0] == f"[0 {node.name}] line 0.0"
    assert lines[-1] == f"[0 {node.name}] line 29.99"
