"""A node's GPU history on its page and from its endpoint, as JSON for the charts or CSV with
DCGM's column names; by range; for operators only."""

import csv
import io
import json
import time

import pytest

from portal.cluster.gpu_history import HOURS
from tests.portal.cluster.test_gpu_history import seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(cluster, clean_redis):
    node = cluster[0]
    # Two hours of minutes, 3 GPUs, the newest 30 s ago: a test well under 30 s reads them all.
    seed(node.pk, time.time() + 30, 120, gpus=3)
    return node


def test_the_json_holds_the_range_asked_gpu_by_gpu(node, client, operator):
    client.force_login(operator)
    hour = client.get(f"/ops/nodes/{node.pk}/gpus.json?range=1h").json()
    assert hour["range"] == "1h" and len(hour["ts"]) == 60
    assert [g["index"] for g in hour["gpus"]] == [0, 1, 2]
    assert set(hour["gpus"][2]["util"]) == {21}
    assert hour["until"] - hour["since"] == 3600
    assert len(client.get(f"/ops/nodes/{node.pk}/gpus.json?range=6h").json()["ts"]) == 120
    week = client.get(f"/ops/nodes/{node.pk}/gpus.json?range=7d").json()["ts"]
    assert 1 <= len(week) <= 2 and all(ts % 3600 == 0 for ts in week)  # the hours that ended


def test_the_csv_has_a_row_per_time_and_gpu_under_dcgm_names(node, client, operator):
    client.force_login(operator)
    response = client.get(f"/ops/nodes/{node.pk}/gpus.csv?range=1h")
    assert response["Content-Type"].startswith("text/csv")
    assert f'filename="{node.name}-gpus-1h.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["time", "gpu", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                       "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]  # fmt: skip
    assert len(rows) == 1 + 60 * 3
    assert rows[1][0].endswith("+00:00") and rows[1][1:] == ["0", "1", "1000", "40", "300"]
    assert len(list(csv.reader(io.StringIO(
        client.get(f"/ops/nodes/{node.pk}/gpus.csv?range=24h").content.decode()
    )))) == 1 + 120 * 3  # fmt: skip


def test_a_long_range_comes_from_the_hours(node, client, operator, clean_redis):
    clean_redis.delete(f"{HOURS}{node.pk}")
    clean_redis.rpush(f"{HOURS}{node.pk}", json.dumps([time.time() - 2 * 86400, [[0, 7, 1, 2, 3]]]))
    client.force_login(operator)
    week = client.get(f"/ops/nodes/{node.pk}/gpus.json?range=7d").json()
    assert week["gpus"][0]["util"] == [7]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_bogus_range_is_refused_with_the_ranges_there_are(node, client, operator, fmt):
    client.force_login(operator)
    response = client.get(f"/ops/nodes/{node.pk}/gpus.{fmt}?range=2w")
    assert response.status_code == 400
    assert response.json()["error"] == "Unknown range “2w”: ask for one of 1h, 6h, 24h, 7d, 30d."


def test_only_operators_read_a_nodes_history(node, client, bob, operator):
    url = f"/ops/nodes/{node.pk}/gpus.json?range=1h"
    assert client.get(url).status_code == 403  # signed out
    client.force_login(bob)  # a tenant's member
    assert client.get(url).status_code == 403
    assert client.get(f"/ops/nodes/{node.pk}/gpus.csv").status_code == 403
    client.force_login(operator)
    assert client.get(url).status_code == 200
    assert client.get(f"/ops/nodes/{node.pk}/gpus.xml").status_code == 404
    assert client.get("/ops/nodes/999999/gpus.json").status_code == 404


def test_the_page_brings_its_ranges_points_and_the_switch(
    node, client, operator, django_assert_max_num_queries
):
    client.force_login(operator)
    with django_assert_max_num_queries(12):
        page = client.get(f"/ops/nodes/{node.pk}/?range=6h").content.decode()
    start = page.index('<script id="node-telemetry-data" type="application/json">')
    embedded = json.loads(page[page.index(">", start) + 1 : page.index("</script>", start)])
    assert embedded["range"] == "6h" and len(embedded["ts"]) == 120
    assert 'data-range="6h" aria-current="true"' in page
    assert f'href="/ops/nodes/{node.pk}/gpus.csv?range=6h" id="node-telemetry-csv"' in page
    bogus = client.get(f"/ops/nodes/{node.pk}/?range=2w").content.decode()
    assert 'data-range="1h" aria-current="true"' in bogus  # the page falls back to an hour
