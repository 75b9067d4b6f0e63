"""An agent killed with -9 on a node of real processes: its job keeps running without it, the
node is declared lost and the job runs again on another node. The agent started in the killed
one's place stops that orphan before it says hello, so the job does not run twice for longer
than the outage, and the node comes back with its GPUs free. What fencing misses is reported:
a stranger on a GPU fails the invariants and the node's health check."""

import contextlib
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from portal.agents.intake import mark_lost_nodes
from portal.cluster import checks
from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.cluster.summary import LAST_SEEN, SEEN_SINCE, WEB_UP_SINCE
from portal.workloads import invariants
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from scheduler.agent.processes import recorded_group
from tests.builders import make_cluster, make_queue, make_workload
from tests.leftovers import left_behind
from tests.portal.processes import SLEEPER, start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _running_in(pgid: int) -> list[int]:
    """The live (not zombie) processes of group `pgid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def _pgid(state: Path, workload) -> int | None:
    try:
        return recorded_group(state / "workloads" / str(workload.pk))["pgid"]
    except (OSError, ValueError):
        return None


def _fall_silent(node, redis) -> None:
    """The node's last heartbeat a minute ago, in Redis and the database; Redis has kept
    heartbeats, and the web tier been up, for an hour: the lost-node sweep's view of an agent
    killed a minute ago."""
    long_ago = time.time() - 60
    Node.objects.filter(pk=node.pk).update(last_seen_at=timezone.now() - timedelta(minutes=1))
    redis.zadd(LAST_SEEN, {node.pk: long_ago})
    redis.set(SEEN_SINCE, time.time() - 3600)
    redis.set(WEB_UP_SINCE, time.time() - 3600)


def test_a_restarted_agent_stops_the_orphan_of_the_one_killed(
    portal_server, celery_worker, clean_redis, tmp_path, acme
):
    first, second = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=2, connected=False)
    states = {first.pk: tmp_path / "first", second.pk: tmp_path / "second"}
    agents = {n.pk: start_agent(portal_server, n, states[n.pk]) for n in (first, second)}
    orphan = None
    try:
        queue = make_queue(acme, "llm", h800=8)
        job = make_workload(queue, "job", gpus=8, command=SLEEPER, checkpoint_policy="none")
        scheduling_cycle()
        wait_until(lambda: _state(job) == State.RUNNING, 30, "the job to run")
        node = Workload.objects.get(pk=job.pk).allocations.first().node
        other = second if node.pk == first.pk else first
        orphan = _pgid(states[node.pk], job)

        agents[node.pk].process.send_signal(signal.SIGKILL)
        agents[node.pk].process.wait()
        wait_until(lambda: not Node.objects.get(pk=node.pk).connected, 30, "the server to notice")
        _fall_silent(node, clean_redis)
        assert mark_lost_nodes() == [node.pk]

        def moved():
            scheduling_cycle()
            return _state(job) == State.RUNNING and _pgid(states[other.pk], job) is not None

        wait_until(moved, 60, "the job to run on the other node")
        assert _running_in(orphan), "a killed agent's job outlives it: two copies run now"

        agents[node.pk] = start_agent(portal_server, node, states[node.pk])  # its successor
        assert not _running_in(orphan)  # stopped before the hello that made the node connected
        assert _running_in(_pgid(states[other.pk], job))  # the one copy left
    finally:
        for agent in agents.values():
            agent.stop()
        if orphan is not None:  # should the test fail before the successor stops it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(orphan, signal.SIGKILL)


def test_a_process_no_workload_started_fails_the_invariants_and_the_health_check(
    portal_server, celery_worker, clean_redis, tmp_path
):
    """A process group an earlier agent left that fencing did not end (here: recorded in the
    agent's state directory after its fence ran) is seen on its GPUs as a stranger: the
    invariant checker names it, and the node does not pass its health check until it is gone."""
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "state")
    try:
        with left_behind(tmp_path / "state" / "workloads" / "99", [2], "99") as stranger:
            said = f"node {node.name} GPU 2: pid {stranger.pid} is no workload's"
            wait_until(
                lambda: any(v.startswith(said) for v in invariants.stranger_processes()),
                30,
                "the agent to report the stranger",
            )
            Node.objects.get(pk=node.pk).set_health(Health.DOWN, "by the operator")
            _ask_ready(node)
            wait_until(lambda: _health(node) == Health.DOWN, 30, "the health check to fail")
            assert f"pid {stranger.pid} on GPU 2" in Node.objects.get(pk=node.pk).health_reason
        _ask_ready(node)  # it is gone now
        wait_until(lambda: _health(node) == Health.READY, 30, "the health check to pass")
        wait_until(lambda: not invariants.stranger_processes(), 30, "the next heartbeat")
    finally:
        agent.stop()


def _ask_ready(node) -> None:
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        node.set_health(Health.REPAIRING, "looked at")
        checks.move(node, Health.READY, "repaired")


def _health(node):
    return Node.objects.get(pk=node.pk).health


def _state(workload):
    return Workload.objects.get(pk=workload.pk).state
