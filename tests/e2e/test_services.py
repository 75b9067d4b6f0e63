"""The inference service pages in a real browser: create a service through the form (a wrong
one is refused field by field), then its page charts the autoscaler's samples."""

import pytest

from portal.services import autoscaling
from portal.services.models import Service
from tests.builders import make_cluster, make_queue
from tests.e2e.test_dashboard import sign_in
from tests.e2e.test_live_pages import off_the_browser_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_service_is_created_from_its_form_and_charted(portal_server, page, acme, bob):
    make_cluster()
    make_queue(acme, "infer", h800=32)
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, "bob", "pw-bob")
    page.click("nav >> text=Services")
    page.fill("input[name=name]", "chat")
    page.select_option("select[name=gpu_model]", "H800")
    page.fill("input[name=min_replicas]", "3")
    page.fill("input[name=max_replicas]", "2")
    page.click("#service-form button[type=submit]")
    assert "min_replicas <= max_replicas" in page.locator(".error").first.inner_text()
    assert not Service.objects.exists()

    page.fill("input[name=min_replicas]", "2")
    page.fill("input[name=max_replicas]", "4")
    page.click("#service-form button[type=submit]")
    page.wait_for_selector("h1:has-text('chat')")
    off_the_browser_thread(autoscaling.tick)  # beat's tick: the two replicas it starts with
    page.reload()
    assert page.locator("#replicas tbody tr").count() == 2
    assert "Wanted: 2 replicas" in page.locator("#scale").inner_text()
    page.wait_for_selector("#service-chart.js-plotly-plot")
    wanted = page.evaluate("document.getElementById('service-chart').data[2].y")
    assert wanted == [2]
    ticks = page.locator("#service-chart .y2tick text").all_text_contents()  # the replica axis
    assert ticks and all(tick.isdigit() for tick in ticks)  # whole replicas, never 0.5
    page.click("nav >> text=Services")
    assert page.locator("#services tbody tr").inner_text().split("\t")[3].startswith("2 / 2")
