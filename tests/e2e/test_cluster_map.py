"""The cluster map in a real browser: one cell per node in its leaf's row, coloured by health
first, and by utilization once asked."""

import pytest

from portal.cluster.models import Node
from tests.e2e.test_dashboard import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_map_draws_every_node_and_switches_figure(portal_server, page, cluster, operator):
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, "operator", "pw-operator")
    page.click("nav summary:has-text('Fleet')")
    page.click("nav >> text=Cluster map")
    page.wait_for_selector("#cluster-map.js-plotly-plot")
    heatmap = "document.getElementById('cluster-map').data[0]"
    cells = page.evaluate(f"{heatmap}.z.flat().filter((v) => v !== null).length")
    assert cells == Node.objects.count()
    assert page.evaluate(f"{heatmap}.y") == ["dc1 / p1 / l1", "dc1 / p1 / l2", "dc2 / p1 / l1",
                                             "dc2 / p2 / l1"]  # fmt: skip
    page.click("#map-metrics >> text=Utilization")
    assert "Utilization" in page.evaluate(f"{heatmap}.hovertemplate")
    # No heartbeat yet: no figure, so no cell is coloured.
    assert page.evaluate(f"{heatmap}.z.flat().filter((v) => v !== null).length") == 0
    assert page.locator("#map-metrics button[aria-pressed=true]").inner_text() == "Utilization"


def test_a_cell_opens_its_nodes_page(portal_server, page, cluster, operator):
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, "operator", "pw-operator")
    page.goto(f"{base}/ops/cluster/")
    page.wait_for_selector("#cluster-map.js-plotly-plot")
    with page.expect_navigation():
        page.evaluate(
            "document.getElementById('cluster-map').emit('plotly_click', "
            "{points: [{pointIndex: [0, 0]}]})"
        )
    first = Node.objects.order_by("leaf__pod__datacenter__name", "leaf__pod__name",
                                  "leaf__name", "name").first()  # fmt: skip
    assert page.locator("h1").inner_text().startswith(first.name)
    assert "No heartbeat from this node yet." in page.locator("main").inner_text()


def test_a_sliced_gpus_mig_instances_show_in_its_cells_hover(
    portal_server, page, cluster, operator
):
    from portal.cluster.models import Gpu

    node = Node.objects.order_by("leaf__pod__datacenter__name", "leaf__pod__name",
                                 "leaf__name", "name").first()  # fmt: skip
    devices = [{"uuid": "MIG-a", "profile": "3g.40gb", "in_use": True},
               {"uuid": "MIG-b", "profile": "4g.40gb", "in_use": False}]  # fmt: skip
    Gpu.objects.create(node=node, index=0, mig={"enabled": True, "pending": True,
                                                "devices": devices})  # fmt: skip
    base = f"http://127.0.0.1:{portal_server}"
    sign_in(page, base, "operator", "pw-operator")
    page.goto(f"{base}/ops/cluster/")
    page.wait_for_selector("#cluster-map.js-plotly-plot")
    text = page.evaluate("document.getElementById('cluster-map').data[0].text[0][0]")
    assert text.endswith("<br>MIG · GPU 0: 3g.40gb (in use), 4g.40gb")
