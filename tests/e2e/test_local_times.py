"""Times on a page are all in the reader's time zone: the server's (UTC) turned local in the
browser, as the charts are, and the page says which zone."""

from datetime import UTC, datetime

import pytest

from portal.workloads.models import Workload
from tests.builders import make_queue, make_workload
from tests.e2e.test_dashboard import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_job_page_in_shanghai_shows_shanghai_time(
    portal_server, clean_redis, browser, cluster, acme, bob
):
    job = make_workload(make_queue(acme, "llm", h800=32), "timed", gpus=8)
    Workload.objects.filter(pk=job.pk).update(
        submitted_at=datetime(2026, 12, 1, 20, 5, 9, tzinfo=UTC)
    )
    context = browser.new_context(timezone_id="Asia/Shanghai")
    page = context.new_page()
    try:
        base = f"http://127.0.0.1:{portal_server}"
        sign_in(page, base, "bob", "pw-bob")
        page.goto(f"{base}/workloads/{job.pk}/")
        submitted = page.locator("#timeline time").first
        assert submitted.inner_text() == "2026-12-02 04:05:09"  # UTC+8
        assert (
            submitted.get_attribute("title") == "2026-12-01 20:05:09 UTC · shown in Asia/Shanghai"
        )
        assert page.locator("#time-zone").inner_text() == "Times in Asia/Shanghai."
    finally:
        context.close()
