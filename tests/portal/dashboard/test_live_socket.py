"""A browser's open live socket follows its user: removed, deactivated or moved to another
tenant, it hears nothing more of the tenant and is closed; a role change keeps it open."""

import pytest
from django.test import Client

from portal.core.live import send_now, tenant_group
from portal.dashboard.consumers import CLOSE_REVOKED
from portal.tenancy.choices import Role
from tests.portal.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def probe(tenant, n):
    send_now(tenant_group(tenant.pk), {"type": "live.event", "event": "probe", "payload": {"n": n}})


def removed_by_their_admin(bob, alice, globex):
    admin = Client()
    admin.force_login(alice)
    assert admin.post(f"/members/{bob.membership.pk}/remove/").status_code == 302


def deactivated_in_the_console(bob, alice, globex):
    bob.is_active = False
    bob.save()


def moved_to_another_tenant(bob, alice, globex):
    bob.membership.tenant = globex
    bob.membership.save()


@pytest.mark.parametrize(
    "revoke",
    [removed_by_their_admin, deactivated_in_the_console, moved_to_another_tenant],
    ids=lambda f: f.__name__.replace("_", " "),
)
def test_a_socket_whose_user_lost_the_tenant_is_closed(live, acme, alice, bob, globex, revoke):
    bobs = live(bob)
    probe(acme, 1)
    bobs.wait_for("probe")
    revoke(bob, alice, globex)
    wait_until(lambda: not bobs.thread.is_alive(), 10, "Bob's socket to close")
    assert bobs.socket.close_code == CLOSE_REVOKED
    probe(acme, 2)
    assert [p["n"] for p in bobs.of("probe")] == [1]


def test_a_role_change_keeps_the_socket(live, acme, bob):
    bobs = live(bob)
    bob.membership.role = Role.VIEWER
    bob.membership.save()
    bob.first_name = "Robert"
    bob.save()
    probe(acme, 1)
    bobs.wait_for("probe")
    assert bobs.thread.is_alive()
