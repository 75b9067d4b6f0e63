"""The operators' pages that shape capacity: a queue's and a cohort's settings and quotas, saved
whole with a reason, audited and handed to the next cycle; and the pools of hot spares, per pod,
with their targets and spare nodes changed the same way."""

import re

import pytest
from django.db import connection
from django.forms import CheckboxInput
from django.test.utils import CaptureQueriesContext

from portal.cluster.choices import Health
from portal.cluster.models import GpuModel, Node, Pod
from portal.core.models import AuditEvent
from portal.demo import installation
from portal.quotas import engine
from portal.quotas.models import THRESHOLD_NEEDS_BORROWING, Cohort, CohortQuota, Queue
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation
from tests.builders import api_client, make_cluster, make_queue, make_workload

# cn-east (tests.builders.make_cluster): dc1/p1 8 H800 nodes, dc2/p1 4 H800 nodes, dc2/p2 4 H20
# nodes, 8 GPUs each, every agent connected.


def shown(response) -> dict:
    """What the browser sends back for the page's forms left as they are."""
    context = response.context
    forms = [context["form"]]
    for formset in (context["quotas"], context.get("families")):
        if formset is not None:
            forms += [formset.management_form, *formset.forms]
    data = {}
    for form in forms:
        for field in form:
            value = field.value()
            if field.field.disabled or value is None:
                continue  # a browser sends no disabled field, nor an empty one
            if isinstance(field.field.widget, CheckboxInput):
                if value:
                    data[field.html_name] = "on"
            else:
                data[field.html_name] = value
    return data


def edit(client, url, reason="", **changes):
    """POST the page's forms with `changes` (names as the page has them) and a reason."""
    return client.post(url, {**shown(client.get(url)), "reason": reason, **changes})


def _queue_facts(queue):
    queue = Queue.objects.get(pk=queue.pk)
    quotas = {q.gpu_model.name: (q.guarantee, q.nominal) for q in queue.quotas.all()}
    return queue.priority, queue.max_priority_threshold, quotas


@pytest.fixture
def small(cluster, acme):
    """Acme's queue "small", 8 H800 of nominal quota, no cohort: a 16-GPU job cannot start."""
    return make_queue(acme, "small", h800=8)


@pytest.mark.parametrize("who", ["bob", "alice"], ids=["a member", "a tenant admin"])
def test_tenants_are_kept_out_of_every_page_and_change_nothing(
    request, who, small, client, cluster
):
    client.force_login(request.getfixturevalue(who))
    cohort = Cohort.objects.create(name="research")
    pod = Pod.objects.first()
    urls = [
        f"/ops/queues/{small.pk}/",
        f"/ops/queues/cohorts/{cohort.pk}/",
        "/ops/spares/",
        f"/ops/spares/pods/{pod.pk}/",
        "/ops/spares/nodes/",
    ]
    for url in urls:
        for answer in (client.get(url), client.post(url, {"reason": "mine", "hot_spares": 3})):
            assert answer.status_code == 403, url
    spare = {"node": cluster[0].name, "spare": "yes", "reason": "mine"}
    client.post("/ops/spares/nodes/", spare)
    assert Pod.objects.get(pk=pod.pk).hot_spares == 0
    assert not Node.objects.filter(spare=True).exists()
    assert not AuditEvent.objects.exists()
    assert 'href="/ops/spares/"' not in client.get("/").content.decode()


def test_an_operator_raises_a_nominal_quota_and_the_next_cycle_admits_the_job(
    small, acme, operator, client, django_capture_on_commit_callbacks
):
    job = make_workload(small, "sixteen", gpus=16)
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.PENDING
    client.force_login(operator)
    assert f'href="/ops/queues/{small.pk}/"' in client.get("/queues/").content.decode()
    url = f"/ops/queues/{small.pk}/"
    with django_capture_on_commit_callbacks() as cycles:
        done = edit(client, url, "a bigger model", **{"quotas-0-nominal": 16, "priority": 5})
    assert (done.status_code, done.url) == (302, "/queues/")
    assert len(cycles) == 1  # a scheduling cycle, once it commits
    (seen,) = [q for q in engine.queues() if q.id == small.pk]
    assert (seen.priority, seen.quotas[0].nominal) == (5, 16)
    entry = AuditEvent.objects.get(action="queue.changed")
    assert (entry.actor, entry.tenant, entry.object_type) == (operator, acme, "quotas.queue")
    assert entry.data == {
        "reason": "a bigger model",
        "changed": {"H800.nominal": [8, 16], "priority": [0, 5]},
    }
    trail = client.get("/ops/audit/?object_type=quotas.queue").content.decode()
    assert f'data-audit="{entry.pk}"' in trail and "a bigger model" in trail
    assert (
        client.get("/ops/audit/?object_type=cluster.pod").content.decode().count("data-audit=") == 0
    )
    scheduling_cycle()
    job.refresh_from_db()
    assert job.state == State.ADMITTED


def test_a_lower_nominal_is_previewed_against_what_the_queue_holds(small, operator, client):
    small.quotas.update(nominal=32)
    make_workload(small, "running", gpus=24)
    scheduling_cycle()
    client.force_login(operator)
    url = f"/ops/queues/{small.pk}/"
    page = client.get(url).content.decode()
    assert "H800 quota · 24 GPUs held now" in page
    preview = edit(client, url, **{"quotas-0-nominal": 16, "preview": "1"}).content.decode()
    assert "the queue holds 24 GPUs now, 8 over the new nominal quota of 16" in preview
    assert "Say why" not in preview  # a preview asks for no reason yet
    assert _queue_facts(small)[2] == {"H800": (0, 32)}
    assert not AuditEvent.objects.exists()
    fine = edit(client, url, **{"quotas-0-nominal": 24, "preview": "1"}).content.decode()
    assert "No quota falls below what is held now" in fine
    saved = client.post(
        url, {**shown(client.get(url)), "quotas-0-nominal": 16, "reason": "shrink"}, follow=True
    )
    assert "8 over the new nominal quota of 16" in saved.content.decode()  # said again
    assert _queue_facts(small)[2] == {"H800": (0, 16)}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"quotas-0-nominal": -1}, "Ensure this value is greater than or equal to 0."),
        ({"quotas-0-guarantee": 12}, "The guarantee cannot be more than the nominal quota."),
        ({"max_priority_threshold": 5}, THRESHOLD_NEEDS_BORROWING),
        ({"reason": ""}, "Say why: it is kept in the audit log."),
        ({"quotas-1-nominal": 8}, "This field is required."),  # a new quota names no model
    ],
    ids=[
        "a negative nominal quota",
        "a guarantee above the nominal quota",
        "a priority threshold without borrowing",
        "no reason",
        "a new quota without its GPU model",
    ],
)
def test_bad_input_shows_its_error_and_saves_nothing_of_the_change(
    changes, error, small, operator, client, django_capture_on_commit_callbacks
):
    client.force_login(operator)
    url = f"/ops/queues/{small.pk}/"
    before = _queue_facts(small)
    with django_capture_on_commit_callbacks() as cycles:
        answer = edit(
            client, url, **{"reason": "tune", "priority": 50, "quotas-0-nominal": 4, **changes}
        )
    assert answer.status_code == 200
    assert error in answer.content.decode()
    assert _queue_facts(small) == before  # neither the priority nor the other quota fields
    assert not AuditEvent.objects.exists() and not cycles


def test_an_operator_moves_a_cohort_under_another_and_gives_it_quota(
    cluster, acme, operator, client
):
    make_queue(acme, "cv", cohort="research", h800=8)
    research, org = Cohort.objects.get(name="research"), Cohort.objects.create(name="org")
    client.force_login(operator)
    queues = client.get("/queues/").content.decode()
    assert f'href="/ops/queues/cohorts/{research.pk}/"' in queues
    url = f"/ops/queues/cohorts/{research.pk}/"
    page = client.get(url).content.decode()
    assert "acme/cv" in page and "Quota for another GPU model" in page
    h800 = GpuModel.objects.get(name="H800")
    done = edit(
        client,
        url,
        "research shares the org's pool",
        parent=org.pk,
        **{"quotas-0-gpu_model": h800.pk, "quotas-0-nominal": 32, "quotas-0-guarantee": 8},
    )
    assert done.status_code == 302
    assert CohortQuota.objects.get(cohort=research).nominal == 32
    seen = {c.name: c for c in engine.cohorts()}
    assert seen["research"].parent == "org"
    assert [(q.gpu_model, q.guarantee, q.nominal) for q in seen["research"].quotas] == [
        ("H800", 8, 32)
    ]
    entry = AuditEvent.objects.get(action="cohort.changed")
    assert entry.data["reason"] == "research shares the org's pool"
    assert entry.data["changed"] == {
        "H800.guarantee": [None, 8],
        "H800.nominal": [None, 32],
        "parent": [None, "org"],
    }
    loop = edit(client, f"/ops/queues/cohorts/{org.pk}/", "loop", parent=research.pk)
    assert "A cohort cannot sit under itself." in loop.content.decode()
    assert Cohort.objects.get(pk=org.pk).parent is None


def _row(page: str, pod: str) -> list[str]:
    row = re.search(rf'<tr data-pod="{pod}">(.*?)</tr>', page, re.S).group(1)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row)]


def test_the_spare_page_counts_each_pool_and_warns_where_it_is_short(
    cluster, small, operator, client
):
    dc1 = Node.objects.filter(leaf__pod__datacenter__name="dc1").order_by("name")
    ready, down, busy = dc1[0], dc1[1], dc1[2]
    offline = Node.objects.filter(leaf__pod__datacenter__name="dc2", gpu_model__name="H800")[0]
    Node.objects.filter(pk__in=[ready.pk, down.pk, busy.pk, offline.pk]).update(spare=True)
    Node.objects.filter(pk=down.pk).update(health=Health.DOWN)
    Node.objects.filter(pk=offline.pk).update(connected=False)
    job = make_workload(small, "on-a-spare", gpus=8)
    Allocation.objects.bulk_create(
        Allocation(workload=job, node=busy, gpu_index=i) for i in range(8)
    )
    Pod.objects.filter(datacenter__name="dc1").update(hot_spares=2)
    Pod.objects.filter(datacenter__name="dc2", name="p1").update(hot_spares=1)
    client.force_login(operator)
    page = client.get("/ops/spares/").content.decode()
    # target, ready, holding GPUs, unhealthy or offline, idle nodes that could join, the pool
    assert _row(page, "dc1/p1")[2:8] == ["2", "1", "1", "1", "5", "short by 1 spare"]
    assert _row(page, "dc2/p1")[2:8] == ["1", "0", "0", "1", "3", "short by 1 spare"]
    assert _row(page, "dc2/p2")[2:8] == ["0", "0", "0", "0", "4", "full"]
    assert re.findall(r'<tr data-spare="([^"]+)"', page) == sorted(
        n.name for n in (ready, down, busy, offline)
    )
    assert f'href="/ops/spares/nodes/?node={ready.name}&amp;spare=no"' in page
    assert 'href="/ops/spares/"' in page  # the nav link


def test_an_operator_changes_a_pods_target_with_a_reason(cluster, operator, client):
    pod = Pod.objects.get(datacenter__name="dc1")
    client.force_login(operator)
    url = f"/ops/spares/pods/{pod.pk}/"
    assert 'name="hot_spares"' in client.get(url).content.decode()
    blank = client.post(url, {"hot_spares": 2, "reason": " "})
    assert "Say why: it is kept in the audit log." in blank.content.decode()
    bad = client.post(url, {"hot_spares": -1, "reason": "more"})
    assert "greater than or equal to 0" in bad.content.decode()
    assert Pod.objects.get(pk=pod.pk).hot_spares == 0 and not AuditEvent.objects.exists()
    done = client.post(
        url, {"hot_spares": 2, "defrag_moves": 4, "reason": "XID storms this week"}, follow=True
    )
    assert "dc1/p1 now keeps 2 hot spares (it kept 0)." in done.content.decode()
    assert _row(done.content.decode(), "dc1/p1")[2:8] == [
        "2",
        "0",
        "0",
        "0",
        "8",
        "short by 2 spares",
    ]
    assert Pod.objects.get(pk=pod.pk).hot_spares == 2
    entry = AuditEvent.objects.get(action="pod.changed")
    assert (entry.actor, entry.object_type, entry.object_id) == (
        operator,
        "cluster.pod",
        str(pod.pk),
    )
    assert entry.data == {"changed": {"hot_spares": [0, 2]}, "reason": "XID storms this week"}
    trail = client.get("/ops/audit/?object_type=cluster.pod").content.decode()
    assert f'data-audit="{entry.pk}"' in trail


def test_an_operator_keeps_a_node_as_spare_and_gives_it_back_but_not_a_busy_one(
    cluster, small, operator, client, django_capture_on_commit_callbacks
):
    idle, busy = cluster[0], cluster[1]
    job = make_workload(small, "running", gpus=8)
    Allocation.objects.bulk_create(
        Allocation(workload=job, node=busy, gpu_index=i) for i in range(8)
    )
    client.force_login(operator)
    filled = client.get(f"/ops/spares/nodes/?node={idle.name}&spare=no").content.decode()
    assert f'value="{idle.name}"' in filled and '<option value="no" selected>' in filled
    done = client.post(
        "/ops/spares/nodes/", {"node": idle.name, "spare": "yes", "reason": "refill"}, follow=True
    )
    assert f"{idle.name} is now a hot spare of dc1/p1." in done.content.decode()
    assert Node.objects.get(pk=idle.pk).spare
    entry = AuditEvent.objects.get(action="node.spare")
    assert (entry.actor, entry.object_id, entry.data) == (
        operator,
        str(idle.pk),
        {"reason": "refill"},
    )
    refused = client.post("/ops/spares/nodes/", {"node": busy.name, "spare": "yes", "reason": "x"})
    assert refused.status_code == 200
    assert f"{busy.name} holds GPUs of a job" in refused.content.decode()
    assert not Node.objects.get(pk=busy.pk).spare
    unknown = client.post("/ops/spares/nodes/", {"node": "nope", "spare": "yes", "reason": "x"})
    assert "No node is called nope." in unknown.content.decode()
    with django_capture_on_commit_callbacks() as cycles:
        back = client.post(
            "/ops/spares/nodes/", {"node": idle.name, "spare": "no", "reason": "needed"}
        )
    assert back.status_code == 302 and len(cycles) == 1  # its GPUs may take pending work
    assert not Node.objects.get(pk=idle.pk).spare
    assert AuditEvent.objects.get(action="node.unspare").data == {"reason": "needed"}
    assert AuditEvent.objects.count() == 2


def test_the_spare_page_costs_the_same_queries_for_more_pods(
    db, operator, client, django_assert_max_num_queries
):
    make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=2)
    Node.objects.filter(pk=Node.objects.first().pk).update(spare=True)
    client.force_login(operator)
    with CaptureQueriesContext(connection) as few, django_assert_max_num_queries(6):
        assert client.get("/ops/spares/").status_code == 200
    pods = {f"p{i}": ("H800", 2) for i in range(12)}
    nodes = installation.build_cluster({"dc2": pods, "dc3": pods}, nodes_per_leaf=3)
    Node.objects.filter(pk__in=[n.pk for n in nodes[::5]]).update(spare=True)
    with CaptureQueriesContext(connection) as more, django_assert_max_num_queries(6):
        page = client.get("/ops/spares/").content.decode()
    assert page.count("<tr data-pod=") == 25 and page.count("<tr data-spare=") == 1 + len(
        nodes[::5]
    )
    assert len(more.captured_queries) == len(few.captured_queries)


def test_an_operator_sets_the_straggler_policy_and_cross_dc_default_in_the_portal(
    small, bob, operator, client
):
    """Not in Django's admin: the queue's page sets them, audited; the next job that names no
    topology gets the queue's new default, through the API as through the submit form."""
    client.force_login(operator)
    url = f"/ops/queues/{small.pk}/"
    done = edit(client, url, "span both halls", straggler_policy="replace", spans_datacenters="on")
    assert done.status_code == 302
    small.refresh_from_db()
    assert (small.straggler_policy, small.spans_datacenters) == ("replace", True)
    changed = AuditEvent.objects.get(action="queue.changed").data["changed"]
    assert changed == {"straggler_policy": ["alert", "replace"], "spans_datacenters": [False, True]}
    job = {"name": "spread", "queue": "small", "gpu_model": "H800", "gpus": 8}
    answer = api_client(bob).post("/api/v1/workloads/", job, format="json")
    assert answer.json()["topology"] == "any"


def test_an_operator_gives_a_queue_a_family_quota_and_its_jobs_run_on_any_of_its_models(
    small, operator, bob, client
):
    """Hopper (H800 and H20) gets 16 GPUs above the queue's 8 H800: its H20 work starts, the
    family's 16 cap the two models together, and the pages and the API show it."""
    GpuModel.objects.filter(name__in=["H800", "H20"]).update(family="hopper")
    job = {"name": "on-h20", "queue": "small", "gpu_model": "H20", "gpus": 8}
    refused = api_client(bob).post("/api/v1/workloads/", job, format="json")
    assert refused.status_code == 400 and "H20" in str(refused.json())
    client.force_login(operator)
    url = f"/ops/queues/{small.pk}/"
    assert "Quota for a GPU family" in client.get(url).content.decode()
    refused = edit(client, url, "hopper", **{"families-0-family": "volta", "families-0-nominal": 8})
    assert "Select a valid choice" in refused.content.decode()
    fields = {"families-0-family": "hopper", "families-0-nominal": 16}
    done = edit(client, url, "any hopper", **fields)
    assert (done.status_code, done.url) == (302, "/queues/")
    entry = AuditEvent.objects.get(action="queue.changed")
    assert entry.data["changed"] == {"hopper.nominal": [None, 16]}
    assert api_client(bob).post("/api/v1/workloads/", job, format="json").status_code == 201
    make_workload(small, "on-h800", gpus=8, model="H800")
    scheduling_cycle()
    third = make_workload(small, "third", gpus=8, model="H20")
    scheduling_cycle()
    states = {w.name: w.state for w in small.workloads.all()}
    assert states == {"on-h20": State.ADMITTED, "on-h800": State.ADMITTED, "third": State.PENDING}
    third.refresh_from_db()
    assert "hopper quota (16/16 in use" in third.pending_reason
    page = client.get("/queues/").content.decode()
    row = re.search(rf'data-queue="{small.pk}/hopper">(.*?)</tr>', page, re.S).group(1)
    assert "hopper family" in row and "H20, H800" in row and "16 in use" in row
    tree = re.search(r'data-tree="acme/small">(.*?)</tr>', page, re.S).group(1)
    cells = re.findall(r"<td>([^<]*)</td>", tree)
    assert cells[2:5] == ["16", "0", "8"]  # held (its H20 counted once), borrowed, waiting
    client.force_login(bob)
    answer = api_client(bob).get(f"/api/v1/queues/{small.pk}/").json()
    assert answer["family_quotas"] == [
        {"family": "hopper", "gpu_models": ["H20", "H800"], "nominal": 16, "borrowing_limit": None}
    ]
    assert "hopper family: 16 / ∞" in client.get("/quota/").content.decode()
