import re
from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from portal.core.models import AuditEvent
from portal.tenancy.models import ApiToken
from tests.builders import make_workload


def test_a_member_issues_a_token_sees_it_once_and_it_works(bob, client):
    client.force_login(bob)
    issued = client.post("/tokens/", {"name": "scripts"})
    assert (issued.status_code, issued.url) == (302, "/tokens/")  # a reload cannot repeat it
    shown = client.get("/tokens/")
    assert "no-store" in shown["Cache-Control"]  # no cache, no back button, keeps the key
    key = re.search(r'id="new-key">(wk_[^<]+)<', shown.content.decode()).group(1)
    assert key not in client.get("/tokens/").content.decode()  # shown once
    token = ApiToken.objects.get()  # the reloads issued nothing more
    assert token.key_hash != key and key.endswith(token.hint)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/workloads/").status_code == 200


def test_revoking_stops_the_token_and_others_cannot_revoke_it(bob, charlie, client):
    token, key = ApiToken.issue(bob, "scripts")
    client.force_login(charlie)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    client.force_login(bob)
    client.post(f"/tokens/{token.pk}/revoke/")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/workloads/").status_code == 401


def _bearer(key):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def test_a_read_scoped_token_reads_but_cannot_write(bob, acme_llm):
    _, key = ApiToken.issue(bob, "dashboards", scope="read")
    api = _bearer(key)
    assert api.get("/api/v1/workloads/").status_code == 200
    refused = api.post("/api/v1/workloads/", {"name": "x"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["errors"] == [
        {"field": None, "reason": "This API token is read-only (scope read)."}
    ]
    assert not bob.membership.tenant.workloads.exists()


def test_an_expired_token_is_refused_and_says_when_it_expired(bob):
    token, key = ApiToken.issue(bob, "old", expires_at=timezone.now() - timedelta(hours=1))
    refused = _bearer(key).get("/api/v1/workloads/")
    assert refused.status_code == 401
    assert "expired at" in refused.json()["errors"][0]["reason"]
    token.expires_at = timezone.now() + timedelta(hours=1)
    token.save()
    assert _bearer(key).get("/api/v1/workloads/").status_code == 200


def test_the_page_issues_scoped_expiring_tokens_and_audits_them(bob, victor, client):
    client.force_login(bob)
    client.post("/tokens/", {"name": "ci", "scope": "read", "expires_in_days": "7"})
    token = ApiToken.objects.get(name="ci")
    assert token.scope == "read"
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)
    entry = AuditEvent.objects.get(action="api_token.issued")
    assert (entry.actor, entry.data["scope"]) == (bob, "read")
    assert "Read only" in client.get("/tokens/").content.decode()
    client.force_login(victor)  # a viewer's token can only read
    client.post("/tokens/", {"name": "w", "scope": "write", "expires_in_days": "30"})
    assert not ApiToken.objects.filter(name="w").exists()
    client.post("/tokens/", {"name": "bogus", "scope": "write", "expires_in_days": "9999"})
    assert not ApiToken.objects.filter(name="bogus").exists()


def test_an_operator_holds_a_token_and_reads_every_tenants_workloads(operator, acme_llm, client):
    make_workload(acme_llm, "theirs", gpus=8)
    client.force_login(operator)
    client.post("/tokens/", {"name": "ops-scripts", "scope": "read", "expires_in_days": "90"})
    key = re.search(r'id="new-key">(wk_[^<]+)<', client.get("/tokens/").content.decode()).group(1)
    body = _bearer(key).get("/api/v1/workloads/").json()
    assert [w["name"] for w in body["results"]] == ["theirs"]
    assert _bearer(key).get("/api/v1/me/").json()["operator"] is True
