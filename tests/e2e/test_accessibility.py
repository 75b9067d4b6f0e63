"""No serious accessibility violations: axe-core (the engine browsers' own audits use) checks
every page a member and an operator open, in Chromium, after the page has drawn."""

import pytest
from axe_playwright_python.sync_playwright import Axe

from portal.cluster.models import Node, Pod
from portal.quotas.models import Cohort
from tests.e2e.test_dashboard import sign_in
from tests.e2e.test_i18n import pages  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SERIOUS = {"serious", "critical"}


def audit(page, base, paths) -> dict[str, list[str]]:
    """Per path, each serious or critical violation: its rule and the first elements it hit."""
    axe, found = Axe(), {}
    for path in paths:
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        violations = axe.run(page).response["violations"]
        bad = [
            f"{v['id']} ({v['impact']}): {', '.join(n['target'][0] for n in v['nodes'][:3])}"
            for v in violations
            if v["impact"] in SERIOUS
        ]
        if bad:
            found[path] = bad
    return found


def test_a_members_pages_have_no_serious_violations(pages, page, alice):  # noqa: F811
    base, job, service = pages
    sign_in(page, base, "alice", "pw-alice")
    paths = ["/", "/workloads/", f"/workloads/{job.pk}/", "/workloads/new/", "/services/",
             f"/services/{service.pk}/", "/quota/", "/queues/", "/usage/", "/tokens/",
             "/members/", "/notifications/", "/password/"]  # fmt: skip
    assert audit(page, base, paths) == {}
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: wide tables scroll
    assert audit(page, base, paths) == {}


def test_an_operators_pages_have_no_serious_violations(pages, page, operator):  # noqa: F811
    base, job, _ = pages
    sign_in(page, base, "operator", "pw-operator")
    node = Node.objects.order_by("id").first()
    paths = ["/", "/queues/", "/usage/", "/ops/workloads/", f"/ops/workloads/{job.pk}/",
             f"/ops/workloads/{job.pk}/preempt/", "/ops/audit/", "/ops/faults/", "/ops/cluster/",
             f"/ops/nodes/{node.pk}/", f"/ops/nodes/{node.pk}/drain/", "/ops/drill/",
             "/ops/whatif/",
             "/ops/quota-requests/", "/ops/budgets/", f"/ops/queues/{job.queue_id}/",
             f"/ops/queues/cohorts/{Cohort.objects.create(name='research').pk}/", "/ops/spares/",
             f"/ops/spares/pods/{Pod.objects.first().pk}/", "/ops/spares/nodes/"]  # fmt: skip
    assert audit(page, base, paths) == {}
    page.set_viewport_size({"width": 390, "height": 844})
    assert audit(page, base, paths) == {}
