"""Small things the pages must get right: a filter that is not valid, a list longer than a
page, the icon browsers ask for, what a viewer is offered, refusals that say why."""

from portal.dashboard import views
from tests.builders import make_workload


def test_a_bad_filter_shows_its_error_and_no_rows(acme_llm, bob, client):
    make_workload(acme_llm, "visible", gpus=8)
    client.force_login(bob)
    page = client.get("/workloads/?state=bogus").content.decode()
    assert "Select a valid choice" in page and "visible" not in page
    assert "visible" in client.get("/workloads/?state=pending").content.decode()


def test_a_list_longer_than_a_page_says_so(acme_llm, bob, client, monkeypatch):
    monkeypatch.setattr(views, "LIST_ROWS", 2)
    for i in range(3):
        make_workload(acme_llm, f"job-{i}", gpus=1)
    client.force_login(bob)
    page = client.get("/workloads/").content.decode()
    assert "Showing the newest 2 of 3" in page
    assert "job-2" in page and "job-0" not in page


def test_the_icon_browsers_ask_for_is_there(client, db):
    response = client.get("/favicon.ico")
    assert (response.status_code, response["Location"]) == (301, "/static/favicon.svg")


def test_a_viewer_is_not_offered_submit_and_a_refusal_says_why(acme_llm, victor, client):
    client.force_login(victor)
    for page in ("/", "/workloads/"):
        assert "Submit a job" not in client.get(page).content.decode()
    refused = client.get("/workloads/new/")
    body = refused.content.decode()
    assert refused.status_code == 403
    assert "Your role does not allow this." in body and "You are viewer in Acme" in body
    assert 'class="top"' in body  # the portal's page, with its navigation, not a bare one


def test_another_tenants_job_is_a_styled_not_found_that_names_nothing(acme_llm, charlie, client):
    theirs = make_workload(acme_llm, "acme-secret")
    client.force_login(charlie)
    missing = client.get(f"/workloads/{theirs.pk}/")
    body = missing.content.decode()
    assert missing.status_code == 404 and "not one you can see" in body
    assert "acme-secret" not in body and "Workload" not in body.split("<main>")[1]
