"""Lists and pages cost a fixed number of queries, however many rows they show."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.cluster.models import Node
from portal.workloads.models import Allocation
from tests.builders import api_client, make_queue, make_workload


@pytest.fixture
def many_workloads(acme_llm):
    return [make_workload(acme_llm, f"job-{i}", gpus=8) for i in range(40)]


# Lists whose rows show columns of other tables.
COUNTED = [
    "/api/v1/workloads/",
    "/api/v1/nodes/",
    "/api/v1/queues/",
    "/api/v1/quota-requests/",
    "/api/v1/services/",
]


@pytest.mark.parametrize("url", [*COUNTED, "/api/v1/faults/", "/api/v1/nodes/summary/"])
def test_api_lists(many_workloads, bob, url, django_assert_max_num_queries):
    client = api_client(bob)
    with django_assert_max_num_queries(8):
        assert client.get(url).status_code == 200


@pytest.mark.parametrize("url", COUNTED)
def test_a_lists_count_reads_its_own_table(many_workloads, bob, url):
    """What a row shows of other tables comes as a subquery, which the page's count leaves out:
    a join or a grouping would be counted through for every row (at 12,500 nodes the nodes'
    count grouped every allocation of the fleet: 16 ms of a list's 25)."""
    with CaptureQueriesContext(connection) as queries:
        assert api_client(bob).get(url).status_code == 200
    [count] = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(")]
    assert " JOIN " not in count and "GROUP BY" not in count


def test_the_budgets_list_reads_where_each_stands_in_one_pass(many_workloads, bob):
    """Each budget's standing (used, burn, runs out at) comes from one usage pass for the
    page, not a pass per budget."""
    from portal.quotas.models import Budget

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert api_client(bob).get("/api/v1/budgets/").status_code == 200
        return len(captured)

    tenant = many_workloads[0].tenant
    Budget.objects.create(tenant=tenant, queue=many_workloads[0].queue, gpu_hours=100)
    Budget.objects.create(tenant=tenant, gpu_hours=1000)
    few = queries()
    for i in range(10):
        Budget.objects.create(tenant=tenant, queue=make_queue(tenant, f"q{i}"), gpu_hours=10)
    assert queries() <= few


def test_the_nodes_list_counts_each_nodes_allocated_gpus(many_workloads, bob):
    node = Node.objects.order_by("name").first()
    Allocation.objects.bulk_create(
        Allocation(workload=many_workloads[0], node=node, gpu_index=i) for i in range(3)
    )
    rows = api_client(bob).get("/api/v1/nodes/?limit=500").json()["results"]
    allocated = {row["name"]: row["gpus_allocated"] for row in rows}
    assert allocated[node.name] == 3
    assert set(allocated.values()) == {0, 3}


@pytest.mark.parametrize(
    "url, budget",
    [
        ("/", 16),  # with the tide: booked stretches and GPUs held, by kind
        ("/workloads/", 14),
        ("/quota/", 22),  # with the bars: every queue and cohort, GPUs held, pending work
        ("/queues/", 24),  # and GPU-hours this week and month
        ("/workloads/new/", 14),
        ("/services/", 12),  # and each queue's models (and families), quota left and GPUs free
    ],
)
def test_pages(many_workloads, bob, client, url, budget, django_assert_max_num_queries):
    client.force_login(bob)
    with django_assert_max_num_queries(budget):
        assert client.get(url).status_code == 200


def test_workload_page(many_workloads, bob, client, django_assert_max_num_queries):
    """Constant, whatever the job's history: the state, ETTR (events, stalls, losses),
    checkpoints, recoveries, parallel plans, the cluster's failure rate for the advisor, and
    what a cancel would cost."""
    client.force_login(bob)
    with django_assert_max_num_queries(22):
        assert client.get(f"/workloads/{many_workloads[0].pk}/").status_code == 200
