"""The server's HTTP side (`portal.asgi.application`, `core.handler`): requests answered the same
as through Django's own handler, each in one of a fixed set of threads, every database
connection back in the pool when they end; log followers waiting, on threads of their own,
hold up nobody; a streamed download served whole, and stopped when the client goes."""

import asyncio
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from portal.asgi import application
from portal.core.handler import ThreadedASGIHandler
from portal.tenancy.models import ApiToken
from portal.workloads import logs
from portal.workloads.models import LogChunk
from tests.builders import api_client, make_cluster, make_queue, make_workload

pytestmark = pytest.mark.django_db(transaction=True)


def _scope(path: str, headers: list) -> dict:
    path, _, query = path.partition("?")
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": [(b"host", b"testserver"), *headers],
    }


async def _ask(path: str, headers: list) -> dict:
    """One request of the ASGI application: its status, body and seconds."""
    started = time.monotonic()
    server = ApplicationCommunicator(application, _scope(path, headers))
    await server.send_input({"type": "http.request", "body": b""})
    start = await server.receive_output(30)
    body, more = b"", True
    while more:
        part = await server.receive_output(30)
        body, more = body + part.get("body", b""), part.get("more_body", False)
    await server.wait(30)
    return {"status": start["status"], "body": body, "seconds": time.monotonic() - started}


def _serve(requests: list[tuple[str, list]]) -> list[dict]:
    """Each (path, headers) asked of the ASGI application, all at once."""

    async def ask_all():
        return await asyncio.gather(*(_ask(path, headers) for path, headers in requests))

    return asyncio.run(ask_all())


def _taken() -> int:
    """The pooled connections in use (none on SQLite)."""
    if connection.vendor != "postgresql":
        return 0
    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


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
    assert all(name.startswith("http_") for name in threads_seen)
    assert _taken() <= 1  # this test's own: none of the server's still taken


def test_log_followers_waiting_hold_up_no_other_request(acme_llm, bob, monkeypatch, threads_seen):
    monkeypatch.setattr(logs.follow, "__defaults__", (3.0,))
    assert settings.HTTP_THREADS < 12  # the followers would take every answering thread
    job = make_workload(acme_llm, "quiet", gpus=8)  # writes nothing: followers wait it out
    _, token = ApiToken.issue(bob, "asgi")
    auth = [(b"authorization", f"Bearer {token}".encode())]
    follow = f"/api/v1/workloads/{job.pk}/logs/?follow=true"

    async def followers_then_a_list():
        followers = [asyncio.create_task(_ask(follow, auth)) for _ in range(12)]
        await asyncio.sleep(0.5)  # all of them waiting
        listed = await _ask("/api/v1/workloads/?limit=5", auth)
        return listed, await asyncio.gather(*followers)

    threads_seen.clear()
    listed, followed = asyncio.run(followers_then_a_list())

    assert listed["status"] == 200 and listed["seconds"] < 1.5
    assert sum(name.startswith("http-follow") for name in threads_seen) == 12
    assert [f["status"] for f in followed] == [200] * 12
    assert min(f["seconds"] for f in followed) >= 2.5  # they did wait


def test_only_a_route_that_follows_runs_on_the_followers_threads(
    acme_llm, bob, threads_seen, monkeypatch
):
    monkeypatch.setattr(logs.follow, "__defaults__", (0.5,))
    job = make_workload(acme_llm, "quiet", gpus=8)
    _, token = ApiToken.issue(bob, "asgi")
    auth = [(b"authorization", f"Bearer {token}".encode())]
    asked = {
        "/api/v1/workloads/?limit=5&follow=true": "http",  # not a route that follows
        f"/api/v1/workloads/{job.pk}/logs/?follow=0": "http",
        f"/api/v1/workloads/{job.pk}/logs/?follow=": "http",
        f"/api/v1/workloads/{job.pk}/logs/?follow=0&follow=True": "http-follow",  # the last
    }
    for path, pool in asked.items():
        threads_seen.clear()
        [answer] = _serve([(path, auth)])
        assert answer["status"] == 200
        assert [name.rstrip("0123456789_") for name in threads_seen] == [pool], path


def test_a_download_the_client_leaves_stops_and_gives_its_connection_back(
    cluster, acme, bob, monkeypatch
):
    [node] = make_cluster({"dc9": {"p1": ("H800", 1)}}, nodes_per_leaf=1)
    job = make_workload(make_queue(acme, "logs", h800=8), "printer", gpus=8)
    LogChunk.objects.bulk_create(
        LogChunk(workload=job, attempt=0, node=node, offset=i, text="x" * 100, lines=1, size=100)
        for i in range(logs.READ_LIMIT * 20)
    )
    LogChunk.objects.update(at=timezone.now() - timedelta(seconds=10))
    reads, read = [], logs.read

    def slow_read(*args, **kwargs):
        reads.append(time.monotonic())
        time.sleep(0.1)
        return read(*args, **kwargs)

    monkeypatch.setattr(logs, "read", slow_read)
    browser = Client()
    browser.force_login(bob)
    cookie = [(b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode())]
    connection.close()
    before = _taken()

    async def leave_midway():
        server = ApplicationCommunicator(
            application, _scope(f"/workloads/{job.pk}/output.txt", cookie)
        )
        await server.send_input({"type": "http.request", "body": b""})
        assert (await server.receive_output(30))["status"] == 200
        await server.receive_output(30)  # the first part
        await server.send_input({"type": "http.disconnect"})
        await server.wait(30)  # the handler ends by itself

    asyncio.run(leave_midway())
    time.sleep(0.5)

    assert len(reads) < 5  # of 20 batches
    assert _taken() == before


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


def test_the_servers_threads_run_async_code_on_its_event_loop():
    """Messages to agents sent from a request (`cluster.delivery.tell`) go out on the server's
    loop and its Redis connections, as from asgiref's own threads; a plain thread would make a
    loop of its own for each."""

    async def serve():
        loop = asyncio.get_running_loop()

        async def on_the_servers_loop():
            return asyncio.get_running_loop() is loop

        async with asyncio.timeout(10):
            handler = ThreadedASGIHandler()
            await handler.handle(_scope("/nowhere/", []), _body_sent, _ignored)
            return await loop.run_in_executor(handler.threads, async_to_sync(on_the_servers_loop))

    assert asyncio.run(serve()) is True


async def _body_sent():
    return {"type": "http.request", "body": b""}


async def _ignored(message):
    pass
