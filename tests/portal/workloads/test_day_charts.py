"""The dashboard's charts of the last day, week or month, kept in Redis for every web process:
the operators' worked out by a beat task before anyone asks, each tenant's only from its own
jobs."""

import json
import re

from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.core.redis import client as redis
from portal.workloads.charts import KEY, SPANS, refresh_cluster
from portal.workloads.cycle import scheduling_cycle
from tests.builders import make_workload


def _charts(page: str) -> dict:
    found = {}
    for name in ("ettr-series", "tide-series"):
        script = re.search(rf'<script id="{name}" type="application/json">(.*?)</script>', page)
        found[name] = json.loads(script.group(1))
    return found


def _training_gpus(charts: dict) -> float:
    return max(charts["tide-series"]["training"])


def test_the_operators_page_reads_the_charts_the_beat_task_kept(acme_llm, operator, client):
    make_workload(acme_llm, "trainer", gpus=16)
    scheduling_cycle()
    assert refresh_cluster() == ["24h", "7d", "30d"]
    assert refresh_cluster() == ["24h"]  # the week's and month's are kept longer
    for span, (*_, keep_s) in SPANS.items():
        assert 0 < redis().ttl(f"{KEY}{span}:all") <= keep_s
    client.force_login(operator)
    with CaptureQueriesContext(connection) as queries:
        page = client.get("/").content.decode()
    assert not [q for q in queries.captured_queries if "workloads_workloadevent" in q["sql"]]
    assert _training_gpus(_charts(page)) > 0


def test_a_tenant_sees_the_charts_of_its_own_jobs_and_nobody_else_the_clusters(
    acme_llm, bob, client
):
    make_workload(acme_llm, "trainer", gpus=16)
    scheduling_cycle()
    refresh_cluster()
    client.force_login(User.objects.create_user("solo", password="pw"))  # no tenant, no staff
    assert _training_gpus(_charts(client.get("/").content.decode())) == 0
    assert not redis().keys(f"{KEY}*None")
    client.force_login(bob)
    acme = _charts(client.get("/").content.decode())
    assert _training_gpus(acme) > 0
    assert redis().exists(f"{KEY}24h:{acme_llm.tenant_id}")


def test_the_charts_cover_a_day_a_week_or_a_month_as_chosen(acme_llm, bob, client):
    make_workload(acme_llm, "trainer", gpus=16)
    scheduling_cycle()
    client.force_login(bob)
    for days, slices in (("24h", 24), ("7d", 28), ("30d", 30), ("bogus", 24)):
        page = client.get(f"/?days={days}").content.decode()
        charts = _charts(page)
        ettr = charts["ettr-series"]
        assert len(ettr) == slices
        covered = ettr[-1]["start"] - ettr[0]["start"] + (ettr[1]["start"] - ettr[0]["start"])
        length = SPANS.get(days, SPANS["24h"])[0]
        assert abs(covered - length.total_seconds()) < 1
        assert _training_gpus(charts) > 0
    week = client.get("/?range=6h&days=7d").content.decode()
    assert 'href="?range=6h&amp;days=30d"' in week  # the other range is kept
    assert 'href="?range=1h&amp;days=7d"' in week
