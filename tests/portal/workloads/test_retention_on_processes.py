"""Checkpoint retention on real processes: `examples/train_tiny.py` under `wanka-agent
--backend processes` saves every second; past the newest CHECKPOINTS_KEPT complete saves, the
agent deletes the older saves' files where they live, and the registry says so."""

from pathlib import Path

import pytest
from django.conf import settings

from portal.workloads.choices import CheckpointStatus, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from tests.builders import make_cluster, make_queue, make_workload
from tests.portal.processes import start_agent, train_tiny, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

pytest.importorskip("torch")


def test_saves_past_retention_are_deleted_from_the_node(
    portal_server, celery_worker, clean_redis, tmp_path, acme
):
    [node] = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=1, connected=False)
    agent = start_agent(portal_server, node, tmp_path / "agent")
    try:
        queue = make_queue(acme, "llm", h800=8)
        job = make_workload(
            queue,
            "saver",
            gpus=1,
            command=train_tiny(1000),
            checkpoint_policy="periodic",
            env={"WANKA_CHECKPOINT_INTERVAL_S": "1"},
        )
        scheduling_cycle()
        wait_until(lambda: Workload.objects.get(pk=job.pk).state == State.RUNNING, 30, "a run")
        kept = settings.WANKA["CHECKPOINTS_KEPT"]

        def deleted():
            return job.checkpoints.filter(status=CheckpointStatus.DELETED)

        wait_until(lambda: deleted().count() >= 3, 60, "three saves deleted")
        assert all(not Path(c.location).exists() for c in deleted())
        newest = job.checkpoints.filter(status=CheckpointStatus.COMPLETE)[:kept]
        assert len(newest) == kept and all(Path(c.location).exists() for c in newest)
        saves = job.checkpoints.exclude(status=CheckpointStatus.DELETED)
        on_disk = {p.name for p in Path(newest[0].location).parent.glob("step-*.pt")}
        assert {Path(c.location).name for c in deleted()}.isdisjoint(on_disk)
        assert len(on_disk) <= saves.count()  # nothing the registry has forgotten stays
    finally:
        agent.stop()
