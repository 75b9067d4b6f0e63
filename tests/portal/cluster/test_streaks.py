"""A node on which job after job of several tenants fails is cordoned with the reason, audited,
and no longer scheduled; a job that ends well there, or time, ends the streak; one tenant's
failing jobs never take a shared node away."""

import time

import pytest

from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.cluster.streaks import FAILURES, WINDOW_S
from portal.core.models import AuditEvent
from portal.workloads import lifecycle
from portal.workloads.cycle import scheduling_cycle
from tests.builders import api_client, make_queue, make_workload


@pytest.fixture
def only_node(cluster):
    """One H800 node the cycle may place on."""
    node = cluster[0]
    Node.objects.exclude(pk=node.pk).update(connected=False)
    return node


@pytest.fixture
def globex_train(globex, acme_llm):
    return make_queue(globex, "train", h800=64)


@pytest.fixture
def run_job(acme_llm, globex_train, only_node, django_capture_on_commit_callbacks):
    """Place a one-node job on the node (Acme's and Globex's in turn, unless `queue` is given)
    and have it exit with a code; the node, refreshed."""
    count = {"n": 0}

    def run(exit_code, queue=None):
        count["n"] += 1
        queue = queue or (acme_llm if count["n"] % 2 else globex_train)
        workload = make_workload(queue, gpus=8)
        scheduling_cycle()
        assert workload.allocations.filter(node=only_node).exists()
        with django_capture_on_commit_callbacks(execute=True):
            lifecycle.mark_started_many([(workload.pk, only_node.pk, 0)])
            lifecycle.finish(workload.pk, only_node.pk, exit_code)
        return Node.objects.get(pk=only_node.pk)

    return run


def test_a_node_that_fails_three_jobs_in_a_row_is_cordoned_audited_and_not_scheduled(
    run_job, acme_llm, only_node, operator, bob
):
    for _ in range(FAILURES - 1):
        assert run_job(1).health == Health.READY
    node = run_job(139)
    assert node.health == Health.CORDONED
    assert node.health_reason == (
        "3 jobs of 2 or more tenants in a row failed on it within 10 minutes "
        "(the last exited with code 139)"
    )
    audit = AuditEvent.objects.get(action="node.cordoned", object_id=str(node.pk))
    assert audit.data == {"previous": "ready", "reason": node.health_reason}
    # Operators read why through the API; a tenant reads only that it is cordoned.
    for user, reason in ((operator, node.health_reason), (bob, None)):
        for path in (f"/api/v1/nodes/{node.pk}/", f"/api/v1/nodes/?name={node.name}"):
            answer = api_client(user).get(path).json()
            row = answer["results"][0] if "results" in answer else answer
            assert (row["health"], row["health_reason"]) == ("cordoned", reason)
    waiting = make_workload(acme_llm, gpus=8)
    assert scheduling_cycle().admissions == []
    waiting.refresh_from_db()
    assert waiting.pending_reason


def test_one_tenants_failing_jobs_never_cordon_a_shared_node(run_job, acme_llm):
    healths = [run_job(1, queue=acme_llm).health for _ in range(2 * FAILURES)]
    assert healths == [Health.READY] * (2 * FAILURES)


def test_a_job_that_ends_well_in_between_ends_the_streak(run_job):
    healths = [run_job(code).health for code in (1, 1, 0, 1, 1, 1)]
    assert healths == [Health.READY] * 5 + [Health.CORDONED]


def test_failures_older_than_the_window_do_not_count(run_job, only_node):
    for _ in range(FAILURES - 1):
        run_job(1)
    long_ago = time.time() - WINDOW_S - 1
    Node.objects.filter(pk=only_node.pk).update(recent_failures=[[long_ago, 1], [long_ago, 2]])
    assert run_job(1).health == Health.READY


def test_only_the_node_whose_exit_failed_a_gang_counts(
    acme_llm, globex_train, cluster, django_capture_on_commit_callbacks
):
    for turn in range(FAILURES):
        workload = make_workload((acme_llm, globex_train)[turn % 2], gpus=16)
        scheduling_cycle()
        first, second = sorted(set(workload.allocations.values_list("node_id", flat=True)))
        with django_capture_on_commit_callbacks(execute=True):
            lifecycle.finish(workload.pk, first, 1)
            lifecycle.finish(workload.pk, second, 1)  # after the gang failed: not its failure
    assert Node.objects.get(pk=first).health == Health.CORDONED
    assert Node.objects.get(pk=second).health == Health.READY
