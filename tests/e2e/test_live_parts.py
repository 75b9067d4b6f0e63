"""What a page shows stays true while it is open, in both languages: a job's page follows its
start and a fault (state, nodes, recoveries, timeline in the reader's time), a waiting job's
estimate replaces "Estimating…", a service's wanted replicas follow the autoscaler; each
within 2 s of the change, with no reload."""

import re

import pytest

from portal.agents.intake import record_fault
from portal.services import autoscaling
from portal.workloads import eta
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from scheduler import faults
from tests.builders import api_client, make_queue, make_workload
from tests.e2e.test_dashboard import sign_in
from tests.e2e.test_live_pages import off_the_browser_thread
from tests.portal.processes import wait_until
from tests.portal.workloads.test_recovery import start_all

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WITHIN_S = 2.0
LOCAL = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")  # as time.js writes it


@pytest.fixture(params=["en", "zh-hans"])
def reader(request, portal_server, clean_redis, cluster, page, bob):
    """bob's browser, in the parameter's language, on a live page."""
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, "bob", "pw-bob")
    if request.param != "en":
        page.click(f"#language button[value={request.param}]")
    page.evaluate("window.notReloaded = true")
    return base, page, request.param


def _open(page, url):
    page.goto(url)
    page.wait_for_selector("#live-status.live-on")
    page.wait_for_load_state("networkidle")
    page.evaluate("window.notReloaded = true")


def _latin(text: str) -> bool:
    return re.search("[A-Za-z]{3,}", text) is not None


def test_a_job_page_follows_its_start_and_a_fault(reader, acme):
    base, page, language = reader
    job = make_workload(make_queue(acme, "llm", h800=64), "live-job", gpus=16)
    _open(page, f"{base}/workloads/{job.pk}/")
    state = page.locator("#job-summary h1 [data-state]")
    assert "state-pending" in state.get_attribute("class")

    def start():
        scheduling_cycle()
        start_all(Workload.objects.get(pk=job.pk))

    off_the_browser_thread(start)
    wait_until(lambda: "state-running" in state.get_attribute("class"), WITHIN_S, "running")
    nodes = sorted(
        Workload.objects.get(pk=job.pk).allocations.values_list("node__name", flat=True).distinct()
    )
    assert ", ".join(nodes) in page.locator("#job-summary").inner_text()
    stamps = page.locator("#job-timeline time").all_inner_texts()
    assert stamps and all(LOCAL.match(s) for s in stamps), stamps  # all in the reader's time
    assert _latin(state.inner_text()) == (language == "en")
    assert page.locator("#job-recoveries abbr").count() == 0

    victim = Workload.objects.get(pk=job.pk).allocations.first().node_id
    off_the_browser_thread(lambda: record_fault(victim, faults.lookup("xid-79"), "off the bus"))
    wait_until(
        lambda: page.locator("#job-recoveries abbr").all_inner_texts() == ["xid-79"],
        WITHIN_S,
        "the recovery on the page",
    )
    assert "state-recovering" in state.get_attribute("class")
    assert page.evaluate("window.notReloaded") is True


def test_a_waiting_jobs_estimate_replaces_estimating(reader, acme):
    base, page, language = reader
    queue = make_queue(acme, "llm", h800=64)
    off_the_browser_thread(eta.refresh)
    job = make_workload(queue, "waits", gpus=8)
    _open(page, f"{base}/workloads/{job.pk}/")
    summary = page.locator("#job-summary")
    assert ("Estimating…" in summary.inner_text()) == (language == "en")
    assert "估算中" in summary.inner_text() or language == "en"
    off_the_browser_thread(eta.refresh)
    wait_until(
        lambda: "Estimating" not in summary.inner_text() and "估算中" not in summary.inner_text(),
        WITHIN_S,
        "the estimate",
    )


def test_a_service_page_follows_the_autoscaler(reader, acme, bob):
    base, page, _ = reader
    make_queue(acme, "infer", h800=32)
    spec = {"name": "chat", "queue": "infer", "gpu_model": "H800", "gpus_per_replica": 8,
            "min_replicas": 2, "max_replicas": 4, "target_concurrency": 4}  # fmt: skip
    created = []

    def create():
        answer = api_client(bob).post("/api/v1/services/", spec, format="json")
        created.append(answer.json()["id"])

    off_the_browser_thread(create)
    _open(page, f"{base}/services/{created[0]}/")
    wanted = page.locator("#scale b")
    assert wanted.inner_text() == "0"
    off_the_browser_thread(autoscaling.tick)
    wait_until(lambda: wanted.inner_text() == "2", WITHIN_S, "two replicas wanted")
    wait_until(
        lambda: page.locator("#service-replicas tbody tr a").count() == 2, WITHIN_S, "replicas"
    )
    assert page.evaluate("window.notReloaded") is True
