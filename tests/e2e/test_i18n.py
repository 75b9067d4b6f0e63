"""Every page in Chinese and in English: a tenant member and an operator switch to 简体中文 and
walk the pages; any run of three or more Latin letters left, other than the data the test made
and names that stay as they are, is an untranslated string."""

import re

import pytest
from playwright.sync_api import expect

from portal.cluster.faults import FAULT
from portal.cluster.models import Node, Pod
from portal.quotas.choices import FairSharing, ReclaimWithinCohort, WithinClusterQueue
from portal.quotas.models import Cohort
from portal.services.autoscaling import settings_of
from portal.services.models import Service
from portal.whatif.choices import TraceSource
from portal.whatif.models import WhatIfRun
from portal.workloads.cycle import scheduling_cycle
from scheduler import faults
from scheduler.autoscale import Autoscaler
from scheduler.parallelism import MODELS
from scheduler.sim.policies import POLICIES
from scheduler.sim.runner import DAY
from tests.builders import make_queue, make_workload
from tests.e2e.test_dashboard import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Names that read the same in every language: products, standards, units, identifiers the
# API and the operators share (fault codes, model and policy names), and the English switch.
KEPT = {
    "Wanka", "Plotly", "API", "REST", "ETTR", "MFU", "GPU", "GPUs", "GiB", "NVLink", "NVML",
    "ECC", "PCIe", "GSP", "RPC", "NIC", "XID", "xid", "FIFO", "SFT", "CSV", "JSON", "USD", "UTC",
    "HMAC", "SHA", "sha", "POST", "GET", "URL", "Webhook", "Knative", "Bearer", "Authorization",
    "Young", "Daly", "English", "token", "Pod", "Goodput", "Microsoft", "Philly", "rank", "Kueue",
    "stdout", "stderr", "Llama", "MIG", "MPS", "TFLOPS",
    *(w for name in MODELS for w in re.findall(r"[A-Za-z]+", name)),
    # Kueue's names for a queue's preemption policy, its values in the API as in the console
    *(name for kind in (ReclaimWithinCohort, WithinClusterQueue, FairSharing)
      for value in kind.values for name in value.split(",")),
}  # fmt: skip
LATIN = re.compile(r"[A-Za-z][A-Za-z_-]{2,}")


def leftovers(page, data: set[str]) -> set[str]:
    """Latin words on the page that are neither data the test made nor kept names. Code blocks
    (headers, paths, commands) are what they are in any language. The engine's own sentences
    (why a job waits, its timeline, what a checkpoint policy costs, why a service scales) are
    read like the rest."""
    text = page.evaluate(
        """() => {
          const skip = "code, pre, script, style, .js-plotly-plot";
          const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
          const texts = [];
          while (walker.nextNode()) {
            const node = walker.currentNode;
            if (!node.parentElement.closest(skip)) texts.push(node.data);
          }
          return texts.join(" ");
        }"""
    )
    words = {w.strip("-_") for w in LATIN.findall(text)}
    return {w for w in words if w not in KEPT and not any(w in d for d in data)}


def walk(page, base, paths, data):
    found = {}
    for path in paths:
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        if left := leftovers(page, data):
            found[path] = sorted(left)
    assert not found, f"English left on Chinese pages: {found}"


@pytest.fixture
def pages(portal_server, clean_redis, cluster, acme, alice):
    queue = make_queue(acme, "llm", h800=32)
    job = make_workload(queue, "zh-job", gpus=8)
    service = Service.objects.create(
        tenant=acme,
        name="zh-chat",
        queue=queue,
        gpu_model=job.gpu_model,
        gpus_per_replica=8,
        created_by=alice,
    )
    # The engine's own words: a job placed (its timeline), one that cannot fit (why it waits),
    # a service's scaling decision.
    waiting = make_workload(queue, "zh-wait", gpus=4096)
    scheduling_cycle()
    service.scale_reason = Autoscaler(settings_of(service)).decide(0.0, 0).reason
    service.save(update_fields=["scale_reason"])
    assert waiting.__class__.objects.get(pk=waiting.pk).pending_reason
    return f"http://127.0.0.1:{portal_server}", job, service


def test_a_member_reads_every_page_in_chinese(pages, page):
    base, job, service = pages
    sign_in(page, base, "alice", "pw-alice")
    page.click("#language button[value=zh-hans]")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    data = {"alice", "Acme", "acme", "llm", "zh-job", "zh-wait", "zh-chat"} | _cluster_names()
    paths = ["/", "/workloads/", f"/workloads/{job.pk}/", "/workloads/new/", "/services/",
             f"/services/{service.pk}/", "/quota/", "/queues/", "/usage/", "/tokens/", "/members/",
             "/notifications/", "/no-such-page/"]  # fmt: skip
    walk(page, base, paths, data)
    # The choice is remembered (a cookie), and the sign-in page follows it too.
    page.context.clear_cookies(name="sessionid")
    walk(page, base, ["/login/"], data)


def test_an_operator_reads_chinese_and_english_follows_the_browser(pages, page, operator):
    base, job, _ = pages
    sign_in(page, base, "operator", "pw-operator")
    page.click("#language button[value=zh-hans]")
    data = {"operator", "Acme", "acme", "llm", "zh-job", "zh-wait"} | _cluster_names()
    data |= set(faults.CATALOGUE)
    run = WhatIfRun.objects.create(
        trace=TraceSource.PHILLY,
        policies=["wanka", "fifo"],
        days=2,
        service_percent=30,
        message=DAY.format(policy="wanka", day="1.5"),  # its progress, as the worker says it
    )
    data |= {*POLICIES, "Azure"}  # the policies' names, the trace's owner
    node = Node.objects.order_by("id").first()
    title = faults.lookup("xid-79").title  # why it was moved, as a fault says it
    Node.objects.filter(pk=node.pk).update(health_reason=FAULT.format(code="xid-79", title=title))
    cohort = Cohort.objects.create(name="zh-cohort")
    data.add("zh-cohort")
    paths = ["/", "/usage/", "/queues/", "/tokens/", "/ops/drill/", "/ops/cluster/",
             f"/ops/nodes/{node.pk}/", f"/ops/nodes/{node.pk}/drain/", "/ops/whatif/",
             f"/ops/whatif/{run.pk}/",
             "/ops/workloads/", f"/ops/workloads/{job.pk}/", f"/ops/workloads/{job.pk}/priority/",
             "/ops/audit/", "/ops/faults/", "/ops/quota-requests/", "/ops/budgets/",
             f"/ops/queues/{job.queue_id}/", f"/ops/queues/cohorts/{cohort.pk}/", "/ops/spares/",
             f"/ops/spares/pods/{Pod.objects.first().pk}/", "/ops/spares/nodes/",
             f"/workloads/{job.pk}/"]  # fmt: skip
    walk(page, base, paths, data)
    expect(page.locator("h1")).to_have_text("无权访问")  # an operator is in no tenant
    page.click("#language button[value=en]")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    for path, words in {"/": "Cluster utilization", "/ops/drill/": "Inject",
                        "/tokens/": "Issue a token"}.items():  # fmt: skip
        page.goto(base + path)
        expect(page.locator("main")).to_contain_text(words)
    expect(page.locator("#time-zone")).to_contain_text("Times in")


def _cluster_names() -> set[str]:
    """The fleet's names the builders made: GPU models and their families, regions, data
    centers, pods, leaves and nodes."""
    from portal.cluster import models

    kinds = (
        models.GpuModel,
        models.Region,
        models.DataCenter,
        models.Pod,
        models.Leaf,
        models.Node,
    )
    families = models.GpuModel.objects.values_list("family", flat=True)
    return {w for kind in kinds for name in kind.objects.values_list("name", flat=True)
            for w in LATIN.findall(name)} | set(families)  # fmt: skip
