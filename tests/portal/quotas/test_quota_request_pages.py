"""The operators' quota-request pages: every tenant's requests with the capacity check, and a
confirmation page for each decision, which `QuotaRequest.decide` carries out."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.core.models import AuditEvent
from portal.quotas.models import QueueQuota
from tests.builders import make_queue, make_quota_request

# cn-east has 96 H800 GPUs (tests.builders.make_cluster); acme/llm holds 64 of them.


def _row(page, quota_request):
    found = re.search(rf'<tr data-quota-request="{quota_request.pk}".*?</tr>', page, re.S)
    return found.group(0) if found else None


@pytest.fixture
def globex_vision(cluster, globex):
    return make_queue(globex, "vision")


def test_operators_see_every_tenants_pending_requests_with_the_capacity_check(
    acme_llm, globex_vision, alice, charlie, operator, client
):
    fits = make_quota_request(acme_llm, 16, alice, reason="a bigger model")
    too_big = make_quota_request(globex_vision, 40, charlie)
    decided = make_quota_request(acme_llm, 8, alice)
    assert decided.decide(operator, approve=False, note="not now")
    client.force_login(operator)
    page = client.get("/ops/quota-requests/").content.decode()
    assert 'href="/ops/quota-requests/"' in page  # the nav link
    first = _row(page, fits)
    assert "acme" in first.lower() and "a bigger model" in first and "alice" in first
    assert "64 committed + 16 requested = 80 of 96 GPUs: fits" in first
    assert 'data-fits="yes"' in first
    assert f'href="/ops/quota-requests/{fits.pk}/approve/"' in first
    assert f'href="/ops/quota-requests/{fits.pk}/reject/"' in first
    second = _row(page, too_big)
    assert "globex" in second.lower() and "charlie" in second
    assert "64 committed + 40 requested = 104 of 96 GPUs: does not fit" in second
    assert 'data-fits="no"' in second
    assert _row(page, decided) is None  # pending only, unless asked
    everything = client.get("/ops/quota-requests/?status=all").content.decode()
    rows = re.findall(r'<tr data-quota-request="(\d+)"', everything)
    assert rows == [str(fits.pk), str(too_big.pk), str(decided.pk)]  # pending first
    row = _row(everything, decided)
    assert "operator" in row and "not now" in row and "committed" not in row
    assert "/approve/" not in row
    only = client.get(f"/ops/quota-requests/?tenant={globex_vision.tenant.pk}").content.decode()
    assert _row(only, too_big) and not _row(only, fits)
    rejected = client.get("/ops/quota-requests/?status=rejected").content.decode()
    assert re.findall(r'<tr data-quota-request="(\d+)"', rejected) == [str(decided.pk)]


def test_members_are_not_let_in(acme_llm, alice, client):
    quota_request = make_quota_request(acme_llm, 16, alice)
    client.force_login(alice)
    assert client.get("/ops/quota-requests/").status_code in (302, 403)
    url = f"/ops/quota-requests/{quota_request.pk}/approve/"
    assert client.get(url).status_code in (302, 403)
    assert client.post(url, {"note": "mine"}).status_code in (302, 403)
    quota_request.refresh_from_db()
    assert quota_request.status == "pending"
    assert QueueQuota.objects.get(queue=acme_llm).nominal == 64
    assert 'href="/ops/quota-requests/"' not in client.get("/").content.decode()


def test_approving_through_the_page_raises_the_quota_and_is_audited(
    acme_llm, alice, operator, client
):
    quota_request = make_quota_request(acme_llm, 16, alice)
    client.force_login(operator)
    url = f"/ops/quota-requests/{quota_request.pk}/approve/"
    confirm = client.get(url).content.decode()
    assert "64 committed + 16 requested = 80 of 96 GPUs: fits" in confirm
    assert 'name="note"' in confirm and "more" in confirm
    done = client.post(url, {"note": "enjoy"}, follow=True)
    assert done.redirect_chain == [("/ops/quota-requests/", 302)]
    assert "Approved: 16 H800 GPUs for acme/llm." in done.content.decode()
    quota_request.refresh_from_db()
    assert (quota_request.status, quota_request.decided_by) == ("approved", operator)
    assert quota_request.decision_note == "enjoy"
    assert QueueQuota.objects.get(queue=acme_llm).nominal == 80
    entry = AuditEvent.objects.get(action="quota_request.approved")
    assert (entry.actor, entry.object_id, entry.data["count"]) == (
        operator,
        str(quota_request.pk),
        16,
    )


def test_a_rejection_needs_a_note(acme_llm, alice, operator, client):
    quota_request = make_quota_request(acme_llm, 16, alice)
    client.force_login(operator)
    url = f"/ops/quota-requests/{quota_request.pk}/reject/"
    blank = client.post(url, {"note": "  "})
    assert blank.status_code == 200
    assert "Say why: the tenant reads it with the decision." in blank.content.decode()
    quota_request.refresh_from_db()
    assert quota_request.status == "pending"
    assert not AuditEvent.objects.filter(action="quota_request.rejected").exists()
    done = client.post(url, {"note": "the region is full"}, follow=True)
    assert "Rejected: 16 H800 GPUs for acme/llm." in done.content.decode()
    quota_request.refresh_from_db()
    assert (quota_request.status, quota_request.decision_note) == (
        "rejected",
        "the region is full",
    )
    assert QueueQuota.objects.get(queue=acme_llm).nominal == 64


def test_deciding_a_decided_request_says_so_and_changes_nothing(acme_llm, alice, operator, client):
    quota_request = make_quota_request(acme_llm, 16, alice)
    assert quota_request.decide(operator, approve=False, note="no")
    client.force_login(operator)
    url = f"/ops/quota-requests/{quota_request.pk}/approve/"
    confirm = client.get(url).content.decode()
    assert "Already decided" in confirm and 'name="note"' not in confirm
    page = client.post(url, {"note": "yes after all"}, follow=True).content.decode()
    assert "Nothing changed: this request was already decided (Rejected by operator)." in page
    quota_request.refresh_from_db()
    assert (quota_request.status, quota_request.decision_note) == ("rejected", "no")
    assert QueueQuota.objects.get(queue=acme_llm).nominal == 64
    assert AuditEvent.objects.filter(action__startswith="quota_request.").count() == 1


def test_an_approval_that_no_longer_fits_is_refused(acme_llm, alice, operator, client):
    quota_request = make_quota_request(acme_llm, 16, alice)
    client.force_login(operator)
    url = f"/ops/quota-requests/{quota_request.pk}/approve/"
    assert "80 of 96 GPUs: fits" in client.get(url).content.decode()
    # Meanwhile another approval takes the region to 88 of 96.
    assert make_quota_request(acme_llm, 24, alice).decide(operator, approve=True)
    page = client.post(url, {"note": ""}, follow=True).content.decode()
    assert "Not approved: it no longer fits the region" in page
    assert "88 committed + 16 requested = 104 of 96 GPUs: does not fit" in page
    quota_request.refresh_from_db()
    assert quota_request.status == "pending"
    assert QueueQuota.objects.get(queue=acme_llm).nominal == 88


def test_an_unknown_decision_goes_back_to_the_list(acme_llm, alice, operator, client):
    quota_request = make_quota_request(acme_llm, 16, alice)
    client.force_login(operator)
    answer = client.post(f"/ops/quota-requests/{quota_request.pk}/maybe/", {"note": "x"})
    assert answer.status_code == 302 and answer.url == "/ops/quota-requests/"
    quota_request.refresh_from_db()
    assert quota_request.status == "pending"


def test_the_list_costs_the_same_for_2_and_20_requests(
    acme_llm, globex_vision, alice, charlie, operator, client
):
    client.force_login(operator)

    def queries():
        with CaptureQueriesContext(connection) as captured:
            page = client.get("/ops/quota-requests/?status=all").content.decode()
        return len(captured), page.count("<tr data-quota-request=")

    make_quota_request(acme_llm, 8, alice)
    make_quota_request(globex_vision, 8, charlie).decide(operator, approve=False, note="no")
    few = queries()
    for i in range(9):
        make_quota_request(acme_llm, 8, alice)
        make_quota_request(globex_vision, 8, charlie).decide(operator, approve=i % 2 == 0, note="n")
    many = queries()
    assert (few[1], many[1]) == (2, 20)
    assert few[0] == many[0]
