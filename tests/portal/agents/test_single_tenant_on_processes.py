"""A node whose agent cannot keep tenants apart, on a real agent (`wanka-agent --backend
processes`): its hello says so, the portal marks the node single-tenant and the scheduler gives
its free GPUs to the tenant whose work it runs, another tenant's job only once it is empty.
The agent here runs as root but keeps its state where other users cannot reach (a test's
temporary folder), so, as an agent that is not root, it runs jobs as its own user."""

import pytest

from portal.cluster.models import Node
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.lifecycle import cancel
from portal.workloads.models import Workload
from tests.builders import make_cluster, make_queue, make_workload
from tests.portal.processes import SLEEPER, start_agent, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _state(workload) -> str:
    return Workload.objects.get(pk=workload.pk).state


def test_a_node_that_cannot_keep_tenants_apart_runs_one_tenants_work_at_a_time(
    portal_server, celery_worker, clean_redis, tmp_path, acme, globex
):
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    try:
        node = Node.objects.get(pk=node.pk)
        assert node.single_tenant and node.facts["isolates_tenants"] is False
        ours, theirs = make_queue(acme, "llm", h800=8), make_queue(globex, "llm", h800=8)
        first = make_workload(ours, "first", gpus=2, command=SLEEPER, checkpoint_policy="none")
        scheduling_cycle()
        wait_until(lambda: _state(first) == State.RUNNING, 30, "acme's first job to run")
        other = make_workload(theirs, "other", gpus=2, command=SLEEPER, checkpoint_policy="none")
        second = make_workload(ours, "second", gpus=2, command=SLEEPER, checkpoint_policy="none")
        scheduling_cycle()
        wait_until(lambda: _state(second) == State.RUNNING, 30, "acme's second job to run")
        other = Workload.objects.get(pk=other.pk)
        assert other.state == State.PENDING and not other.allocations.exists()
        assert "free GPUs" in other.pending_reason

        for job in (first, second):
            cancel(Workload.objects.get(pk=job.pk))
        scheduling_cycle()
        wait_until(lambda: _state(other) == State.RUNNING, 30, "globex's job to run once alone")
        assert set(
            Workload.objects.get(pk=other.pk).allocations.values_list("node", flat=True)
        ) == {node.pk}
    finally:
        agent.stop()
