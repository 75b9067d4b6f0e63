"""The job page's live output in a real browser: a real process prints, its agent ships the
lines, and the page shows them as they come, without a reload."""

import shlex
import sys

import pytest

from portal.core.triggers import trigger_cycle
from tests.builders import make_cluster, make_queue, make_workload
from tests.e2e.test_dashboard import sign_in
from tests.portal.processes import start_agent, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TICKER = shlex.join(
    [
        sys.executable,
        "-c",
        "import time\nfor i in range(900): print('tick', i, flush=True); time.sleep(0.3)",
    ]
)


def test_the_job_page_tails_the_output_as_it_is_written(
    portal_server, celery_worker, clean_redis, page, acme, bob, tmp_path
):
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    try:
        job = make_workload(make_queue(acme, "llm", h800=8), "ticker", gpus=8, command=TICKER)
        trigger_cycle()  # on the worker: this thread runs the browser's event loop
        base = f"http://127.0.0.1:{portal_server}"
        sign_in(page, base, "bob", "pw-bob")
        page.goto(f"{base}/workloads/{job.pk}/")
        page.evaluate("window.notReloaded = true")
        log = page.locator("#log")
        wait_until(lambda: "tick 2" in log.inner_text(), 30, "the first lines")
        first = log.inner_text().split("\n")
        assert first[0] == f"[0 {node.name}] tick 0"  # every node's lines, named
        wait_until(lambda: len(log.inner_text().split("\n")) > len(first) + 3, 15, "more lines")
        assert page.evaluate("window.notReloaded")
        assert "Following" in page.locator("#log-status").inner_text()

        page.select_option("#log-run", f"0|{node.name}")  # one run: its lines bare
        wait_until(lambda: log.inner_text().startswith("tick 0\ntick 1"), 10, "one run's lines")
        href = page.get_attribute("#log-download", "href")
        assert href.endswith(f"?attempt=0&node={node.name}")
    finally:
        agent.stop()
