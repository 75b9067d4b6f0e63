"""Small things the pages must get right: a filter that is not valid, a list longer than a
page, the icon browsers ask for."""

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
