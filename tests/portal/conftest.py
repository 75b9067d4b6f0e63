"""The fixed cast and a small cluster, shared by the portal's tests.

Tenant Acme: admin Alice, member Bob, viewer Victor. Tenant Globex: admin Charlie, who must never
see Acme's things. One region with two data centers of H800 nodes and one pod of H20 nodes.
"""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal.cluster.models import DataCenter, GpuModel, Leaf, Node, Pod, Region
from portal.quotas.models import Cohort, Queue, QueueQuota
from portal.tenancy.choices import Role
from portal.tenancy.models import ApiToken, Membership, Tenant
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


def _member(username, tenant, role):
    user = User.objects.create_user(username, password="pw-" + username)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


@pytest.fixture
def cluster(db):
    return make_cluster()


@pytest.fixture
def acme(db):
    return Tenant.objects.create(name="Acme", slug="acme")


@pytest.fixture
def globex(db):
    return Tenant.objects.create(name="Globex", slug="globex")


@pytest.fixture
def alice(acme):
    return _member("alice", acme, Role.ADMIN)


@pytest.fixture
def bob(acme):
    return _member("bob", acme, Role.MEMBER)


@pytest.fixture
def victor(acme):
    return _member("victor", acme, Role.VIEWER)


@pytest.fixture
def charlie(globex):
    return _member("charlie", globex, Role.ADMIN)


@pytest.fixture
def operator(db):
    return User.objects.create_superuser("operator", password="pw-operator")


@pytest.fixture
def acme_llm(cluster, acme):
    return make_queue(acme, "llm", h800=64)


def api_client(user) -> APIClient:
    """A client authenticated the way scripts are: with a bearer API token."""
    _, raw = ApiToken.issue(user.membership, "test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture(scope="session")
def portal_server(django_db_setup, django_db_blocker):
    """A real ASGI server (daphne) on the test database; yields its port."""
    from tests.portal.processes import start_server

    with django_db_blocker.unblock():
        server, port = start_server()
    yield port
    server.stop()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker):
    from tests.portal.processes import start_worker

    with django_db_blocker.unblock():
        worker = start_worker()
    yield worker
    worker.stop()


@pytest.fixture
def clean_redis():
    """Each cross-process test starts without old telemetry, history or cycle lock. (Not a
    FLUSHDB: that would drop the broker's queue bindings under the running worker.)"""
    from portal.cluster.summary import HISTORY, LAST_SEEN, TELEMETRY
    from portal.core.redis import client

    client().delete(TELEMETRY, LAST_SEEN, HISTORY, "wanka:cycle:lock", "wanka:cycle:again")
    return client()
