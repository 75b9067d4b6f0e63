"""Lists and pages cost a fixed number of queries, however many rows they show."""

import pytest

from tests.builders import api_client, make_workload


@pytest.fixture
def many_workloads(acme_llm):
    return [make_workload(acme_llm, f"job-{i}", gpus=8) for i in range(40)]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/workloads/",
        "/api/v1/nodes/",
        "/api/v1/queues/",
        "/api/v1/quota-requests/",
        "/api/v1/faults/",
        "/api/v1/nodes/summary/",
        "/api/v1/services/",
    ],
)
def test_api_lists(many_workloads, bob, url, django_assert_max_num_queries):
    client = api_client(bob)
    with django_assert_max_num_queries(8):
        assert client.get(url).status_code == 200


@pytest.mark.parametrize(
    "url, budget",
    [
        ("/", 16),  # with the tide: booked stretches and GPUs held, by kind
        ("/workloads/", 14),
        ("/quota/", 18),  # with the bars: every queue and cohort, GPUs held, pending work
        ("/queues/", 24),  # and GPU-hours this week and month
        ("/workloads/new/", 14),
        ("/services/", 8),
    ],
)
def test_pages(many_workloads, bob, client, url, budget, django_assert_max_num_queries):
    client.force_login(bob)
    with django_assert_max_num_queries(budget):
        assert client.get(url).status_code == 200


def test_workload_page(many_workloads, bob, client, django_assert_max_num_queries):
    """Constant, whatever the job's history: the state, ETTR (events, stalls, losses),
    checkpoints, recoveries, parallel plans, and the cluster's failure rate for the advisor."""
    client.force_login(bob)
    with django_assert_max_num_queries(19):
        assert client.get(f"/workloads/{many_workloads[0].pk}/").status_code == 200
