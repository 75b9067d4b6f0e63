"""A fault on a running 64-GPU job, every layer real: the simulated agent raises XID 79, the
node goes down, the healthy ranks save from memory, a Celery worker swaps in the pod's hot
spare, the agents restart the job from the triggered checkpoint, and the lost time is booked."""

import time

import pytest

from portal.agents import progress
from portal.cluster.commands import send_command
from portal.cluster.models import Node
from portal.workloads import invariants
from portal.workloads.choices import CheckpointKind, RecoveryOutcome, RecoveryStep, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.ettr import job_report
from portal.workloads.models import Recovery
from scheduler import faults
from tests.builders import make_cluster, make_queue, make_workload
from tests.portal.live_client import LiveClient
from tests.portal.processes import start_fleet, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fleet(portal_server, celery_worker, clean_redis):
    # One pod of three leaves of four nodes: the job takes eight, one more is the hot spare.
    nodes = make_cluster({"dc1": {"p1": ("H800", 3)}}, connected=False)
    Node.objects.filter(pk=nodes[-1].pk).update(spare=True)
    fleet = start_fleet(portal_server)
    wait_until(
        lambda: Node.objects.filter(connected=True).count() == 12,
        30,
        "12 agents to register",
        check=fleet,
    )
    yield nodes[-1]
    fleet.stop()


def _live(portal_server, user):
    from django.test import Client

    browser = Client()
    browser.force_login(user)
    return LiveClient(portal_server, browser)


def test_a_job_hit_by_xid_79_runs_again_on_the_spare_from_its_triggered_save(
    fleet, portal_server, acme, bob
):
    spare = fleet
    queue = make_queue(acme, "llm", h800=64)
    workload = make_workload(
        queue,
        "llama-70b",
        gpus=64,
        checkpoint_policy="triggered",
        topology="pod",
        simulated_duration_s=600,
    )
    scheduling_cycle()
    wait_until(lambda: _state(workload) == State.RUNNING, 30, "the job to run")
    victim = workload.allocations.filter(node_rank=3).first().node
    live = _live(portal_server, bob)
    try:
        send_command(victim.pk, "inject_fault", code="xid-79", gpu_index=5)
        wait_until(
            lambda: Recovery.objects.filter(workload=workload, step=RecoveryStep.DONE).exists(),
            60,
            "the recovery to finish",
        )
        fault = live.wait_for("fault", lambda p: p["workloads"], timeout=10)
        assert fault["kind"] == "xid-79" and fault["workloads"] == ["llama-70b"]
        assert fault["workload_ids"] == [workload.pk]  # what its job page listens for
        live.wait_for("recovery", lambda p: p["step"] == RecoveryStep.DONE, timeout=10)
        steps = [p["step"] for p in live.of("recovery")]
    finally:
        live.close()
    assert steps[0] == RecoveryStep.SAVING and steps[-1] == RecoveryStep.DONE

    workload.refresh_from_db()
    recovery = Recovery.objects.get(workload=workload)
    assert workload.state == State.RUNNING and workload.attempt == 1
    assert recovery.outcome == RecoveryOutcome.SPARE
    assert recovery.detail == "the healthy ranks saved from memory"
    saved = workload.checkpoints.get(step=recovery.resume_step)
    assert saved.kind == CheckpointKind.TRIGGERED
    assert Node.objects.get(pk=victim.pk).health == "down"
    nodes = set(workload.allocations.values_list("node_id", flat=True))
    assert spare.pk in nodes and victim.pk not in nodes and len(nodes) == 8
    assert workload.allocations.get(node=spare, gpu_index=0).node_rank == 3

    report = job_report(workload)
    assert report["seconds"]["lost"] == 0  # nothing to redo after a triggered save
    assert report["seconds"]["recovering"] > 0
    assert 0 < report["ettr"] < 1
    # Once every node has heartbeated the new attempt, fleet and database agree again.
    wait_until(lambda: invariants.violations() == [], 15, "the invariants to hold")


def _state(workload):
    workload.refresh_from_db()
    return workload.state


def test_the_hang_drill_is_noticed_from_the_heartbeats_and_the_job_restarted(fleet, acme):
    """An operator's hang drill stops a node's steps; the step counters in its heartbeats show
    it (the detector runs here, its clock moved on past the limit), and the Celery worker
    restarts the job in place."""
    queue = make_queue(acme, "llm", h800=64)
    workload = make_workload(queue, "stuck", gpus=8, simulated_duration_s=3600)
    scheduling_cycle()
    wait_until(lambda: _state(workload) == State.RUNNING, 30, "the job to run")
    node = workload.allocations.first().node
    command = send_command(node.pk, "inject_fault", code="hang")
    wait_until(lambda: _answered(command), 10, "the drill to be acked")
    time.sleep(0.5)  # a heartbeat with the step it stopped at
    now = time.time()
    assert progress.detect(now=now) == []
    assert progress.detect(now=now + faults.HANG_AFTER_S) == [f"hang:{workload.pk}"]
    wait_until(
        lambda: _state(workload) == State.RUNNING and workload.attempt == 1,
        30,
        "the job to run again",
    )
    assert Recovery.objects.get(workload=workload).outcome == RecoveryOutcome.IN_PLACE


def _answered(command):
    command.refresh_from_db()
    return command.state != "sent"
