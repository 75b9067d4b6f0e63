"""Small things the pages must get right: a filter that is not valid, a list longer than a
page, the icon browsers ask for, what a viewer is offered, refusals that say why."""

import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.utils import timezone

from portal.dashboard import views
from portal.workloads.choices import PriorityClass, State
from portal.workloads.models import Workload
from tests.builders import api_client, make_workload


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


@pytest.mark.servers
def test_the_list_sorts_by_estimated_start_as_the_api_does(acme_llm, bob, operator, client):
    """Soonest first, jobs without an estimate last (on SQLite and PostgreSQL alike, which put
    NULL at opposite ends), ties by newest; the live list asks the API with the same query, so
    both must agree, and so does the operators' list."""
    now = timezone.now()
    starts = {"later": 2, "none-a": None, "soon": 1, "tie": 2, "none-b": None}
    for name, hours in starts.items():
        at = None if hours is None else now + timedelta(hours=hours)
        make_workload(acme_llm, name, gpus=1, estimated_start=at)
    client.force_login(bob)
    page = client.get("/workloads/?ordering=estimated_start").content.decode()
    names = re.findall(r'<a href="/workloads/\d+/">([^<]+)</a>', page)
    assert names == ["soon", "tie", "later", "none-b", "none-a"]
    api = api_client(bob).get("/api/v1/workloads/?ordering=estimated_start").json()
    assert [w["name"] for w in api["results"]] == names
    latest = api_client(bob).get("/api/v1/workloads/?ordering=-estimated_start").json()
    assert [w["name"] for w in latest["results"]] == ["tie", "later", "soon", "none-b", "none-a"]
    assert "Soonest estimated start first" in page  # offered in the filter form
    refused = client.get("/workloads/?ordering=bogus").content.decode()
    assert "Select a valid choice" in refused and "soon" not in refused
    client.force_login(operator)
    ops = client.get("/ops/workloads/?sort=estimated_start").content.decode()
    assert re.findall(r'<a href="/ops/workloads/\d+/">([^<]+)</a>', ops) == names


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


class _Form(HTMLParser):
    """The values a browser would post from a page's form (inputs, checked boxes, selected
    options, text areas), without its buttons."""

    def __init__(self):
        super().__init__()
        self.values, self._select, self._area = {}, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("type") != "checkbox" and a.get("value"):
            self.values[a["name"]] = a["value"]
        elif tag == "input" and "checked" in a:
            self.values[a["name"]] = "on"
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and "selected" in a and "value" in a:
            self.values[self._select] = a["value"]
        elif tag == "option" and "selected" in a:
            self._option = self._select  # its text is its value
        elif tag == "textarea":
            self._area = a["name"]

    def handle_data(self, data):
        if self._area:
            self.values[self._area] = data
        if getattr(self, "_option", None):
            self.values[self._option], self._option = data.strip(), None

    def handle_endtag(self, tag):
        self._area = None if tag == "textarea" else self._area


def test_a_job_is_cloned_and_resubmitted_with_its_whole_request(acme_llm, bob, charlie, client):
    first = make_workload(
        acme_llm, "llama-8b", gpus=16, min_gpus=8, max_gpus=32, priority=PriorityClass.HIGH,
        command="torchrun train.py", env={"NCCL_DEBUG": "WARN", "SEED": "7"}, time_limit_s=7200,
        checkpoint_interval_s=900, state=State.FAILED,
    )  # fmt: skip
    client.force_login(bob)
    job_page = client.get(f"/workloads/{first.pk}/").content.decode()
    assert f"/workloads/new/?from={first.pk}" in job_page
    form = _Form()
    form.feed(client.get(f"/workloads/new/?from={first.pk}").content.decode())
    assert sorted(form.values["env"].splitlines()) == ["NCCL_DEBUG=WARN", "SEED=7"]
    assert form.values["time_limit_s"] == "7200"
    form.values.pop("csrfmiddlewaretoken", None)
    response = client.post("/workloads/new/", form.values)
    again = Workload.objects.exclude(pk=first.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/workloads/{again.pk}/"
    same = ["name", "queue_id", "gpu_model_id", "gpus", "min_gpus", "max_gpus", "priority",
            "command", "env", "time_limit_s", "checkpoint_interval_s", "topology"]  # fmt: skip
    assert [getattr(again, f) for f in same] == [getattr(first, f) for f in same]
    assert again.state == State.PENDING

    client.force_login(charlie)  # another tenant's job cannot be cloned, nor named
    refused = client.get(f"/workloads/new/?from={first.pk}")
    assert refused.status_code == 404 and "llama-8b" not in refused.content.decode()


def test_an_environment_line_without_a_value_is_refused_on_its_field(acme_llm, bob, client):
    client.force_login(bob)
    page = client.post(
        "/workloads/new/",
        {"name": "x", "queue": "llm", "gpu_model": "H800", "gpus": 8, "kind": "training",
         "priority": 0, "topology": "pod", "checkpoint_policy": "async", "env": "OK=1\nbroken"},
    )  # fmt: skip
    assert page.status_code == 200 and not Workload.objects.exists()
    assert "Must be an object of variable names to values." in page.content.decode()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_action_url_opened_with_get_says_so_on_the_portals_page(alice, bob, client, language):
    """A bookmarked or reloaded action URL (only its form POSTs there): the portal's page, in
    the person's language, not the browser's empty 405; the API keeps its JSON."""
    client.force_login(alice)
    membership = alice.membership
    page = client.get(f"/members/{membership.pk}/role/", headers={"accept-language": language})
    assert page.status_code == 405 and page["Allow"] == "POST"
    text = page.content.decode()
    assert "<nav" in text and ("Not done from a link" if language == "en" else "不能") in text
    api = api_client(bob).get("/api/v1/workloads/1/cancel/")
    assert api.status_code == 405 and api.json()["errors"]
