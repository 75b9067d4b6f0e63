"""Names and texts that tenants, their jobs, agents and traces choose are shown, never run: a
payload that closes an attribute and opens an element goes into every such field (straight
into the database, past the forms' validation, as an old row or another door might put it),
and a member and an operator load every page, and the what-if report made from a trace
that names its queue so, in Chromium.

On every page and in every frame: no element of the payload's, no dialog, and no refusal of
the Content-Security-Policy (the `page` fixture fails on one); and where a page shows the
planted field, its text is there, as text."""

import pytest

from portal.agents.intake import record_fault
from portal.cluster.models import FaultEvent, Node
from portal.notifications.models import Delivery, Webhook
from portal.quotas.models import Cohort, QuotaRequest
from portal.services.models import Service
from portal.tenancy.models import ApiToken
from portal.whatif.choices import ClusterSource, RunState, TraceSource
from portal.whatif.models import WhatIfRun
from portal.whatif.runs import execute
from portal.workloads.choices import State
from portal.workloads.models import LogChunk, WorkloadEvent, transition
from scheduler import faults
from tests.builders import api_client, make_queue, make_quota_request, make_workload
from tests.e2e.test_dashboard import sign_in
from tests.e2e.test_live_pages import off_the_browser_thread
from tests.portal.processes import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAYLOAD = '"><img src=x data-pwn onerror=alert(1)>'
SHORT = '"><i data-pwn>x</i>'  # for fields of 32 characters
FOUND = "() => document.querySelectorAll('[data-pwn]').length"


SHORT_FIELDS = {"kind", "agent"}


def hostile(tag: str) -> str:
    """A payload of its own per field, so that a page showing it says which field it was."""
    return tag + (SHORT if tag in SHORT_FIELDS else PAYLOAD)


@pytest.fixture
def planted(portal_server, clean_redis, cluster, acme, alice, operator):
    acme.name = hostile("tenant")
    acme.save()
    alice.first_name, alice.last_name = hostile("first"), hostile("last")
    alice.save()
    cohort = Cohort.objects.create(name=hostile("cohort"))
    queue = make_queue(acme, hostile("queue"), h800=32)
    queue.cohort = cohort
    queue.save()
    job = make_workload(
        queue,
        hostile("job"),
        gpus=8,
        command=hostile("command"),
        pending_reason=hostile("reason"),
    )
    WorkloadEvent.objects.create(
        workload=job, from_state="pending", to_state="pending", reason=hostile("event")
    )
    node = Node.objects.order_by("id").first()
    node.name, node.agent_version = hostile("node"), hostile("agent")
    node.save()
    LogChunk.objects.create(
        workload=job, attempt=1, node=node, offset=0, text=hostile("output"), lines=1, size=60
    )
    fault = FaultEvent.objects.create(
        node=node, kind=hostile("kind"), code=79, message=hostile("fault")
    )
    fault.workloads.add(job)
    service = Service.objects.create(
        tenant=acme,
        name=hostile("service"),
        queue=queue,
        gpu_model=job.gpu_model,
        gpus_per_replica=8,
        command=hostile("serve"),
        created_by=alice,
    )
    request = make_quota_request(queue, 64, alice, reason=hostile("request"))
    QuotaRequest.objects.filter(pk=request.pk).update(decision_note=hostile("note"))
    ApiToken.issue(alice, hostile("token"))
    hook = Webhook.objects.create(tenant=acme, url="https://hooks.example/x", topics=["job"])
    Delivery.objects.create(webhook=hook, topic="job", payload={}, error=hostile("delivery"))
    run = WhatIfRun.objects.create(
        trace=TraceSource.CSV,
        cluster=ClusterSource.CURRENT,
        policies=["wanka"],
        trace_csv=f"submit_s,gpus,gpu_model,duration_s,queue\n0,8,H800,600,{queue.name}\n",
    )
    execute(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.DONE, run.message
    return f"http://127.0.0.1:{portal_server}", job, service, node, queue, cohort, run


def visit(page, base: str, paths: dict[str, list[str]]) -> None:
    """Load each page; fail on any payload element in any frame, any dialog, or a planted
    field a page should show that is missing from its text."""
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    broken, missing = {}, {}
    for path, shown in paths.items():
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        if found := sum(frame.evaluate(FOUND) for frame in page.frames):
            broken[path] = found
        text = " ".join(frame.evaluate("() => document.body.innerText") for frame in page.frames)
        if absent := [tag for tag in shown if hostile(tag) not in text]:
            missing[path] = absent
    assert not broken, f"payload elements made on {broken}"
    assert not dialogs, dialogs
    assert not missing, f"planted text not shown: {missing}"


def test_a_member_sees_every_name_as_text(planted, page):
    base, job, service, *_ = planted
    sign_in(page, base, "alice", "pw-alice")
    visit(
        page,
        base,
        {
            "/": ["job"],
            "/workloads/": ["job", "queue"],
            f"/workloads/{job.pk}/": ["job", "reason", "event", "output"],
            "/workloads/new/": ["queue"],
            "/services/": ["service"],
            f"/services/{service.pk}/": ["service"],
            "/quota/": ["request"],
            "/queues/": ["queue"],
            "/usage/": [],
            "/tokens/": ["token"],
            "/members/": [],
            "/notifications/": ["delivery"],
        },
    )


def test_an_operator_sees_every_name_as_text_and_the_report_too(planted, page):
    base, job, _, node, queue, cohort, run = planted
    sign_in(page, base, "operator", "pw-operator")
    visit(
        page,
        base,
        {
            "/": [],
            "/usage/": [],
            "/queues/": ["queue"],
            "/ops/cluster/": [],
            f"/ops/nodes/{node.pk}/": ["node"],
            "/ops/faults/": ["node", "kind"],
            "/ops/workloads/": ["job"],
            f"/ops/workloads/{job.pk}/": ["job", "output"],
            "/ops/audit/": [],
            "/ops/quota-requests/": ["request"],
            f"/ops/queues/{queue.pk}/": ["queue"],
            f"/ops/queues/cohorts/{cohort.pk}/": ["cohort"],
            "/ops/spares/": [],
            "/ops/drill/": [],
            "/ops/whatif/": [],
            f"/ops/whatif/{run.pk}/": [],
            f"/ops/whatif/{run.pk}/report/": ["queue"],
        },
    )


def test_names_that_arrive_live_are_text_too(planted, page, alice):
    """What the live socket brings (a new row of the workload list, a fault on a hostile node
    in the dashboard's feed, a state change with its reason on the job page) is drawn by the
    pages' scripts, not the server's templates."""
    base, job, _, node, queue, *_ = planted
    sign_in(page, base, "alice", "pw-alice")
    page.goto(f"{base}/workloads/?state=pending")
    page.wait_for_selector("#live-status.live-on")

    def submit():
        spec = {"name": hostile("live"), "queue": queue.name, "gpu_model": "H800", "gpus": 8}
        response = api_client(alice).post("/api/v1/workloads/", spec, format="json")
        assert response.status_code == 201, response.content

    off_the_browser_thread(submit)
    rows = page.locator("tbody tr[data-workload] td:first-child")
    wait_until(lambda: hostile("live") in rows.all_inner_texts(), 15, "the live row")
    assert page.evaluate(FOUND) == 0

    page.goto(f"{base}/")
    page.wait_for_selector("#live-status.live-on")
    off_the_browser_thread(lambda: record_fault(node.pk, faults.lookup("xid-79"), workload=job))
    feed = page.locator("#fault-feed")
    wait_until(lambda: hostile("node") in feed.inner_text(), 15, "the fault in the feed")
    assert page.evaluate(FOUND) == 0

    page.goto(f"{base}/workloads/{job.pk}/")
    page.wait_for_selector("#live-status.live-on")
    off_the_browser_thread(lambda: _cancel(job, hostile("why")))
    wait_until(lambda: hostile("why") in page.locator("#timeline").inner_text(), 15, "the reason")
    assert page.evaluate(FOUND) == 0


def _cancel(job, reason: str) -> None:
    transition(job, State.CANCELLED, reason)
    job.save()
