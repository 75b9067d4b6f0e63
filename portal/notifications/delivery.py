"""Telling a tenant: a signed POST to each of its webhooks for the topic, tried again with
backoff until it lands, and mail to the members who asked for the topic.

A delivery's body is JSON ``{"id", "topic", "tenant", "at", "data"}``. Its headers say
``X-Wanka-Topic``, ``X-Wanka-Delivery`` (the id: the same on every try, for receivers that
must not act twice), ``X-Wanka-Timestamp`` (Unix seconds) and ``X-Wanka-Signature``:
``sha256=`` and the hex HMAC-SHA256, keyed with the webhook's secret, of
``"<timestamp>.<body>"``. Receivers recompute it, compare in constant time and refuse old
timestamps."""

import base64
import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone
from redis import RedisError

from portal.core import redis
from portal.notifications.choices import DeliveryStatus, Topic
from portal.notifications.models import Delivery, MailPreference
from portal.tenancy.models import Tenant
from portal.workloads.models import Workload

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 6
TIMEOUT_S = 10.0  # for each step of a try: connecting, sending, each read
DEADLINE_S = 20.0  # for the whole try: a receiver that answers a byte at a time is cut off
PER_TENANT = 2  # one tenant's tries at once: slow receivers hold their own tenant up, no other
BUSY_WAIT_S = 2.0  # a try over that count waits this long, uncounted
# A host name's lookup is waited for this long at most: the page that adds a webhook waits for
# it on one of its server's few answering threads, and a name server that never answers would
# hold that thread for the resolver's own timeouts. The lookup runs on a thread of its own, as
# getaddrinfo takes no deadline.
RESOLVE_S = 5.0
_lookups = ThreadPoolExecutor(4, "resolve")
JOB_TOPICS = {Topic.JOB_FINISHED, Topic.JOB_STATE}


def fan_out(notice: dict) -> list[int]:
    """Deliveries for the tenant's webhooks that want one of the notice's topics, and mail to
    the members who do; returns the ids of the deliveries to send."""
    tenant = Tenant.objects.get(pk=notice["tenant_id"])
    topics, payload = notice["topics"], notice["payload"]
    created = []
    for hook in tenant.webhooks.filter(active=True).select_related("tenant"):
        topic = next((t for t in topics if t in hook.topics), None)
        if topic is not None:
            created.append(queued(hook, topic, payload).pk)
    try:
        _mail(tenant, topics, payload)
    except Exception:
        log.exception("tenant %s: mail about %s failed", tenant, topics[0])  # hooks still go
    return created


def queued(hook, topic: str, data: dict) -> Delivery:
    """A delivery of `data` about `topic` to `hook`, due at once: should its task be lost, the
    minutely sweep (`due`) sends it."""
    body = {
        "topic": topic,
        "tenant": hook.tenant.name,
        "at": timezone.now().isoformat(),
        "data": data,
    }
    return Delivery.objects.create(
        webhook=hook, topic=topic, payload=body, next_attempt_at=timezone.now()
    )


def _mail(tenant: Tenant, topics: list[str], payload: dict) -> None:
    wanted = MailPreference.objects.filter(membership__tenant=tenant).select_related(
        "membership__user"
    )
    if set(topics) & JOB_TOPICS:
        submitter = Workload.objects.filter(pk=payload.get("id")).values_list(
            "submitted_by", flat=True
        )
        wanted = wanted.filter(membership__user__in=submitter)
    for preference in wanted:
        topic = next((t for t in topics if t in preference.topics), None)
        user = preference.membership.user
        if topic is None or not user.email or not user.is_active:
            continue
        subject, text = _letter(topic, payload)
        send_mail(f"[Wanka] {subject}", text, None, [user.email])


def _letter(topic: str, p: dict) -> tuple[str, str]:
    """The subject and text of a mail about `topic`."""
    if topic in JOB_TOPICS:
        text = f"Workload {p['id']} ({p['name']}): {p['state']}. {p.get('reason', '')}\n"
        return f"job {p['name']} is {p['state']}", text
    if topic == Topic.FAULT:
        jobs = ", ".join(p.get("workloads", [])) or "none"
        return f"fault on {p['node']}: {p['title']}", f"{p['message']}\nJobs hit: {jobs}\n"
    if topic == Topic.BUDGET:
        out = p["runs_out_at"] or "never at the last day's burn"
        text = (
            f"The budget of {p['scope']} is {p['percent']:g} % used {p['window']} "
            f"({p['used']:g} of {p['gpu_hours']} GPU-hours). It runs out: {out}.\n"
        )
        return f"budget of {p['scope']} at {p['threshold']} %", text
    if "gpu_hours" in p:  # a budget request
        text = f"A budget of {p['gpu_hours']} GPU-hours for {p['budget']}: {p['status']}.\n"
        return f"budget request {p['status']}", text
    text = f"{p['count']} {p['gpu_model']} GPUs for queue {p['queue']}: {p['status']}.\n"
    return f"quota request {p['status']}", text


def send(delivery_id: int) -> float | None:
    """Try a delivery once. Returns the seconds until the next try, None when done. The try is
    claimed first (a conditional update), so two workers never send it at once; it waits,
    uncounted, while its tenant has PER_TENANT tries under way; it takes DEADLINE_S at most.
    A delivery whose tries are spent (the last one cut off) fails without another."""
    delivery = Delivery.objects.select_related("webhook").get(pk=delivery_id)
    if delivery.status != DeliveryStatus.PENDING:
        return None
    if delivery.attempts >= MAX_ATTEMPTS:  # its last try was cut off (a worker died in it)
        delivery.status, delivery.next_attempt_at = DeliveryStatus.FAILED, None
        delivery.error = delivery.error or "the last try was cut off"
        delivery.save(update_fields=["status", "next_attempt_at", "error"])
        return None
    with tenant_slot(delivery.webhook.tenant_id) as free:
        return _try(delivery) if free else BUSY_WAIT_S


@contextlib.contextmanager
def tenant_slot(tenant_id: int):
    """One of the tenant's PER_TENANT slots for a try, counted in Redis (yields whether one was
    free); without Redis, the try goes ahead."""
    key = f"wanka:webhooks:busy:{tenant_id}"
    try:
        with redis.client().pipeline() as pipe:
            taken, _ = pipe.incr(key).expire(key, int(DEADLINE_S) + 60).execute()
    except RedisError:
        yield True
        return
    try:
        yield taken <= PER_TENANT
    finally:
        with contextlib.suppress(RedisError):
            redis.client().decr(key)


def _try(delivery: Delivery) -> float | None:
    claim = timezone.now() + timedelta(seconds=DEADLINE_S + 60)  # overdue only if this one died
    claimed = Delivery.objects.filter(
        pk=delivery.pk, status=DeliveryStatus.PENDING, attempts=delivery.attempts
    ).update(attempts=delivery.attempts + 1, next_attempt_at=claim)
    if not claimed:
        return None
    delivery.attempts += 1
    body = json.dumps({"id": delivery.pk, **delivery.payload}, separators=(",", ":")).encode()
    stamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Wanka-Webhook/1",
        "X-Wanka-Topic": delivery.topic,
        "X-Wanka-Delivery": str(delivery.pk),
        "X-Wanka-Timestamp": stamp,
        "X-Wanka-Signature": "sha256=" + signature(delivery.webhook.secret, stamp, body),
    }
    try:
        delivery.response_code = post(delivery.webhook.url, body, headers)
        ok = 200 <= delivery.response_code < 300
        delivery.error = "" if ok else f"HTTP {delivery.response_code}"
    except (OSError, ValueError, http.client.HTTPException) as error:
        delivery.response_code, delivery.error = None, _coarse(error)
    wait = None
    if not delivery.error:
        delivery.status, delivery.delivered_at, delivery.next_attempt_at = (
            DeliveryStatus.DELIVERED,
            timezone.now(),
            None,
        )
    elif delivery.attempts >= MAX_ATTEMPTS:
        delivery.status, delivery.next_attempt_at = DeliveryStatus.FAILED, None
        log.warning(
            "webhook %s: delivery %s failed for good: %s",
            delivery.webhook.url,
            delivery.pk,
            delivery.error,
        )
    else:
        wait = settings.WANKA["WEBHOOK_BACKOFF_S"] * 3 ** (delivery.attempts - 1)
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=wait)
    delivery.save()
    return wait


def signature(secret: str, stamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def due() -> list[int]:
    """Pending deliveries whose next try is overdue (a worker died before making it)."""
    late = timezone.now() - timedelta(seconds=30)
    return list(
        Delivery.objects.filter(
            status=DeliveryStatus.PENDING, next_attempt_at__lt=late
        ).values_list("pk", flat=True)[:1000]
    )


def post(url: str, body: bytes, headers: dict) -> int:
    """POST `body` to the webhook and return the answer's status. The connection goes to the
    very address `checked_address` approved (a second lookup could answer otherwise), and a
    redirect is an answer like any other, never followed."""
    parts, address = checked_address(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if parts.scheme == "https":
        connection = _PinnedHTTPS(parts.hostname, port, address, timeout=TIMEOUT_S)
    else:
        connection = http.client.HTTPConnection(address, port, timeout=TIMEOUT_S)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # Past the deadline the socket is shut, which ends any read or write in progress.
    cut = threading.Event()
    watchdog = threading.Timer(DEADLINE_S, _cut, (connection, cut))
    watchdog.start()
    try:
        connection.request("POST", path, body, {**headers, **_host_and_auth(parts, port)})
        answer = connection.getresponse()
        answer.read(64 * 1024)
        return answer.status
    except (OSError, http.client.HTTPException) as error:
        if cut.is_set():
            raise TimeoutError(f"no whole answer within {DEADLINE_S:g} s") from error
        raise
    finally:
        watchdog.cancel()
        connection.close()


def _cut(connection: http.client.HTTPConnection, cut: threading.Event) -> None:
    cut.set()
    if connection.sock is not None:
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_RDWR)


def _host_and_auth(parts, port: int) -> dict[str, str]:
    """The Host header (the host and a port that is not the scheme's own; never the URL's
    user and password) and, where the URL carries them, HTTP basic authentication."""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 443 if parts.scheme == "https" else 80
    fields = {"Host": host if port == default else f"{host}:{port}"}
    if parts.username is not None:
        pair = (
            f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        )
        fields["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return fields


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to a fixed address, the certificate checked against the URL's host name."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def _coarse(error: Exception) -> str:
    """What a tenant reads of a failed try: the kind of failure, not what a host said."""
    if isinstance(error, ValueError):
        return str(error)[:300]  # our own refusal
    if isinstance(error, TimeoutError | socket.timeout):
        return "no answer in time"
    if isinstance(error, ssl.SSLError):
        return "TLS failed"
    return "could not connect"


def checked_address(url: str) -> tuple[urllib.parse.SplitResult, str]:
    """The URL's parts and the address to connect to. Raises ValueError for a URL that is not
    http(s), or whose host is on a loopback, link-local, private or reserved address (the
    cluster's own network, a cloud's metadata service), unless WANKA_WEBHOOK_PRIVATE_OK."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("a webhook URL is http:// or https:// and names a host")
    try:
        found = _lookups.submit(
            socket.getaddrinfo, parts.hostname, parts.port or 443, type=socket.SOCK_STREAM
        ).result(RESOLVE_S)
    except TimeoutError:
        raise ValueError(f"cannot resolve {parts.hostname}: no answer in {RESOLVE_S:g} s") from None
    except OSError as error:
        raise ValueError(f"cannot resolve {parts.hostname}: {error.strerror or error}") from None
    addresses = [info[4][0] for info in found]
    if not settings.WANKA["WEBHOOK_PRIVATE_OK"]:
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if not ip.is_global:
                raise ValueError(
                    f"{parts.hostname} is on a private address ({ip}), which webhooks may not reach"
                )
    return parts, addresses[0]
