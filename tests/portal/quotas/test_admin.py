"""The operator console: quota decisions with the capacity check, nodes, read-only rows."""

import threading

import pytest
from django.db import connection

from portal.core.models import AuditEvent
from portal.quotas.models import QueueQuota
from portal.workloads.choices import State
from tests.builders import make_quota_request, make_workload


def test_the_request_list_costs_the_same_however_long(
    acme_llm, alice, operator, client, django_assert_max_num_queries
):
    for _ in range(30):
        make_quota_request(acme_llm, 8, alice)
    client.force_login(operator)
    with django_assert_max_num_queries(10):  # sessions, user, counts, the rows, filters
        page = client.get("/admin/quotas/quotarequest/").content.decode()
    assert page.count("64 committed + 8 requested = 72 of 96 GPUs: fits") == 30


def test_an_approval_over_capacity_is_refused(acme_llm, alice, operator, client):
    quota_request = make_quota_request(acme_llm, 40, alice)  # 64 committed + 40 > 96
    client.force_login(operator)
    page = client.post(
        "/admin/quotas/quotarequest/",
        {"action": "approve", "_selected_action": [quota_request.pk]},
        follow=True,
    )
    assert "not approved" in page.content.decode()
    quota_request.refresh_from_db()
    assert quota_request.status == "pending"
    assert QueueQuota.objects.get(queue=acme_llm).nominal == 64


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_approvals_at_once_cannot_overcommit_a_region(acme_llm, alice, operator):
    # 64 + 24 + 24 > 96
    first, second = make_quota_request(acme_llm, 24, alice), make_quota_request(acme_llm, 24, alice)
    results = []

    def decide(quota_request):
        try:
            results.append(quota_request.decide(operator, approve=True))
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(r,)) for r in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == [False, True]
    assert QueueQuota.objects.get(queue=acme_llm).nominal == 88


def test_operators_cancel_through_the_lifecycle_and_cannot_edit_allocations(
    acme_llm, operator, client
):
    from portal.workloads.cycle import scheduling_cycle

    workload = make_workload(acme_llm, gpus=8)
    scheduling_cycle()
    client.force_login(operator)
    allocation = workload.allocations.first()
    assert client.get(f"/admin/workloads/allocation/{allocation.pk}/delete/").status_code == 403
    page = client.post(
        "/admin/workloads/workload/",
        {"action": "cancel", "_selected_action": [workload.pk]},
        follow=True,
    )
    assert "1 workload(s) cancelled." in page.content.decode()  # it says so
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED
    assert not workload.allocations.exists()
    cancelled = AuditEvent.objects.get(action="workload.cancelled")
    assert (cancelled.actor, cancelled.object_id) == (operator, str(workload.pk))


def test_operators_issue_an_agent_token_shown_once(cluster, operator, client):
    node = cluster[0]
    client.force_login(operator)
    page = client.post(
        "/admin/cluster/node/",
        {"action": "issue_token", "_selected_action": [node.pk]},
        follow=True,
    )
    assert f"Agent token for {node}: wn_" in page.content.decode()
    node.refresh_from_db()
    assert node.token_hash


def test_a_node_action_that_partly_fails_says_so(cluster, operator, client):
    from portal.cluster.choices import Health

    cordoned, down = cluster[0], cluster[1]
    cordoned.set_health(Health.CORDONED, "test")
    down.set_health(Health.DOWN, "xid-79")
    client.force_login(operator)
    page = client.post(
        "/admin/cluster/node/",
        {"action": "make_ready", "_selected_action": [cordoned.pk, down.pk]},
        follow=True,
    ).content.decode()
    assert "1 node(s) now ready, 1 refused." in page
    assert "cannot go from down to ready" in page  # the reason, for the one refused
    assert {n.health for n in type(cordoned).objects.filter(pk__in=[cordoned.pk, down.pk])} == {
        "ready",
        "down",
    }
