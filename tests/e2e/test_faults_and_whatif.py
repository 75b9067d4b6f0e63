"""The operator's fault drill and what-if pages and the submit form's checkpoint advisor in a
real browser, against daphne, a Celery worker and the simulated fleet."""

import re

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import expect

from portal.cluster.models import Node
from portal.whatif.models import WhatIfRun
from portal.workloads.choices import RecoveryOutcome, RecoveryStep, State
from portal.workloads.models import Recovery
from portal.workloads.tasks import run_cycle
from scheduler.sim.policies import POLICIES
from tests.builders import make_cluster, make_queue, make_workload
from tests.portal.processes import start_fleet, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOAD_MS = 15_000  # a page, script or request on a busy two-core machine


def sign_in(page, base, user):
    """Give the page's browser context a signed-in session of `user` (the login form itself is
    tested in test_dashboard.py)."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": base}])


def open_live(page, url):
    """Open `url` and wait for its live connection; mark the document so that a reload shows."""
    page.goto(url)
    expect(page.locator("#live-status")).to_have_class("live-on", timeout=LOAD_MS)
    page.evaluate("window.notReloaded = true")


@pytest.fixture
def fleet_with_spare(portal_server, celery_worker, clean_redis):
    """One leaf of four simulated H800 nodes, the last a hot spare; yields the portal's URL."""
    nodes = make_cluster({"dc1": {"p1": ("H800", 1)}}, connected=False)
    Node.objects.filter(pk=nodes[-1].pk).update(spare=True)
    fleet = start_fleet(portal_server)
    wait_until(
        lambda: Node.objects.filter(connected=True).count() == 4,
        30,
        "4 agents to register",
        check=fleet,
    )
    yield f"http://127.0.0.1:{portal_server}"
    fleet.stop()


def test_a_fault_drill_watched_live_then_the_job_page_tells_the_member(
    fleet_with_spare, browser, page, acme, bob, operator
):
    base = fleet_with_spare
    workload = make_workload(
        make_queue(acme, "llm", h800=32),
        "llama-8b",
        gpus=16,
        checkpoint_policy="triggered",
        simulated_duration_s=600,
    )
    run_cycle.delay()  # by the worker: this thread runs Playwright's event loop
    wait_until(lambda: _state(workload) == State.RUNNING, 30, "the job to run")
    victim = workload.allocations.order_by("node_rank").last().node

    sign_in(page, base, operator)
    open_live(page, f"{base}/ops/drill/")
    page.eval_on_selector("select[name=node]", "(s) => { s.add(new Option('gone', '0')); }")
    page.select_option("select[name=node]", "0")
    page.click("#drill-form button[type=submit]")  # a node that has gone meanwhile
    page.click("#confirm-dialog button[value=yes]")
    expect(page.locator(".flash.error")).to_have_text(
        "Not sent: the portal answered 404.", timeout=LOAD_MS
    )
    page.select_option("select[name=node]", str(victim.pk))
    page.select_option("select[name=code]", "xid-79")
    page.click("#drill-form button[type=submit]")
    expect(page.locator("#confirm-dialog")).to_contain_text("llama-8b of Acme (8 GPUs)")
    page.click("#confirm-dialog button[value=yes]")
    expect(page.locator(".flash")).to_have_text(
        f"xid-79 sent to {victim.name}; watch below.", timeout=LOAD_MS
    )
    expect(page.locator("#drills tr").first).to_contain_text("xid-79", timeout=LOAD_MS)

    fault = page.locator("#fault-feed li[data-fault]")
    expect(fault).to_have_count(1, timeout=15_000)
    expect(fault).to_contain_text(f"xid-79 on {victim.name}")
    expect(fault).to_contain_text("1 job(s) hit")
    row = page.locator("#recoveries tbody tr", has_text="llama-8b")
    expect(row.locator("[data-k=step]")).to_have_text(RecoveryStep.DONE, timeout=30_000)
    expect(row.locator("[data-k=outcome]")).to_have_text(RecoveryOutcome.SPARE)
    expect(row.locator("td").nth(2)).to_have_text(f"xid-79 on {victim.name}")
    assert page.evaluate("window.notReloaded")
    page.screenshot(path=settings.DATA_DIR / "fault-drill.png", full_page=True)
    assert Recovery.objects.get(workload=workload).outcome == RecoveryOutcome.SPARE

    member = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    try:
        sign_in(member, base, bob)
        member.goto(f"{base}/workloads/{workload.pk}/")
        expect(member.locator("#ettr-timeline svg.main-svg").first).to_be_visible(timeout=LOAD_MS)
        phases = member.evaluate("document.getElementById('ettr-timeline').data.map((t) => t.name)")
        assert {"productive", "recovering"} <= set(phases)
        expect(member.locator("#recoveries tbody tr")).to_have_count(1)
        expect(member.locator("#recoveries tbody tr")).to_contain_text("Restarted on hot spares")
    finally:
        member.context.close()


def test_a_what_if_run_moves_its_progress_bar_live_and_shows_its_report(
    portal_server, celery_worker, page, operator
):
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, operator)
    open_live(page, f"{base}/ops/whatif/")
    page.select_option("select[name=trace]", "philly")
    page.select_option("select[name=cluster]", "trace")
    page.fill("input[name=days]", "20")
    page.click("button:has-text('Run')")
    page.wait_for_url(re.compile(r"/ops/whatif/\d+/$"))
    run = WhatIfRun.objects.get()
    assert page.url == f"{base}/ops/whatif/{run.pk}/"
    expect(page.locator("#live-status")).to_have_class("live-on", timeout=LOAD_MS)
    page.evaluate("window.notReloaded = true")
    assert page.evaluate("document.getElementById('whatif-progress').value") < 1

    expect(page.locator("#whatif-progress")).to_have_js_property("value", 1, timeout=40_000)
    expect(page.locator("#whatif-state")).to_have_text("done")
    report = page.frame_locator("#whatif-report")
    expect(report.locator("h1")).to_contain_text(f"What-if {run.pk}", timeout=LOAD_MS)
    expect(report.locator(".js-plotly-plot").first).to_be_visible(timeout=15_000)
    assert page.evaluate("window.notReloaded")
    run.refresh_from_db()
    assert run.policies == list(POLICIES)  # every box was left ticked


def test_the_submit_form_advises_the_triggered_policy_for_a_huge_job(portal_server, page, bob):
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, bob)
    page.goto(f"{base}/workloads/new/")
    expect(page.locator("#advice")).to_contain_text("Expected ETTR at 16 GPUs", timeout=LOAD_MS)
    page.fill("input[name=gpus]", "16384")

    expect(page.locator("#advice thead")).to_contain_text(
        "Expected ETTR at 16384 GPUs", timeout=LOAD_MS
    )
    rows = page.locator("#advice tbody tr")
    expect(rows.first.locator("td").first).to_have_text("triggered")
    assert float(rows.first.locator("td").nth(2).inner_text()) >= 0.96
    ettrs = [float(text) for text in rows.locator("td:nth-child(3)").all_inner_texts()]
    assert ettrs == sorted(ettrs, reverse=True) and len(ettrs) == 4


def test_the_submit_form_offers_the_chosen_queues_models_and_families(
    portal_server, page, cluster, acme, bob
):
    """The first queue (by name) holds H800 only; the second H800 and H20, both hopper: chosen,
    the form offers them, and the hopper family, as models to run on also."""
    make_queue(acme, "a-small", h800=8)
    make_queue(acme, "b-mixed", h800=8, h20=8)
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, bob)
    page.goto(f"{base}/workloads/new/")
    boxes = page.locator(".also-choices input[name=also]")
    expect(boxes).to_have_count(1, timeout=LOAD_MS)
    page.select_option("select[name=queue]", "b-mixed")
    expect(boxes).to_have_count(3)
    assert [box.get_attribute("value") for box in boxes.all()] == ["H20", "H800", "hopper"]
    expect(page.locator(".also-choices")).to_contain_text("hopper family (H20, H800)")


def _state(workload):
    workload.refresh_from_db()
    return workload.state
