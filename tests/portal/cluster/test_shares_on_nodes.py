"""A node's GPUs held count a share or a MIG instance as its part of a GPU, in the node API (for
every tenant), the fleet's summary and the operator's node page alike."""

from django.utils import timezone

from portal.workloads.models import Allocation
from tests.builders import api_client, make_workload


def test_shares_count_as_their_part_of_a_gpu_on_every_view_of_a_node(
    cluster, acme_llm, bob, operator, client
):
    node, now = cluster[0], timezone.now()
    running = {"state": "running", "admitted_at": now, "started_at": now}
    for i in range(3):
        job = make_workload(acme_llm, f"nb{i}", gpus=1, slices=2, **running)
        Allocation.objects.create(workload=job, node=node, gpu_index=0, slices=2, started=True)
    whole = make_workload(acme_llm, "whole", gpus=1, **running)
    Allocation.objects.create(workload=whole, node=node, gpu_index=1, started=True)

    assert api_client(bob).get(f"/api/v1/nodes/{node.pk}/").json()["gpus_allocated"] == 1.75
    listed = api_client(bob).get("/api/v1/nodes/?limit=500").json()["results"]
    assert {row["name"]: row["gpus_allocated"] for row in listed}[node.name] == 1.75
    summary = api_client(operator).get("/api/v1/nodes/summary/").json()
    assert summary["total"]["allocated"] == 1.75

    client.force_login(operator)
    confirm = client.get(f"/ops/nodes/{node.pk}/down/").content.decode()
    assert "nb0 of Acme, 0.25 GPU(s) here" in confirm
    assert "whole of Acme, 1 GPU(s) here" in confirm
