"""The dashboard in a real browser: sign in, submit a job, watch it run without a reload."""

import pytest
from django.conf import settings

from portal.cluster.models import Node
from tests.builders import make_cluster, make_queue
from tests.portal.processes import start_beat, start_fleet, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def running_portal(portal_server, celery_worker, clean_redis):
    make_cluster(connected=False)
    fleet, beat = start_fleet(portal_server), start_beat()
    wait_until(lambda: Node.objects.filter(connected=True).count() == 16, 30, "agents")
    yield f"http://127.0.0.1:{portal_server}"
    fleet.stop()
    beat.stop()


def sign_in(page, base, username, password):
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def test_a_job_goes_live_on_the_dashboard(running_portal, page, acme, bob):
    make_queue(acme, "llm", h800=32)
    sign_in(page, running_portal, "bob", "pw-bob")
    # The ETTR chart spans its whole day even with no figure or one (it collapsed to a point).
    ends = page.evaluate(
        "document.getElementById('ettr-chart').layout.xaxis.range.map((d) => Date.parse(d))"
    )
    assert abs((ends[1] - ends[0]) / 3600_000 - 24) < 0.01
    page.click("text=Submit a job")
    page.fill("input[name=name]", "live-job")
    page.select_option("select[name=gpu_model]", "H800")
    page.fill("input[name=gpus]", "16")
    page.fill("input[name=simulated_duration_s]", "600")
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('live-job')")
    # The job page asks where the job stands once its socket opens, and reloads if the scheduler
    # got there first; leaving before that settles would abort the next navigation.
    page.wait_for_selector("#live-status.live-on")
    page.wait_for_load_state("networkidle")

    page.goto(f"{running_portal}/")
    page.wait_for_selector("#live-status.live-on")
    page.evaluate("window.notReloaded = true")
    chart = page.locator("#utilization-chart.js-plotly-plot")
    chart.wait_for()
    points_before = page.evaluate("document.getElementById('utilization-chart').data[0].x.length")

    state = page.locator("tr:has-text('live-job') [data-state]")
    state.filter(has_text="running").wait_for(timeout=30_000)
    # Polled from here: Playwright's wait_for_function evaluates a string, which the page's
    # Content-Security-Policy forbids.
    series = "document.getElementById('utilization-chart').data[0]"
    wait_until(lambda: page.evaluate(f"{series}.y.slice(-1)[0] > 0"), 15, "busy GPUs charted")
    wait_until(lambda: page.evaluate(f"{series}.x.length > {points_before}"), 30, "a new point")
    assert page.evaluate("window.notReloaded")
    assert page.locator("#tile-allocated").inner_text() == "16"
    page.screenshot(path=settings.DATA_DIR / "dashboard.png", full_page=True)


def test_signing_in_with_a_wrong_password_says_so(portal_server, page, bob):
    page.goto(f"http://127.0.0.1:{portal_server}/login/")
    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    assert page.locator(".error").inner_text() == "Wrong username or password."


def test_the_console_and_the_api_docs_run_under_the_content_security_policy(
    portal_server, page, operator
):
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, "operator", "pw-operator")
    for path, ready in [
        ("/admin/", "#site-name"),
        ("/admin/quotas/queue/", "#changelist"),
        ("/admin/quotas/queue/add/", "fieldset"),
        ("/api/docs/", ".swagger-ui .info"),
    ]:
        page.goto(base + path)
        page.wait_for_selector(ready, timeout=15_000)
