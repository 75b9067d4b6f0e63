import re

from rest_framework.test import APIClient

from portal.tenancy.models import ApiToken


def test_a_member_issues_a_token_sees_it_once_and_it_works(bob, client):
    client.force_login(bob)
    issued = client.post("/tokens/", {"name": "scripts"})
    assert (issued.status_code, issued.url) == (302, "/tokens/")  # a reload cannot repeat it
    page = client.get("/tokens/").content.decode()
    key = re.search(r'id="new-key">(wk_[^<]+)<', page).group(1)
    assert key not in client.get("/tokens/").content.decode()  # shown once
    token = ApiToken.objects.get()  # the reloads issued nothing more
    assert token.key_hash != key and key.endswith(token.hint)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/workloads/").status_code == 200


def test_revoking_stops_the_token_and_others_cannot_revoke_it(bob, charlie, client):
    token, key = ApiToken.issue(bob.membership, "scripts")
    client.force_login(charlie)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    client.force_login(bob)
    client.post(f"/tokens/{token.pk}/revoke/")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/workloads/").status_code == 401
