"""Everyone changes their own password in the portal (the name in the header leads there), not
in Django's admin: the old one is asked for, a weak new one refused with the reason, and the
session that changed it stays signed in."""

from django.test import Client


def test_a_member_changes_their_password(bob, client):
    client.force_login(bob)
    assert 'href="/password/"' in client.get("/").content.decode()
    wrong = client.post(
        "/password/",
        {
            "old_password": "nope",
            "new_password1": "k8s-rocks-2026",
            "new_password2": "k8s-rocks-2026",
        },
    )
    assert "Your old password was entered incorrectly" in wrong.content.decode()
    weak = client.post(
        "/password/",
        {"old_password": "pw-bob", "new_password1": "password", "new_password2": "password"},
    )
    assert "This password is too common." in weak.content.decode()
    done = client.post(
        "/password/",
        {
            "old_password": "pw-bob",
            "new_password1": "k8s-rocks-2026",
            "new_password2": "k8s-rocks-2026",
        },
    )
    assert done.status_code == 302 and done.url == "/password/done/"
    assert client.get("/").status_code == 200  # still signed in here
    fresh = Client()
    assert not fresh.login(username="bob", password="pw-bob")
    assert fresh.login(username="bob", password="k8s-rocks-2026")


def test_signed_out_people_sign_in_first(client):
    assert client.get("/password/").url == "/login/?next=/password/"


def test_a_pages_live_refresh_leaves_its_messages_for_the_next_page(bob, client):
    """A part of a page drawn again in the background (`X-Wanka-Part`) must not take the
    one-time message a form's redirect left for the page the person goes to next."""
    client.force_login(bob)
    client.post("/tokens/", {"name": "", "scope": "read", "expires_in_days": "30"})
    said = "Give the token a name."
    assert said not in client.get("/", headers={"X-Wanka-Part": "1"}).content.decode()
    assert said in client.get("/").content.decode()
