"""A node that breaks a start is the node's fault, not the job's, on real agents (`wanka-agent
--backend processes`): GPU 0 of a node falls off the bus (XID 79), the node is marked repaired
while still broken, and the next job placed there cannot start. The agent's reason becomes a
fault of the node, which leaves service again, and the job waits for other GPUs instead of
failing."""

import time

import pytest
from django.db import transaction

from portal.cluster.choices import Health
from portal.cluster.commands import send_command
from portal.cluster.models import FaultEvent, Node
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


def test_a_start_a_broken_node_refuses_is_its_fault_and_the_job_waits(
    portal_server, celery_worker, clean_redis, tmp_path, acme
):
    nodes = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=2, connected=False)
    agents = [start_agent(portal_server, n, tmp_path / n.name) for n in nodes]
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
        node = Node.objects.get(pk=broken)
        assert node.health != Health.READY
        # The on-call marks it repaired without a reboot: GPU 0 is still off the bus.
        node.set_health(Health.REPAIRING, "rebooted, they say")
        node.set_health(Health.READY, "repaired")

        second = make_workload(queue, "second", gpus=8, command=SLEEPER, checkpoint_policy="none")
        scheduling_cycle()
        assert _nodes(second) == {broken}  # the only free GPUs
        wait_until(
            lambda: FaultEvent.objects.filter(node_id=broken).count() == 2, 30, "a second fault"
        )
        fault = FaultEvent.objects.filter(node_id=broken).first()  # the newest
        assert fault.kind == "xid-79" and "GPU 0 has fallen off the bus" in fault.message
        assert Node.objects.get(pk=broken).health != Health.READY
        time.sleep(2)  # the refused start's exit report has arrived by now
        wait_until(lambda: _job(second).state == State.PENDING, 30, "the second job to wait")
        assert not _nodes(second) and _job(first).state == State.RUNNING
    finally:
        for agent in agents:
            agent.stop()
