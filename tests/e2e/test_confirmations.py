"""Nothing is destroyed by one click: each destructive action asks first, in the page's
language, saying what it would do; going back changes nothing, confirming does it."""

import pytest
from playwright.sync_api import expect

from portal.cluster.models import Node
from portal.tenancy.models import ApiToken, Membership
from portal.workloads.choices import State
from portal.workloads.models import Workload
from tests.builders import make_queue, make_workload
from tests.e2e.test_dashboard import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def base(portal_server, clean_redis, cluster):
    return f"http://127.0.0.1:{portal_server}"


def _ask(page, button):
    """Click the action; the dialog it opens, with its text."""
    page.click(button)
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    return dialog


def test_cancelling_a_job_asks_first_and_going_back_keeps_it(base, page, acme, bob):
    job = make_workload(make_queue(acme, "llm", h800=32), "keep-me", gpus=8)
    sign_in(page, base, "bob", "pw-bob")
    page.goto(f"{base}/workloads/{job.pk}/")
    dialog = _ask(page, "form[action$='/cancel/'] button")
    expect(dialog).to_contain_text("Cancel keep-me? It ends for good and does not run again.")
    dialog.locator("button[value=no]").click()
    expect(dialog).to_be_hidden()
    page.wait_for_timeout(300)
    assert Workload.objects.get(pk=job.pk).state == State.PENDING

    dialog = _ask(page, "form[action$='/cancel/'] button")
    dialog.locator("button[value=yes]", has_text="Cancel the job").click()
    page.wait_for_selector(".flash")
    assert Workload.objects.get(pk=job.pk).state == State.CANCELLED


def test_an_admin_removing_a_member_or_a_token_reads_what_it_costs_in_chinese(
    base, page, alice, bob
):
    ApiToken.issue(bob, "ci-runner")
    sign_in(page, base, "alice", "pw-alice")
    page.click("#language button[value=zh-hans]")
    page.goto(f"{base}/members/")
    dialog = _ask(page, "tr[data-member=bob] form[action$='/remove/'] button")
    expect(dialog).to_contain_text("bob")
    expect(dialog.locator("p").first).not_to_contain_text("Remove")  # said in Chinese
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert Membership.objects.filter(user=bob).exists()

    page.select_option("tr[data-member=bob] select[name=role]", "viewer")
    dialog = _ask(page, "tr[data-member=bob] form[action$='/role/'] button")
    expect(dialog).to_contain_text("bob")
    dialog.locator("button[value=yes]").click()
    page.wait_for_selector(".flash")
    assert Membership.objects.get(user=bob).role == "viewer"


def test_a_fault_drill_names_the_jobs_it_would_hit(base, page, acme, operator):
    from tests.portal.workloads.test_recovery import running_job

    job, (node_id, _) = running_job(make_queue(acme, "llm", h800=64), gpus=16)
    node = Node.objects.get(pk=node_id)
    sign_in(page, base, "operator", "pw-operator")
    page.goto(f"{base}/ops/drill/")
    page.select_option("select[name=node]", str(node.pk))
    dialog = _ask(page, "#drill-form button[type=submit]")
    expect(dialog).to_contain_text("It hits the jobs there: train of Acme (8 GPUs).")
    dialog.locator("button[value=no]").click()
    page.wait_for_timeout(300)
    assert not node.commands.exists()
