"""Hung jobs and straggling nodes, noticed from the step counters in heartbeats."""

import json
import time

import pytest

from portal.agents import progress
from portal.cluster.models import FaultEvent, Node
from portal.cluster.summary import TELEMETRY
from portal.workloads import lifecycle
from portal.workloads.choices import RecoveryOutcome, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from scheduler import faults
from tests.builders import make_workload


def beat(redis, workload, steps: dict[int, int | None]):
    """The heartbeats of the workload's nodes, each at the training step it reports (None: it
    reports none, and `step` is its newest save's)."""
    for node_id, step in steps.items():
        item = {"workload_id": workload.pk, "state": "running", "exit_code": None, "step": 0}
        if step is not None:
            item["progress"] = step
        sample = {"ts": time.time(), "gpus": [], "workloads": [{**item, "attempt": 0}]}
        redis.hset(TELEMETRY, node_id, json.dumps(sample))


@pytest.fixture
def running(acme_llm, clean_redis):
    """A two-node job, running."""
    workload = make_workload(acme_llm, "pretrain", gpus=16, checkpoint_policy="none")
    scheduling_cycle()
    nodes = sorted(set(workload.allocations.values_list("node_id", flat=True)))
    for node_id in nodes:
        lifecycle.mark_started_many([(workload.pk, node_id, 0)])
    return workload, nodes


def _state(workload):
    return Workload.objects.get(pk=workload.pk).state


def test_a_job_that_stops_stepping_is_hung_and_restarted(running, clean_redis, acme_llm):
    workload, nodes = running
    t = time.time()
    beat(clean_redis, workload, {n: 10 for n in nodes})
    assert progress.detect(now=t) == []
    beat(clean_redis, workload, {n: 20 for n in nodes})  # a step a second
    assert progress.detect(now=t + 10) == []
    assert progress.detect(now=t + 100) == []  # 90 s without a step: under the 120 s floor
    assert progress.detect(now=t + 131) == [f"hang:{workload.pk}"]
    fault = FaultEvent.objects.get(kind="hang")
    assert fault.node_id == nodes[0] and list(fault.workloads.all()) == [workload]
    assert "stuck at step 20" in fault.message
    assert _state(workload) == State.RECOVERING
    assert Node.objects.get(pk=nodes[0]).health == "ready"  # a job's symptom, not the node's
    from portal.workloads.recovery import advance

    recovery = workload.recoveries.get()
    advance(recovery.pk)  # a policy that never saves: straight to the restart
    recovery.refresh_from_db()
    assert recovery.lost_s == pytest.approx(121, abs=0.01)  # stood still from t + 10 on


def test_a_job_that_steps_on_is_never_hung(running, clean_redis):
    workload, nodes = running
    t = time.time()
    for i in range(20):
        beat(clean_redis, workload, {n: i * 50 for n in nodes})
        assert progress.detect(now=t + i * 30) == []
    assert _state(workload) == State.RUNNING


def test_a_job_that_reports_no_steps_is_never_judged_by_them(running, clean_redis):
    """However long it runs, and whatever its saves' steps: its processes alone are watched."""
    workload, nodes = running
    t = time.time()
    for i in range(5):
        beat(clean_redis, workload, {n: None for n in nodes})
        assert progress.detect(now=t + i * faults.HANG_AFTER_S) == []
    assert _state(workload) == State.RUNNING


def test_a_straggler_its_queue_replaces_moves_to_a_spare(running, clean_redis, settings):
    workload, (fast, slow) = running
    settings.WANKA = {**settings.WANKA, "STRAGGLER_FOR_S": 60}
    workload.queue.straggler_policy = "replace"
    workload.queue.save()
    spare = Node.objects.exclude(pk__in=[fast, slow]).filter(allocations__isnull=True).first()
    Node.objects.filter(pk=spare.pk).update(spare=True)
    t, found = time.time(), []
    for i in range(10):  # the slow node at a third of its peer's pace
        beat(clean_redis, workload, {fast: 30 * i, slow: 10 * i})
        found += progress.detect(now=t + 10 * i)
    assert found == [f"straggler:{workload.pk}:{slow}"]  # once, after a minute slow on end
    fault = FaultEvent.objects.get(kind="straggler")
    assert fault.node_id == slow and list(fault.workloads.all()) == [workload]
    recovery = workload.recoveries.get()
    assert recovery.lost_nodes == [slow]
    from portal.workloads.recovery import advance

    advance(recovery.pk)
    recovery.refresh_from_db()
    assert recovery.outcome == RecoveryOutcome.SPARE
    assert set(workload.allocations.values_list("node_id", flat=True)) == {fast, spare.pk}


def test_a_straggler_of_a_queue_that_only_alerts_is_left_running(running, clean_redis, settings):
    workload, (fast, slow) = running
    settings.WANKA = {**settings.WANKA, "STRAGGLER_FOR_S": 30}
    t = time.time()
    for i in range(6):
        beat(clean_redis, workload, {fast: 30 * i, slow: 10 * i})
        progress.detect(now=t + 10 * i)
    assert FaultEvent.objects.get(kind="straggler").node_id == slow
    assert _state(workload) == State.RUNNING and not workload.recoveries.exists()


def test_a_job_whose_other_node_still_steps_is_not_hung(running, clean_redis):
    """One node's counter stands still (it ran ahead, or finished its share) while the other
    goes on: not a hang, whatever the furthest node says (the one standing still may be a
    straggler)."""
    workload, (ahead, behind) = running
    t = time.time()
    for i in range(20):  # both at a step a second, until the one ahead stops at 360
        beat(clean_redis, workload, {ahead: 300 + 30 * min(i, 2), behind: 30 * i})
        assert f"hang:{workload.pk}" not in progress.detect(now=t + i * 30)
    assert not FaultEvent.objects.filter(kind="hang").exists()


def test_step_rates_are_measured_over_several_seconds_not_one_look(running, clean_redis, settings):
    """Looked at every second, a node whose counter moves three steps every three seconds
    reads 0 steps twice in a row; measured over RATE_OVER_S it keeps its peer's pace of a step
    a second and is no straggler."""
    workload, (steady, jittery) = running
    settings.WANKA = {**settings.WANKA, "STRAGGLER_FOR_S": 1}
    t = time.time()
    for i in range(40):
        beat(clean_redis, workload, {steady: i, jittery: 3 * (i // 3)})
        assert progress.detect(now=t + i) == []
    assert not FaultEvent.objects.filter(kind="straggler").exists()
