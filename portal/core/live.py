"""The one-way live path: domain event -> on commit -> a group, fanned out per process
(`fanout`) -> browser.

Group names come from the helpers below, one per scope, so senders and consumers agree.
"""

from django.db import transaction
from django.dispatch import Signal

from portal.core import fanout
from portal.tenancy.models import membership_of

# Sent for every event published to a tenant, inside its transaction: (tenant_id, event,
# payload). Notifications listen.
tenant_event = Signal()

CLUSTER_GROUP = "cluster"  # everyone signed in: nothing that names a tenant's workload
OPS_GROUP = "ops"  # operators (staff): everything


def live_groups(user) -> list[str]:
    """The groups a browser of `user` joins: the cluster's for everyone signed in, their
    tenant's for a member, the operators' for staff. The same rule as `visible_to`."""
    membership = membership_of(user)
    groups = [CLUSTER_GROUP] + ([tenant_group(membership.tenant_id)] if membership else [])
    # Operators only: staff who belong to a tenant see what its members see, as `visible_to`.
    return groups + ([OPS_GROUP] if user.is_staff and membership is None else [])


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def user_group(user_id: int) -> str:
    """Every live socket of one user, whatever else it joined."""
    return f"user.{user_id}"


def recheck_user(user_id: int) -> None:
    """Have the user's open live sockets check, once the current transaction commits, that
    the user may still hear what they joined (the browsers' consumer closes those that may not).
    A channel layer that cannot be reached is logged, never fails the change."""
    message = {"type": "live.recheck"}
    transaction.on_commit(lambda: send_now(user_group(user_id), message), robust=True)


def send_now(group: str, message: dict) -> None:
    fanout.publish(group, message)


def publish(group: str, event: str, payload: dict) -> None:
    """Send `event` to browsers in `group` once the current transaction commits. A Redis that
    cannot be reached is logged and fails nothing (pages fetch their state when they reconnect)."""
    message = {"type": "live.event", "event": event, "payload": payload}
    transaction.on_commit(lambda: send_now(group, message), robust=True)


def publish_tenant(tenant_id: int, event: str, payload: dict) -> None:
    publish(tenant_group(tenant_id), event, payload)
    tenant_event.send(publish_tenant, tenant_id=tenant_id, event=event, payload=payload)
