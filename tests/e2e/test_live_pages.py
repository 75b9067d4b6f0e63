"""Live pages that can be trusted, in a real browser: an event sent while the page was not
listening is caught up with when its socket opens; lists gain, update and drop rows in order;
a fault that hit another tenant never shows in the feed."""

import threading

import pytest
from django.db import connection

from portal.agents.intake import record_fault
from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload, transition
from scheduler import faults
from tests.builders import api_client, make_queue, make_workload
from tests.e2e.test_dashboard import sign_in
from tests.portal.processes import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def off_the_browser_thread(work):
    """Run `work` on a thread of its own: this one runs the browser's event loop, and what
    tells browsers (the channel layer) cannot run inside it. What it raises is raised here."""
    failed = []

    def run():
        try:
            work()
        except BaseException as error:
            failed.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if failed:
        raise failed[0]


def _move(workload, *states):
    def work():
        for state in states:
            transition(workload, state, f"to {state}")
            workload.save()

    off_the_browser_thread(work)


class Gate:
    """Holds the page's live socket closed-off (mocked, hearing nothing) until opened; then
    every connection goes through to the server."""

    def __init__(self, page):
        self.open, self.held = False, []
        page.route_web_socket("**/ws/live/", self._route)

    def _route(self, ws):
        if self.open:
            ws.connect_to_server()
        else:
            self.held.append(ws)

    def release(self):
        self.open = True
        for ws in self.held:
            ws.close()  # the page reconnects, through to the server this time


def test_a_job_page_catches_up_with_what_happened_before_it_listened(
    portal_server, clean_redis, page, cluster, acme, bob
):
    base = f"http://127.0.0.1:{portal_server}"
    job = make_workload(make_queue(acme, "llm", h800=32), "late", gpus=8)
    _move(job, State.ADMITTED)
    gate = Gate(page)
    sign_in(page, base, "bob", "pw-bob")
    page.goto(f"{base}/workloads/{job.pk}/")
    assert page.locator("h1 [data-state]").inner_text() == "admitted"
    wait_until(lambda: gate.held, 10, "the page's socket")
    _move(Workload.objects.get(pk=job.pk), State.STARTING, State.RUNNING)  # unheard
    page.wait_for_timeout(500)
    assert page.locator("h1 [data-state]").inner_text() == "admitted"  # it could not know
    gate.release()
    wait_until(lambda: page.locator("h1 [data-state]").inner_text() == "running", 15, "running")
    assert "to running" in page.locator("#timeline").inner_text()


def test_the_list_gains_updates_and_drops_rows_and_the_feed_keeps_to_its_tenant(
    portal_server, clean_redis, page, cluster, acme, globex, bob
):
    base = f"http://127.0.0.1:{portal_server}"
    queue = make_queue(acme, "llm", h800=32)
    old = make_workload(queue, "old", gpus=8)
    Node.objects.update(health=Health.CORDONED)  # all stay pending, whatever a worker cycles
    sign_in(page, base, "bob", "pw-bob")
    page.goto(f"{base}/workloads/?state=pending")
    page.wait_for_selector("#live-status.live-on")
    names = lambda: page.locator("tbody tr[data-workload] td:first-child").all_inner_texts()  # noqa: E731
    assert names() == ["old"]

    def submit():
        api = api_client(bob)
        for name in ("new-1", "new-2"):
            spec = {"name": name, "queue": "llm", "gpu_model": "H800", "gpus": 8}
            assert api.post("/api/v1/workloads/", spec, format="json").status_code == 201

    off_the_browser_thread(submit)
    wait_until(lambda: names() == ["new-2", "new-1", "old"], 15, "the new rows, newest first")
    _move(old, State.CANCELLED)  # it leaves the list's filter (pending)
    wait_until(lambda: names() == ["new-2", "new-1"], 15, "the cancelled row gone")

    page.goto(f"{base}/")
    page.wait_for_selector("#live-status.live-on")
    theirs = make_workload(make_queue(globex, "train", h800=32), "theirs", gpus=8)

    def fault():
        Node.objects.update(health=Health.READY)
        scheduling_cycle()
        node = Workload.objects.get(pk=theirs.pk).allocations.first().node_id
        record_fault(node, faults.lookup("xid-79"), "fell off the bus")

    off_the_browser_thread(fault)
    page.wait_for_timeout(1500)
    assert "xid-79" not in page.locator("#fault-feed").inner_text()  # Globex's, not Acme's
    assert page.locator("#fault-feed .none").count() == 1
