"""Every form's defaults are accepted as they stand: the queue drives the GPU model (one its
quota holds, with quota left and GPUs free now in its label) and the region, and a job that
names no topology gets its queue's default. Each form is read as a browser would send it,
only the fields a person must type filled in."""

from html.parser import HTMLParser

import pytest

from portal.quotas.models import QuotaRequest
from portal.services.models import Service
from portal.workloads.choices import Topology
from portal.workloads.models import Workload
from tests.builders import make_queue


class Form(HTMLParser):
    """The fields of the form with `marker` in its attributes, as the browser would post them."""

    def __init__(self, html: str, marker: str):
        super().__init__()
        self.marker, self.inside, self.select, self.fields = marker, False, None, {}
        self.labels: dict[str, list[str]] = {}
        self.option = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.inside = self.marker in attrs.values()
        if not self.inside:
            return
        if tag == "input" and attrs.get("type") not in ("checkbox", "submit") and "name" in attrs:
            self.fields[attrs["name"]] = attrs.get("value", "")
        if tag == "textarea":
            self.fields[attrs["name"]] = ""
        if tag == "select":
            self.select = attrs["name"]
            self.fields.setdefault(self.select, None)
        if tag == "option" and self.select:
            self.option = (attrs.get("value"), "selected" in attrs)
            self.labels.setdefault(self.select, [])

    def handle_data(self, data):
        if self.inside and self.select and self.option is not None:
            value, selected = self.option
            value = data if value is None else value  # an option without a value sends its text
            self.labels[self.select].append(data)
            if self.fields[self.select] is None or selected:
                self.fields[self.select] = value
            self.option = None

    def handle_endtag(self, tag):
        if tag == "select":
            self.select = None
        if tag == "form":
            self.inside = False


@pytest.fixture
def h20_first(cluster, acme):
    """The first queue holds H20 only, in a region of H800 and H20; it spans data centers."""
    queue = make_queue(acme, "a-serve", h20=16)
    queue.spans_datacenters = True
    queue.save()
    make_queue(acme, "b-train", h800=64)
    return queue


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_the_submit_form_as_it_stands(request, who, h20_first, client):
    client.force_login(request.getfixturevalue(who))
    form = Form(client.get("/workloads/new/").content.decode(), "grid")
    assert form.fields["queue"] == "a-serve" and form.fields["gpu_model"] == "H20"
    assert form.labels["gpu_model"] == ["H20: 16 of 16 left in quota, 32 free now"]
    assert form.fields["topology"] == ""  # the queue's default
    answer = client.post("/workloads/new/", {**form.fields, "name": "as-it-stands"})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    job = Workload.objects.get(name="as-it-stands")
    assert (job.queue, job.gpu_model.name, job.topology) == (h20_first, "H20", Topology.ANY)


def test_a_gpu_that_shares_hold_counts_once_as_not_free(h20_first, cluster, bob, client):
    """Two quarter shares on one H20 and a whole H20 of another node: 2 of 32 not free, and
    1.5 of the quota held (a share charges its part of a GPU)."""
    from portal.workloads.models import Allocation
    from tests.builders import make_workload

    h20 = [node for node in cluster if node.gpu_model.name == "H20"]
    for name, node, slices in (("q1", h20[0], 2), ("q2", h20[0], 2), ("w", h20[1], 0)):
        job = make_workload(h20_first, name, gpus=1, model="H20", slices=slices)
        Allocation.objects.create(workload=job, node=node, gpu_index=0, slices=slices)
    client.force_login(bob)
    form = Form(client.get("/workloads/new/").content.decode(), "grid")
    assert form.labels["gpu_model"] == ["H20: 14.50 of 16 left in quota, 30 free now"]


def test_the_service_form_as_it_stands(h20_first, bob, client):
    client.force_login(bob)
    page = client.get("/services/").content.decode()
    form = Form(page, "service-form")
    assert (form.fields["queue"], form.fields["gpu_model"]) == ("a-serve", "H20")
    answer = client.post("/services/", {**form.fields, "name": "chat"})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert Service.objects.get(name="chat").gpu_model.name == "H20"


def test_the_service_form_makes_replicas_of_a_share(h20_first, bob, client):
    """A quarter of an H20 per replica, from the form: the list and the service's page say
    0.25 per replica, in both languages."""
    client.force_login(bob)
    form = Form(client.get("/services/").content.decode(), "service-form")
    fields = {**form.fields, "name": "embed", "gpus_per_replica": "0.25", "gpu_memory_gb": ""}
    answer = client.post("/services/", fields)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    service = Service.objects.get(name="embed")
    assert (service.gpus_per_replica, service.replica_slices) == (1, 2)
    assert "0.25 × H20" in client.get("/services/").content.decode()
    assert "0.25 × H20 per replica" in client.get(answer.url).content.decode()
    client.cookies["django_language"] = "zh-hans"
    assert "0.25 × H20" in client.get(answer.url).content.decode()


def test_the_quota_form_as_it_stands_asks_for_the_queues_own_model(h20_first, alice, client):
    client.force_login(alice)
    form = Form(client.get("/quota/").content.decode(), "quota-form")
    assert (form.fields["queue"], form.fields["gpu_model"]) == ("a-serve", "H20")
    assert form.fields["region"] == "cn-east"
    assert form.labels["gpu_model"][0] == "H20: quota 16, 32 in the region"
    filled = {**form.fields, "count": "8", "reason": "a launch"}
    assert client.post("/quota/", filled).status_code == 302
    asked = QuotaRequest.objects.get()
    assert (asked.queue, asked.gpu_model.name, asked.region.name) == (h20_first, "H20", "cn-east")
