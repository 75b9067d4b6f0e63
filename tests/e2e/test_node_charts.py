"""A node's DCGM-style charts in a real browser: a chart per figure with a line per GPU, in the
reader's time zone, another range fetched when asked, and an empty history drawn empty."""

import json
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from portal.cluster.gpu_history import HOURS
from tests.e2e.test_dashboard import sign_in
from tests.portal.cluster.test_gpu_history import seed
from tests.portal.processes import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS = ["gpu-util-chart", "gpu-memory-chart", "gpu-temperature-chart", "gpu-power-chart"]


def charts(page) -> list[dict]:
    """Per chart: its traces' names and point counts, and its message if any."""
    return page.evaluate(
        """(ids) => ids.map((id) => {
          const chart = document.getElementById(id);
          return {names: chart.data.map((t) => t.name), points: chart.data.map((t) => t.x.length),
                  note: (chart.layout.annotations || []).map((a) => a.text).join()};
        })""",
        CHARTS,
    )


@pytest.fixture
def shanghai(browser):
    """A page whose clock is in Shanghai (UTC+8); it fails the test on any script error."""
    context = browser.new_context(
        timezone_id="Asia/Shanghai", viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, errors


def test_a_chart_per_figure_a_line_per_gpu_and_ranges_fetched(
    portal_server, clean_redis, shanghai, cluster, operator
):
    node = cluster[0]
    now = time.time()
    seed(node.pk, now + 30, 90, gpus=8)  # an hour and a half of minutes, the newest 30 s ago
    clean_redis.delete(f"{HOURS}{node.pk}")
    for hours_ago in (50, 40, 30):
        rows = [[i, 50, 2048, 60, 400] for i in range(8)]
        clean_redis.rpush(f"{HOURS}{node.pk}", json.dumps([now - 3600 * hours_ago, rows]))
    base = f"http://127.0.0.1:{portal_server}"
    page = shanghai
    sign_in(page, base, "operator", "pw-operator")
    page.goto(f"{base}/ops/nodes/{node.pk}/")
    page.wait_for_selector("#gpu-power-chart.js-plotly-plot")

    drawn = charts(page)
    for chart in drawn:  # the page's hour: 60 minutes of each of the 8 GPUs
        assert chart["names"] == [f"GPU {i}" for i in range(8)]
        assert set(chart["points"]) == {60} and chart["note"] == ""
    memory = page.evaluate("document.getElementById('gpu-memory-chart').data[0].y[0]")
    assert memory == pytest.approx(1000 / 1024)  # MiB drawn as GiB
    # The axis ends now, on the reader's clock (Plotly turns a Date into its local time).
    end = page.evaluate("document.getElementById('gpu-util-chart')._fullLayout.xaxis.range[1]")
    shown = datetime.fromisoformat(end).replace(tzinfo=ZoneInfo("Asia/Shanghai"))
    assert abs(shown.timestamp() - now) < 60

    with page.expect_response(lambda r: "gpus.json?range=7d" in r.url) as response:
        page.click("#node-telemetry-ranges >> text=7 days")
    assert response.value.ok
    # Polled from here, as the page's Content-Security-Policy forbids wait_for_function's eval.
    points = "document.getElementById('gpu-temperature-chart').data[0].x.length"
    wait_until(lambda: page.evaluate(points) == 3, 10, "the week's points")
    for chart in charts(page):  # the week: the three hour points
        assert chart["names"] == [f"GPU {i}" for i in range(8)] and set(chart["points"]) == {3}
    assert page.locator("#node-telemetry-ranges [aria-current=true]").inner_text() == "7 days"
    assert page.get_attribute("#node-telemetry-csv", "href").endswith("gpus.csv?range=7d")
    assert page.url.endswith("?range=7d")


def test_a_node_without_history_draws_empty_charts_that_say_so(
    portal_server, clean_redis, shanghai, cluster, operator
):
    base = f"http://127.0.0.1:{portal_server}"
    page = shanghai
    sign_in(page, base, "operator", "pw-operator")
    page.goto(f"{base}/ops/nodes/{cluster[0].pk}/?range=24h")
    page.wait_for_selector("#gpu-power-chart.js-plotly-plot")
    for chart in charts(page):
        assert chart["names"] == [] and chart["note"] == "No telemetry yet"
    with page.expect_response(lambda r: "gpus.json?range=30d" in r.url):
        page.click("#node-telemetry-ranges >> text=30 days")
    current = "document.querySelector('#node-telemetry-ranges [aria-current=true]').dataset.range"
    wait_until(lambda: page.evaluate(current) == "30d", 10, "the 30-day range current")
    assert all(chart["note"] == "No telemetry yet" for chart in charts(page))
