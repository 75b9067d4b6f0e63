"""Hangs judged by the steps a real job reports, every layer real: `wanka-agent` with the
processes backend runs `examples/train_tiny.py` (PyTorch on the CPU) and a script that reports
nothing; the detector reads the agent's heartbeats. A healthy job that saves seldom is never
hung, a job that reports no steps is never judged by steps at all, a job that stops is hung,
and the job page says how each is watched."""

import os
import signal
import time

import pytest
from django.test import Client

from portal.agents import progress
from portal.workloads.choices import CheckpointStatus, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from scheduler import faults
from scheduler.agent.processes import recorded_group
from tests.builders import make_cluster, make_queue, make_workload
from tests.portal.processes import SLEEPER, start_agent, train_tiny, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

pytest.importorskip("torch")


@pytest.fixture
def agent(portal_server, celery_worker, clean_redis, tmp_path):
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    child = start_agent(portal_server, node, tmp_path / "agent")
    yield node, tmp_path / "agent"
    child.stop()


def _state(workload):
    return Workload.objects.get(pk=workload.pk).state


def test_only_reported_steps_judge_a_hang(agent, acme, bob, settings):
    node, state_dir = agent
    # Scaled down from a job saving every 200 s against a 120 s floor: saves every 4 s, a
    # hang after 3 s without a step.
    settings.WANKA = {**settings.WANKA, "HANG_FLOOR_S": 3, "HANG_STEPS": 10}
    queue = make_queue(acme, "llm", h800=8)
    train = make_workload(
        queue,
        "train",
        gpus=1,
        command=train_tiny(1000),
        checkpoint_policy="periodic",
        env={"WANKA_CHECKPOINT_INTERVAL_S": "4"},
    )
    silent = make_workload(queue, "silent", gpus=1, command=SLEEPER, checkpoint_policy="none")
    scheduling_cycle()
    wait_until(lambda: {_state(train), _state(silent)} == {State.RUNNING}, 30, "both to run")
    wait_until(lambda: train.checkpoints.exists(), 60, "the first save")

    found, until = [], time.monotonic() + 12  # three save intervals, each over the limit
    while time.monotonic() < until:
        found += progress.detect()
        time.sleep(0.5)
    assert found == []
    assert train.checkpoints.filter(status=CheckpointStatus.COMPLETE).count() >= 3

    page = Client()
    page.force_login(bob)
    trained = page.get(f"/workloads/{train.pk}/").content.decode()
    assert "as the job reports it: hangs and stragglers are judged by it" in trained
    quiet = page.get(f"/workloads/{silent.pk}/").content.decode()
    assert "The job reports no steps" in quiet

    # The training job's processes stop (as a deadlocked collective would): hung, and only it.
    pgid = recorded_group(state_dir / "workloads" / str(train.pk))["pgid"]
    os.killpg(pgid, signal.SIGSTOP)
    try:
        wait_until(lambda: progress.detect() == [f"hang:{train.pk}"], 20, "the hang")
    finally:
        os.killpg(pgid, signal.SIGCONT)
    # The job that reports nothing is never judged by steps, however long it runs.
    assert progress.detect(now=time.time() + 2 * faults.HANG_AFTER_S) == []
    assert _state(silent) == State.RUNNING
