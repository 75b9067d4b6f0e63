"""Small builders for tests: a cluster, queues, workloads, an API client."""

from rest_framework.test import APIClient

from portal.cluster.models import DataCenter, GpuModel, Leaf, Node, Pod, Region
from portal.quotas.models import Cohort, Queue, QueueQuota
from portal.tenancy.models import ApiToken
from portal.workloads.models import Workload


def make_cluster(layout=None, nodes_per_leaf=4, connected=True):
    """Build region cn-east from {datacenter: {pod: (gpu model, leaves)}}; return the nodes."""
    layout = layout or {"dc1": {"p1": ("H800", 2)}, "dc2": {"p1": ("H800", 1), "p2": ("H20", 1)}}
    region, _ = Region.objects.get_or_create(name="cn-east")
    models = {}
    nodes = []
    for dc_name, pods in layout.items():
        dc = DataCenter.objects.create(region=region, name=dc_name)
        for pod_name, (model, leaves) in pods.items():
            if model not in models:
                models[model], _ = GpuModel.objects.get_or_create(name=model, memory_gb=80)
            pod = Pod.objects.create(datacenter=dc, name=pod_name)
            for leaf_no in range(1, leaves + 1):
                leaf = Leaf.objects.create(pod=pod, name=f"l{leaf_no}")
                nodes += [
                    Node.objects.create(name=f"{dc_name}-{pod_name}-l{leaf_no}-n{i}", leaf=leaf,
                                        gpu_model=models[model], connected=connected)
                    for i in range(1, nodes_per_leaf + 1)
                ]
    return nodes


def make_queue(tenant, name, cohort=None, **quotas):
    """make_queue(acme, "llm", h800=64) -> queue with nominal quota 64 H800."""
    queue = Queue.objects.create(
        tenant=tenant, name=name, region=Region.objects.get(name="cn-east"),
        cohort=Cohort.objects.get_or_create(name=cohort)[0] if cohort else None,
    )
    for model, nominal in quotas.items():
        QueueQuota.objects.create(queue=queue, gpu_model=GpuModel.objects.get(name=model.upper()),
                                  nominal=nominal)
    return queue


def make_workload(queue, name="job", gpus=16, model="H800", **fields):
    return Workload.objects.create(tenant=queue.tenant, queue=queue, name=name, gpus=gpus,
                                   gpu_model=GpuModel.objects.get(name=model), **fields)


def api_client(user) -> APIClient:
    """A client authenticated the way scripts are: with a bearer API token."""
    _, raw = ApiToken.issue(user.membership, "test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client
