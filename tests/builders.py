"""Small builders for tests: a cluster, queues, workloads, an API client."""

from rest_framework.test import APIClient

from portal.cluster.models import GpuModel, Node, Region
from portal.demo import installation
from portal.quotas.models import Cohort, Queue, QueueQuota, QuotaRequest
from portal.tenancy.models import ApiToken
from portal.workloads.models import Workload


def make_cluster(layout=None, nodes_per_leaf=4, connected=True):
    """Build region cn-east from {datacenter: {pod: (gpu model, leaves)}}; return the nodes,
    connected as if their agents had said hello."""
    layout = layout or {"dc1": {"p1": ("H800", 2)}, "dc2": {"p1": ("H800", 1), "p2": ("H20", 1)}}
    nodes = installation.build_cluster(layout, nodes_per_leaf)
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(connected=connected)
    return list(Node.objects.filter(pk__in=[n.pk for n in nodes]).order_by("id"))


def make_queue(tenant, name, cohort=None, **quotas):
    """make_queue(acme, "llm", h800=64) -> queue with nominal quota 64 H800."""
    queue = Queue.objects.create(
        tenant=tenant,
        name=name,
        region=Region.objects.get(name="cn-east"),
        cohort=Cohort.objects.get_or_create(name=cohort)[0] if cohort else None,
    )
    for model, nominal in quotas.items():
        QueueQuota.objects.create(
            queue=queue, gpu_model=GpuModel.objects.get(name=model.upper()), nominal=nominal
        )
    return queue


def make_workload(queue, name="job", gpus=16, model="H800", **fields):
    return Workload.objects.create(
        tenant=queue.tenant,
        queue=queue,
        name=name,
        gpus=gpus,
        gpu_model=GpuModel.objects.get(name=model),
        **fields,
    )


def make_quota_request(queue, count, user, reason="more", model="H800"):
    """A tenant's request for `count` more `model` GPUs in the queue's region."""
    return QuotaRequest.objects.create(
        tenant=queue.tenant,
        queue=queue,
        gpu_model=GpuModel.objects.get(name=model),
        region=queue.region,
        count=count,
        reason=reason,
        requested_by=user,
    )


def api_client(user) -> APIClient:
    """A client authenticated the way scripts are: with a bearer API token."""
    _, raw = ApiToken.issue(user, "test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client
