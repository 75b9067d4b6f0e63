"""Agent reports to state transitions: gangs start together and end on their slowest node."""

import pytest

from portal.cluster.models import Node
from portal.core.models import AuditEvent
from portal.workloads import lifecycle
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import IllegalTransition, UsageRecord
from tests.builders import api_client, make_workload


def admitted_gang(queue, nodes: int):
    """A job of `nodes` whole nodes, admitted; returns it with its nodes' ids."""
    workload = make_workload(queue, "gang", gpus=8 * nodes)
    scheduling_cycle()
    workload.refresh_from_db()
    node_ids = sorted(set(workload.allocations.values_list("node_id", flat=True)))
    assert workload.state == State.ADMITTED and len(node_ids) == nodes
    return workload, node_ids


@pytest.fixture
def gang(acme_llm, cluster):
    """A 16-GPU job admitted onto two nodes; returns it with its nodes' ids."""
    return admitted_gang(acme_llm, 2)


def _state(workload):
    workload.refresh_from_db()
    return workload.state


def test_running_once_every_node_runs_it(gang):
    workload, (a, b) = gang
    lifecycle.mark_started_many([(workload.pk, a, 0)])
    assert _state(workload) == State.STARTING
    lifecycle.mark_started_many([(workload.pk, b, 0)])
    assert _state(workload) == State.RUNNING


def test_succeeded_only_when_the_last_node_exits_zero(gang):
    workload, (a, b) = gang
    lifecycle.mark_started_many([(workload.pk, a, 0)])
    lifecycle.mark_started_many([(workload.pk, b, 0)])
    lifecycle.finish(workload.pk, a, 0)
    assert _state(workload) == State.RUNNING
    assert workload.allocations.count() == 16  # node b still saving: its GPUs stay booked
    lifecycle.finish(workload.pk, b, 0)
    assert _state(workload) == State.SUCCEEDED
    assert not workload.allocations.exists()
    assert UsageRecord.objects.get(workload=workload).gpus == 16


def test_a_node_that_finishes_before_the_other_reports_running(gang):
    """A short job: node a is done before node b's 'started' arrives; nothing is illegal."""
    workload, (a, b) = gang
    lifecycle.finish(workload.pk, a, 0)
    assert _state(workload) == State.STARTING
    lifecycle.finish(workload.pk, b, 0)
    assert _state(workload) == State.SUCCEEDED
    states = list(workload.events.values_list("to_state", flat=True))
    assert states == [State.ADMITTED, State.STARTING, State.RUNNING, State.SUCCEEDED]


def test_the_first_non_zero_exit_fails_the_gang(gang):
    workload, (a, b) = gang
    lifecycle.mark_started_many([(workload.pk, a, 0)])
    lifecycle.finish(workload.pk, b, 137)
    workload.refresh_from_db()
    assert (workload.state, workload.exit_code) == (State.FAILED, 137)
    assert not workload.allocations.exists()
    assert Node.objects.get(pk=a).generation == 2  # told to stop its part


def test_a_node_without_the_workload_changes_nothing(gang, cluster):
    workload, nodes = gang
    other = next(n.id for n in cluster if n.id not in nodes)
    lifecycle.finish(workload.pk, other, 0)
    lifecycle.mark_started_many([(workload.pk, other, 0)])
    assert _state(workload) == State.ADMITTED


def test_cancelling_a_finished_job_is_a_conflict_and_changes_nothing(gang, bob):
    workload, (a, b) = gang
    lifecycle.finish(workload.pk, a, 1)
    with pytest.raises(IllegalTransition):
        lifecycle.cancel(workload)
    response = api_client(bob).post(f"/api/v1/workloads/{workload.pk}/cancel/")
    assert response.status_code == 409
    assert response.json()["errors"] == [
        {"field": "state", "reason": "gang cannot go from failed to cancelled"}
    ]
    assert _state(workload) == State.FAILED


def test_cancel_uses_the_current_state_not_a_stale_copy(gang, bob):
    workload, (a, b) = gang
    stale = type(workload).objects.get(pk=workload.pk)
    lifecycle.mark_started_many(
        [(workload.pk, a, 0)]
    )  # moves it to STARTING behind the stale copy's back
    lifecycle.cancel(stale)
    assert _state(workload) == State.CANCELLED
    assert not workload.allocations.exists()


def test_a_job_past_its_time_limit_fails_and_frees_its_gpus(gang):
    from datetime import timedelta

    from django.utils import timezone

    workload, (a, b) = gang
    lifecycle.mark_started_many([(workload.pk, a, 0)])
    lifecycle.mark_started_many([(workload.pk, b, 0)])
    type(workload).objects.filter(pk=workload.pk).update(
        time_limit_s=60, started_at=timezone.now() - timedelta(seconds=61)
    )
    scheduling_cycle()
    workload.refresh_from_db()
    assert workload.state == State.FAILED
    assert workload.events.last().reason == "ran past its time limit of 60 s"
    assert not workload.allocations.exists()


def test_start_reports_of_several_nodes_in_one_batch_count_each_node(acme_llm, cluster):
    workload, (a, b, c, d) = admitted_gang(acme_llm, 4)
    other = Node.objects.exclude(pk__in=[a, b, c, d]).first().pk
    # Two nodes, a repeat, a stale attempt and a node the gang does not use: STARTING only.
    lifecycle.mark_started_many(
        [
            (workload.pk, a, 0),
            (workload.pk, b, 0),
            (workload.pk, a, 0),
            (workload.pk, c, 7),
            (workload.pk, other, 0),
        ]
    )
    assert _state(workload) == State.STARTING
    assert set(workload.allocations.filter(started=True).values_list("node_id", flat=True)) == {
        a,
        b,
    }
    lifecycle.mark_started_many([(workload.pk, c, 0), (workload.pk, d, 0)])
    assert _state(workload) == State.RUNNING


def test_submits_and_cancels_are_audited_with_who_and_for_which_tenant(acme_llm, bob):
    client = api_client(bob)
    body = {"name": "audited", "queue": "llm", "gpu_model": "H800", "gpus": 8}
    created = client.post("/api/v1/workloads/", body, format="json")
    assert created.status_code == 201, created.json()
    workload_id = str(created.json()["id"])
    assert client.post(f"/api/v1/workloads/{workload_id}/cancel/").status_code == 200
    trail = list(
        AuditEvent.objects.filter(object_id=workload_id).values_list("action", "actor", "tenant")
    )
    tenant = bob.membership.tenant_id
    assert sorted(trail) == [
        ("workload.cancelled", bob.pk, tenant),
        ("workload.submitted", bob.pk, tenant),
    ]


def test_a_start_report_the_database_lost_halfway_is_whole_when_repeated(gang):
    """The nodes' rows were marked, then the database went away before the transition (a
    crash between the two statements, written here as the first alone): the heartbeat's
    repeat of the report makes it."""
    workload, (a, b) = gang
    workload.allocations.update(started=True)
    assert _state(workload) == State.ADMITTED
    lifecycle.mark_started_many([(workload.pk, a, 0), (workload.pk, b, 0)])
    assert _state(workload) == State.RUNNING
