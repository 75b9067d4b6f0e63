"""A browser's open live socket follows its user: removed, deactivated or moved to another
tenant, signed out or with a changed password, it hears nothing more and is closed; a role
change keeps it open."""

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


def test_signing_out_closes_that_sessions_socket_and_no_other(live, acme, bob):
    here, elsewhere = live(bob), live(bob)
    assert here.browser.post("/logout/").status_code == 302
    wait_until(lambda: not here.thread.is_alive(), 10, "the signed-out socket to close")
    assert here.socket.close_code == CLOSE_REVOKED
    probe(acme, 1)
    elsewhere.wait_for("probe")  # another browser of Bob's, still signed in


def test_a_password_change_closes_every_socket_opened_before(live, acme, bob):
    sockets = [live(bob), live(bob)]
    bob.set_password("a-new-password-9")
    bob.save()
    for socket in sockets:
        wait_until(lambda s=socket: not s.thread.is_alive(), 10, "the socket to close")
        assert socket.socket.close_code == CLOSE_REVOKED
