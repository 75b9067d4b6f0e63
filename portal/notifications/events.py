"""From the live path to notifications: `gather` hears every event published to a tenant
(`core.live.tenant_event`) and, for tenants that listen (a webhook or a member's mail
preference, looked up at most every `SUBSCRIBERS_TTL_S`), hands it to a worker on commit."""

import time

from celery import current_app
from django.db import transaction

from portal.notifications.choices import Topic
from portal.notifications.models import MailPreference, Webhook

SUBSCRIBERS_TTL_S = 10.0
# A replica its service stopped (`stopped`: scaled down, or the service stopped) is no job
# ending anyone should hear of as they would of a failure or a cancel: the autoscaler does it
# every few minutes. It reaches only those who follow every change of state (job.state).
FINISHED = {"succeeded", "failed", "cancelled"}
_listening: dict[str, object] = {"tenants": frozenset(), "until": 0.0}


def topics_of(event: str, payload: dict) -> list[str]:
    """The topics an event belongs to, the narrowest first."""
    if event == "workload.state":
        if payload.get("state") in FINISHED:
            return [Topic.JOB_FINISHED, Topic.JOB_STATE]
        return [Topic.JOB_STATE]
    if event == "fault":
        return [Topic.FAULT]
    if event in ("quota.decided", "budget.decided"):
        return [Topic.QUOTA]
    if event == "budget.threshold":
        return [Topic.BUDGET]
    return []


def gather(sender, tenant_id: int, event: str, payload: dict, **kwargs) -> None:
    topics = topics_of(event, payload)
    if not topics or tenant_id not in listening_tenants():
        return
    notice = {"tenant_id": tenant_id, "topics": [str(t) for t in topics], "payload": payload}
    transaction.on_commit(
        lambda: current_app.signature("portal.notifications.tasks.notify", (notice,)).delay()
    )


def listening_tenants() -> frozenset:
    now = time.monotonic()
    if now >= _listening["until"]:
        hooks = Webhook.objects.filter(active=True).values_list("tenant_id", flat=True)
        mail = MailPreference.objects.exclude(topics=[]).values_list(
            "membership__tenant_id", flat=True
        )
        _listening.update(tenants=frozenset(hooks) | frozenset(mail), until=now + SUBSCRIBERS_TTL_S)
    return _listening["tenants"]


def forget_listeners() -> None:
    """Look the listening tenants up afresh at the next event (after a change of them)."""
    _listening["until"] = 0.0
