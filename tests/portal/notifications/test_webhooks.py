"""Webhooks and mail, every layer real for the webhooks (a Celery worker delivers to a local
HTTP server): signed deliveries of a tenant's events, retries of a failing receiver, mail to
the members who asked, and nothing of one tenant reaching another's. A replica its service
stopped is no job finishing: only those following every change of state hear of it."""

import base64
import contextlib
import hashlib
import hmac
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import pytest
from django.core import mail

from portal.core.models import AuditEvent
from portal.notifications import delivery, events
from portal.notifications.models import Delivery, MailPreference, Webhook
from portal.services import autoscaling
from portal.workloads import lifecycle
from portal.workloads.choices import State
from portal.workloads.models import Workload, transition
from tests.builders import api_client, make_workload
from tests.portal.processes import wait_until


class Receiver:
    """A local HTTP server that records each POST; answers `codes` in turn, then 200."""

    def __init__(self, codes=()):
        self.received, self.codes = [], list(codes)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.codes.pop(0) if receiver.codes else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def receiver():
    receivers = []

    def make(codes=()):
        receivers.append(Receiver(codes))
        return receivers[-1]

    yield make
    for r in receivers:
        r.close()


def _finish(workload, state=State.SUCCEEDED):
    for to in (State.ADMITTED, State.RUNNING, state):
        transition(workload, to, "test")
        workload.save()


@pytest.mark.django_db(transaction=True)
def test_a_finished_job_reaches_its_tenants_webhook_signed_and_no_one_elses(
    celery_worker, clean_redis, receiver, acme_llm, globex
):
    ours, theirs = receiver(), receiver()
    hook = Webhook.objects.create(tenant=acme_llm.tenant, url=ours.url, topics=["job.finished"])
    Webhook.objects.create(tenant=globex, url=theirs.url, topics=["job.finished", "job.state"])
    events.forget_listeners()
    job = make_workload(acme_llm, "trained", gpus=8)
    _finish(job)
    wait_until(lambda: ours.received, 30, "the delivery")
    [(headers, body)] = ours.received
    stamp = headers["X-Wanka-Timestamp"]
    expected = hmac.new(hook.secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    assert headers["X-Wanka-Signature"] == f"sha256={expected.hexdigest()}"
    assert headers["X-Wanka-Topic"] == "job.finished"
    sent = json.loads(body)
    assert (sent["topic"], sent["tenant"], sent["data"]["name"], sent["data"]["state"]) == (
        "job.finished", "Acme", "trained", "succeeded"
    )  # fmt: skip
    assert sent["id"] == int(headers["X-Wanka-Delivery"])
    wait_until(lambda: Delivery.objects.get(pk=sent["id"]).status == "delivered", 10, "logged")
    assert theirs.received == []  # Globex hears nothing of Acme's job


@pytest.mark.django_db(transaction=True)
def test_a_failing_receiver_is_tried_again_with_backoff_until_it_answers(
    celery_worker, clean_redis, receiver, acme_llm
):
    flaky = receiver(codes=[500, 503])
    Webhook.objects.create(tenant=acme_llm.tenant, url=flaky.url, topics=["job.state"])
    events.forget_listeners()
    transition(make_workload(acme_llm, "j", gpus=8), State.ADMITTED, "test")
    wait_until(lambda: len(flaky.received) == 3, 30, "three tries")
    ids = {headers["X-Wanka-Delivery"] for headers, _ in flaky.received}
    assert len(ids) == 1  # the same delivery each time, so a receiver can tell
    done = Delivery.objects.get()
    wait_until(lambda: Delivery.objects.get().status == "delivered", 10, "delivered")
    done.refresh_from_db()
    assert (done.attempts, done.response_code, done.error) == (3, 200, "")


@pytest.mark.django_db
def test_a_receiver_that_never_answers_fails_after_six_tries(acme_llm, receiver):
    dead = receiver(codes=[500] * 10)
    hook = Webhook.objects.create(tenant=acme_llm.tenant, url=dead.url, topics=["quota"])
    [pk] = delivery.fan_out({"tenant_id": acme_llm.tenant_id, "topics": ["quota"], "payload": {}})
    waits = [delivery.send(pk) for _ in range(delivery.MAX_ATTEMPTS)]
    assert waits == [0.5, 1.5, 4.5, 13.5, 40.5, None]  # backoff x3, then given up
    failed = hook.deliveries.get()
    assert (failed.status, failed.attempts, failed.error) == (
        "failed",
        6,
        "HTTP 500",
    )
    assert delivery.send(pk) is None and len(dead.received) == 6


@pytest.mark.django_db
def test_a_redirect_is_never_followed_and_private_addresses_are_refused_at_send(
    acme_llm, receiver, settings
):
    target = receiver()
    bouncer = receiver()
    bouncer.server.RequestHandlerClass.do_POST = lambda handler: (
        handler.send_response(302),
        handler.send_header("Location", target.url),
        handler.end_headers(),
    )
    hook = Webhook.objects.create(tenant=acme_llm.tenant, url=bouncer.url, topics=["quota"])
    [pk] = delivery.fan_out({"tenant_id": acme_llm.tenant_id, "topics": ["quota"], "payload": {}})
    delivery.send(pk)
    tried = hook.deliveries.get()
    assert (tried.status, tried.response_code, tried.error) == ("pending", 302, "HTTP 302")
    assert target.received == []  # the redirect's target never heard of it
    settings.WANKA = {**settings.WANKA, "WEBHOOK_PRIVATE_OK": False}
    Delivery.objects.filter(pk=pk).update(next_attempt_at=None)
    delivery.send(pk)
    tried.refresh_from_db()
    assert tried.error.endswith("which webhooks may not reach") and tried.response_code is None


def test_a_host_name_that_never_resolves_is_refused_in_seconds(monkeypatch):
    # A name server that never answers cannot be set up here (the resolver is the machine's):
    # a lookup that hangs stands in for it.
    monkeypatch.setattr(delivery, "RESOLVE_S", 0.3)
    monkeypatch.setattr(delivery.socket, "getaddrinfo", lambda *args, **kwargs: time.sleep(3))
    started = time.monotonic()
    with pytest.raises(ValueError, match="cannot resolve hooks.example: no answer in 0.3 s"):
        delivery.checked_address("https://hooks.example/wanka")
    assert time.monotonic() - started < 1.5


@pytest.mark.django_db
def test_mail_goes_to_members_who_chose_the_topic_for_their_own_jobs(acme_llm, bob, alice, charlie):
    bob.email, alice.email, charlie.email = "bob@acme.test", "alice@acme.test", "c@globex.test"
    for user in (bob, alice, charlie):
        user.save()
        MailPreference.objects.create(membership=user.membership, topics=["job.finished", "fault"])
    job = make_workload(acme_llm, "mine", gpus=8, submitted_by=bob)
    payload = {"id": job.pk, "name": "mine", "state": "failed", "reason": "exit code 1"}
    delivery.fan_out(
        {"tenant_id": acme_llm.tenant_id, "topics": ["job.finished"], "payload": payload}
    )
    assert [(m.to, m.subject) for m in mail.outbox] == [
        (["bob@acme.test"], "[Wanka] job mine is failed")
    ]
    fault = {
        "node": "n1",
        "title": "GPU fell off the bus",
        "message": "xid 79",
        "workloads": ["mine"],
    }
    delivery.fan_out({"tenant_id": acme_llm.tenant_id, "topics": ["fault"], "payload": fault})
    assert sorted(m.to[0] for m in mail.outbox[1:]) == ["alice@acme.test", "bob@acme.test"]


@pytest.mark.django_db
def test_admins_manage_webhooks_members_choose_mail(alice, bob, client, settings, receiver):
    client.force_login(bob)
    assert (
        client.post(
            "/notifications/webhooks/", {"url": "https://x.test/", "topics": ["fault"]}
        ).status_code
        == 403
    )
    client.post("/notifications/", {"topics": ["fault", "bogus"]})
    assert MailPreference.objects.get(membership=bob.membership).topics == ["fault"]
    client.force_login(alice)
    settings.WANKA = {**settings.WANKA, "WEBHOOK_PRIVATE_OK": False}
    client.post(
        "/notifications/webhooks/", {"url": "http://169.254.169.254/latest", "topics": ["fault"]}
    )
    assert not Webhook.objects.exists()  # a cloud's metadata service is off limits
    settings.WANKA = {**settings.WANKA, "WEBHOOK_PRIVATE_OK": True}
    url = receiver().url
    page = client.post("/notifications/webhooks/", {"url": url, "topics": ["fault"]}, follow=True)
    hook = Webhook.objects.get()
    assert hook.secret in page.content.decode()  # the signing secret, shown to the admin
    client.post(f"/notifications/webhooks/{hook.pk}/test/")
    assert hook.deliveries.get().topic == "ping"
    client.post(f"/notifications/webhooks/{hook.pk}/remove/")
    assert not Webhook.objects.exists()
    assert list(AuditEvent.objects.order_by("at").values_list("action", flat=True)) == [
        "webhook.added", "webhook.removed"
    ]  # fmt: skip


@pytest.mark.django_db
def test_a_urls_user_and_password_go_as_basic_auth_never_in_the_host(receiver):
    from portal.notifications.delivery import post

    hook = receiver()
    with_user = hook.url.replace("http://", "http://ops:s%3Acret@")
    assert post(with_user, b"{}", {"Content-Type": "application/json"}) == 200
    [(headers, _)] = hook.received
    assert headers["Host"] == f"127.0.0.1:{hook.server.server_port}"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"ops:s:cret").decode()


class Dripping:
    """A receiver that answers one byte a second: each read within the socket's timeout, the
    whole answer never."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        connection, _ = self.server.accept()
        connection.recv(65536)
        with contextlib.suppress(OSError):
            for byte in b"HTTP/1.1 200 OK\r\n" * 10:
                connection.send(bytes([byte]))
                time.sleep(1)


@pytest.mark.django_db
def test_a_try_is_cut_off_at_its_deadline_and_counts(acme_llm, clean_redis, monkeypatch):
    monkeypatch.setattr(delivery, "DEADLINE_S", 2.0)
    slow = Dripping()
    Webhook.objects.create(tenant=acme_llm.tenant, url=slow.url, topics=["quota"])
    [pk] = delivery.fan_out({"tenant_id": acme_llm.tenant_id, "topics": ["quota"], "payload": {}})
    started = time.monotonic()
    assert delivery.send(pk) == 0.5  # tried again later, with backoff
    assert time.monotonic() - started < 5
    cut = Delivery.objects.get(pk=pk)
    assert (cut.attempts, cut.status, cut.error) == (1, "pending", "no answer in time")


@pytest.mark.django_db
def test_a_delivery_whose_last_try_was_cut_off_fails_without_another(acme_llm, receiver):
    hook = receiver()
    Webhook.objects.create(tenant=acme_llm.tenant, url=hook.url, topics=["quota"])
    [pk] = delivery.fan_out({"tenant_id": acme_llm.tenant_id, "topics": ["quota"], "payload": {}})
    Delivery.objects.filter(pk=pk).update(attempts=delivery.MAX_ATTEMPTS)  # a worker died in it
    assert delivery.send(pk) is None
    assert Delivery.objects.get(pk=pk).status == "failed" and hook.received == []


@pytest.mark.django_db
def test_a_tenant_with_its_tries_under_way_waits_and_no_other_does(
    acme_llm, globex, receiver, clean_redis
):
    ours, theirs = receiver(), receiver()
    Webhook.objects.create(tenant=acme_llm.tenant, url=ours.url, topics=["quota"])
    Webhook.objects.create(tenant=globex, url=theirs.url, topics=["quota"])
    [mine] = delivery.fan_out({"tenant_id": acme_llm.tenant_id, "topics": ["quota"], "payload": {}})
    [other] = delivery.fan_out({"tenant_id": globex.pk, "topics": ["quota"], "payload": {}})
    clean_redis.set(f"wanka:webhooks:busy:{acme_llm.tenant_id}", delivery.PER_TENANT)
    assert delivery.send(mine) == delivery.BUSY_WAIT_S  # waits, uncounted
    assert Delivery.objects.get(pk=mine).attempts == 0 and ours.received == []
    assert delivery.send(other) is None and len(theirs.received) == 1
    clean_redis.delete(f"wanka:webhooks:busy:{acme_llm.tenant_id}")
    assert delivery.send(mine) is None and len(ours.received) == 1


class InlineWorker:
    """The notifications worker, in the test's process: a notice becomes its deliveries."""

    def signature(self, name, args):
        return SimpleNamespace(delay=lambda: delivery.fan_out(*args))


@pytest.mark.django_db
def test_a_scaled_down_replica_pages_no_one_a_cancelled_one_does(
    acme_llm, bob, monkeypatch, django_capture_on_commit_callbacks
):
    tenant = acme_llm.tenant
    ends = Webhook.objects.create(tenant=tenant, url="https://a.test/", topics=["job.finished"])
    every = Webhook.objects.create(tenant=tenant, url="https://b.test/", topics=["job.state"])
    events.forget_listeners()
    monkeypatch.setattr(events, "current_app", InlineWorker())
    spec = {"name": "chat", "queue": "llm", "gpu_model": "H800", "gpus_per_replica": 8,
            "min_replicas": 2, "max_replicas": 2, "target_concurrency": 4}  # fmt: skip
    api = api_client(bob)
    with django_capture_on_commit_callbacks(execute=True):
        pk = api.post("/api/v1/services/", spec, format="json").json()["id"]
        autoscaling.tick()
        api.patch(f"/api/v1/services/{pk}/", {"min_replicas": 1}, format="json")
        autoscaling.tick()  # one replica scaled down
        kept = Workload.objects.get(replica__service_id=pk, state=State.PENDING)
        lifecycle.cancel(kept, actor=bob)

    def told(hook):
        return [d.payload["data"]["state"] for d in hook.deliveries.order_by("pk")]

    assert told(ends) == ["cancelled"]
    assert told(every)[-2:] == ["stopped", "cancelled"]
