"""The pages at a phone's width (390 px): nothing wider than the screen, so nothing needs a
sideways scroll of the whole page."""

import pytest

from tests.builders import make_queue, make_workload
from tests.e2e.test_dashboard import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# The innermost elements that reach past the screen's right edge: what to fix.
WIDEST = """() => [...document.querySelectorAll("body *")]
  .filter((e) => e.getBoundingClientRect().right > 391 && !e.querySelector("*"))
  .slice(0, 5).map((e) => `${e.tagName}#${e.id}.${e.className} ${e.textContent.slice(0, 40)}`)"""


def test_every_page_fits_a_390_px_screen(portal_server, clean_redis, page, cluster, acme, bob):
    base = f"http://127.0.0.1:{portal_server}"
    queue = make_queue(acme, "llm", h800=32)
    job = make_workload(queue, "a-job-with-a-rather-long-name-for-a-phone", gpus=8)
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, base, "bob", "pw-bob")
    for path in ("/", "/workloads/", f"/workloads/{job.pk}/", "/workloads/new/", "/quota/",
                 "/queues/", "/tokens/", "/notifications/"):  # fmt: skip
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.documentElement.scrollWidth")
        wide = page.evaluate(WIDEST) if width > 390 else []
        assert width <= 390, f"{path} is {width} px wide: {wide}"
