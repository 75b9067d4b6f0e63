"""The invariant checker finds each thing that must never happen, and nothing on a sound
cluster."""

import json
import time

import pytest
from django.core.management import CommandError, call_command

from portal.cluster.models import Node
from portal.cluster.summary import REPORTED, TELEMETRY
from portal.workloads import invariants
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation, Workload
from tests.builders import make_workload


@pytest.fixture
def running(acme_llm, clean_redis):
    """A job running on two nodes, both agents converged and reporting it."""
    workload = make_workload(acme_llm, "pretrain", gpus=16)
    scheduling_cycle()
    Workload.objects.filter(pk=workload.pk).update(state=State.RUNNING)
    for node in Node.objects.filter(allocations__workload=workload).distinct():
        report(clean_redis, node, [workload.pk])
    return workload


def report(redis, node, running_ids, attempt=0, generation=None, strangers=()):
    """What the node's agent said in its last heartbeat: the workloads it runs, each seen on
    the GPUs it holds there, and `strangers` (GPU index, pid of no workload)."""
    items = [
        {"workload_id": w, "state": "running", "exit_code": None, "step": 1, "attempt": attempt}
        for w in running_ids
    ]
    seen = {i: [] for i in range(node.gpu_count)}
    for workload_id, index in node.allocations.filter(workload_id__in=running_ids).values_list(
        "workload_id", "gpu_index"
    ):
        seen[index].append({"pid": 1000 + workload_id, "workload_id": workload_id})
    for index, pid in strangers:
        seen[index].append({"pid": pid, "workload_id": None})
    gpus = [{"index": i, "processes": found} for i, found in seen.items()]
    sample = {"ts": time.time(), "gpus": gpus, "workloads": items}
    redis.hset(TELEMETRY, node.pk, json.dumps(sample))
    node.refresh_from_db()
    redis.hset(REPORTED, node.pk, node.generation if generation is None else generation)


def test_a_sound_cluster_has_no_violation(running, capsys):
    assert invariants.violations() == []
    call_command("check_invariants")
    assert "All invariants hold." in capsys.readouterr().out


def test_a_process_left_on_gpus_booked_to_another_job(running, clean_redis, cluster):
    idle = Node.objects.exclude(allocations__isnull=False).first()
    report(clean_redis, idle, [running.pk])  # converged, yet still running it
    assert invariants.unbooked_processes() == [
        f"node {idle.name} runs workload {running.pk}, which holds none of its GPUs"
    ]
    report(clean_redis, idle, [running.pk], generation=idle.generation - 1)
    assert invariants.unbooked_processes() == []  # not converged yet: on its way out


def test_a_process_on_a_gpu_that_its_workload_does_not_hold(running, clean_redis):
    node = Node.objects.filter(allocations__workload=running).first()
    report(clean_redis, node, [running.pk], strangers=[(3, 4242)])
    assert invariants.stranger_processes() == [
        f"node {node.name} GPU 3: pid 4242 is no workload's, which does not hold that GPU"
    ]
    idle = Node.objects.exclude(allocations__isnull=False).first()
    report(clean_redis, node, [running.pk])
    clean_redis.hset(TELEMETRY, idle.pk, json.dumps({
        "ts": time.time(), "workloads": [],
        "gpus": [{"index": 5, "processes": [{"pid": 77, "workload_id": running.pk}]}],
    }))  # fmt: skip
    clean_redis.hset(REPORTED, idle.pk, idle.generation)
    assert invariants.stranger_processes() == [
        f"node {idle.name} GPU 5: pid 77 is workload {running.pk}'s, which does not hold that GPU"
    ]


def test_gpus_booked_to_a_finished_job(running):
    Workload.objects.filter(pk=running.pk).update(state=State.SUCCEEDED)
    assert invariants.stale_allocations() == [
        f"workload {running.pk} is succeeded but still holds GPUs"
    ]
    with pytest.raises(CommandError, match="invariant violation"):
        call_command("check_invariants")


def test_a_node_of_a_running_job_on_an_old_attempt(running, clean_redis):
    Workload.objects.filter(pk=running.pk).update(attempt=1)
    node = Allocation.objects.filter(workload=running).first().node
    report(clean_redis, node, [running.pk], attempt=1)
    found = invariants.mixed_attempts()
    assert len(found) == 1 and "runs attempt [0]" in found[0]


def test_a_busy_hot_spare(running):
    node = Allocation.objects.filter(workload=running).first().node
    Node.objects.filter(pk=node.pk).update(spare=True)
    assert invariants.busy_spares() == [f"hot spare {node.name} holds GPUs of a job"]


def test_work_on_a_node_whose_agent_left_long_ago(running):
    node = Allocation.objects.filter(workload=running).first().node
    Node.objects.filter(pk=node.pk).update(connected=False, last_seen_at=None)
    assert invariants.unattended_work() == [
        f"node {node.name} holds a running job but its agent left and no fault handles it"
    ]
