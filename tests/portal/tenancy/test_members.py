"""A tenant's admins manage its people: invite (a link that sets a password once), change a
role, remove; members and other tenants cannot; every change is audited."""

import re

from django.contrib.auth import get_user_model
from django.core import mail
from rest_framework.test import APIClient

from portal.core.models import AuditEvent
from portal.tenancy.choices import Role
from portal.tenancy.models import ApiToken
from tests.builders import api_client


def test_an_admin_invites_and_the_invitee_sets_a_password_once(alice, client):
    client.force_login(alice)
    client.post("/members/", {"username": "dana", "email": "dana@example.com", "role": "viewer"})
    dana = get_user_model().objects.get(username="dana")
    assert (dana.membership.tenant, dana.membership.role) == (alice.membership.tenant, "viewer")
    assert not dana.has_usable_password()
    [letter] = mail.outbox
    assert letter.to == ["dana@example.com"] and "Acme" in letter.subject
    link = re.search(r"http://testserver(/invite/\S+)", letter.body).group(1)
    page = client.get("/members/").content.decode()
    assert link in page and link not in client.get("/members/").content.decode()  # once
    entry = AuditEvent.objects.get(action="member.invited")
    assert (entry.actor, entry.data) == (alice, {"username": "dana", "role": "viewer"})

    client.logout()
    form = client.get(link, follow=True)  # Django moves the token into the session
    assert "Choose a password for <b>dana</b>" in form.content.decode()
    password = "a-long-fresh-passphrase"
    client.post(form.redirect_chain[-1][0], {"new_password1": password, "new_password2": password})
    assert client.login(username="dana", password=password)
    client.logout()
    assert "no longer works" in client.get(link, follow=True).content.decode()


def test_an_admin_changes_roles_and_removes_members_and_nobody_else_can(
    alice, bob, victor, charlie, client
):
    _, key = ApiToken.issue(bob, "scripts")
    client.force_login(bob)  # a member, not an admin
    assert client.get("/members/").status_code == 403
    assert (
        client.post(f"/members/{victor.membership.pk}/role/", {"role": "admin"}).status_code == 403
    )
    client.force_login(charlie)  # an admin of another tenant
    assert (
        client.post(f"/members/{victor.membership.pk}/role/", {"role": "admin"}).status_code == 404
    )
    assert client.post(f"/members/{victor.membership.pk}/remove/").status_code == 404
    victor.membership.refresh_from_db()
    assert victor.membership.role == Role.VIEWER
    assert client.get("/members/").status_code == 200  # charlie manages Globex...
    assert "victor" not in client.get("/members/").content.decode()  # ...and sees no one else's

    client.force_login(alice)
    client.post(f"/members/{victor.membership.pk}/role/", {"role": "member"})
    victor.membership.refresh_from_db()
    assert victor.membership.role == Role.MEMBER
    client.post(f"/members/{alice.membership.pk}/role/", {"role": "viewer"})
    alice.membership.refresh_from_db()
    assert alice.membership.role == Role.ADMIN  # the last admin stays one
    client.post(f"/members/{bob.membership.pk}/remove/")
    bob.refresh_from_db()
    assert not bob.is_active and not hasattr(bob, "membership")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/workloads/").status_code == 401  # its tokens went with it
    actions = list(AuditEvent.objects.order_by("at").values_list("action", "data"))
    assert actions == [
        ("member.role_changed", {"username": "victor", "before": "viewer", "after": "member"}),
        ("member.removed", {"username": "bob", "role": "member"}),
    ]
    assert api_client(victor).get("/api/v1/workloads/").status_code == 200
