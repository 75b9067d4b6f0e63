"""A node that breaks is the node's fault, not the job's, on real agents (`wanka-agent
--backend processes`): GPU 0 of a node falls off the bus (XID 79) and its job moves on; the
node marked repaired while still broken fails its agent's health check, goes back down with the
agent's reason, and no job is placed there; rebooted for real, it passes and takes work again."""

import pytest
from django.db import transaction

from portal.cluster import checks
from portal.cluster.choices import Health
from portal.cluster.commands import send_command
from portal.cluster.models import Node
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from tests.builders import make_cluster, make_queue, make_workload
from tests.portal.processes import SLEEPER, start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _job(workload):
    return Workload.objects.get(pk=workload.pk)


def _nodes(workload) -> set[int]:
    return set(_job(workload).allocations.values_list("node_id", flat=True))


def _ask_ready(node_id: int) -> None:
    """What the on-call does once the node is back from repair."""
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        node.set_health(Health.REPAIRING, "rebooted, they say")
        checks.move(node, Health.READY, "repaired")


def test_a_node_still_broken_fails_its_health_check_and_takes_no_work(
    portal_server, celery_worker, clean_redis, tmp_path, acme
):
    nodes = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=2, connected=False)
    agents = {n.pk: start_agent(portal_server, n, tmp_path / n.name) for n in nodes}
    try:
        queue = make_queue(acme, "llm", h800=16)
        first = make_workload(queue, "first", gpus=8, command=SLEEPER, checkpoint_policy="none")
        scheduling_cycle()
        wait_until(lambda: _job(first).state == State.RUNNING, 30, "the first job to run")
        [broken] = _nodes(first)
        with transaction.atomic():
            send_command(broken, "inject_fault", code="xid-79", gpu_index=0)

        def moved():
            scheduling_cycle()
            job = _job(first)
            return job.state == State.RUNNING and broken not in _nodes(job) and _nodes(job)

        wait_until(moved, 60, "the first job to move off the broken node")
        assert Node.objects.get(pk=broken).health == Health.DOWN
        # The on-call marks it repaired without a reboot: GPU 0 is still off the bus.
        _ask_ready(broken)
        assert Node.objects.get(pk=broken).health == Health.REPAIRING  # until the agent answers
        wait_until(
            lambda: Node.objects.get(pk=broken).health == Health.DOWN, 30, "the check to fail"
        )
        reason = Node.objects.get(pk=broken).health_reason
        assert reason.startswith("failed its health check") and "GPU 0 has fallen off" in reason
        second = make_workload(queue, "second", gpus=8, command=SLEEPER, checkpoint_policy="none")
        scheduling_cycle()
        assert _job(second).state == State.PENDING and not _nodes(second)

        # Rebooted for real: a fresh agent on a fresh machine, whose GPUs all answer.
        agents.pop(broken).stop()
        Node.objects.filter(pk=broken).update(connected=False)
        agents[broken] = start_agent(portal_server, Node.objects.get(pk=broken), tmp_path / "b")
        _ask_ready(broken)
        wait_until(
            lambda: Node.objects.get(pk=broken).health == Health.READY, 30, "the check to pass"
        )
        assert Node.objects.get(pk=broken).health_reason.startswith("passed its health check")

        def runs_there():
            scheduling_cycle()
            return _job(second).state == State.RUNNING

        wait_until(runs_there, 30, "the second job to run on the repaired node")
        assert _nodes(second) == {broken} and _job(first).state == State.RUNNING
    finally:
        for agent in agents.values():
            agent.stop()
