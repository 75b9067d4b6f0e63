"""The cluster map's data: every node in its leaf's row, its health and GPUs held, the figures
of a fresh heartbeat (none from a stale one), the workloads on it; a fixed number of queries."""

import time

import pytest

from portal.agents.intake import record_fault
from portal.cluster.choices import Health
from portal.cluster.models import Gpu, Node
from portal.cluster.summary import write_heartbeat
from portal.dashboard.cluster_map import cluster_map
from portal.workloads.cycle import scheduling_cycle
from scheduler import faults
from scheduler.agent.simulated import SimulatedGpus
from tests.builders import make_workload

pytestmark = pytest.mark.django_db


def beat(redis, node, ts, util=80, temperature=60):
    gpus = [
        {"index": i, "util": util + i, "memory_used_mb": 40_000, "temperature_c": temperature + i,
         "power_w": 500.0}
        for i in range(2)
    ]  # fmt: skip
    with redis.pipeline() as pipe:  # as the agents' server writes it
        write_heartbeat(pipe, node.pk, ts, {"gpus": gpus, "workloads": []}, ("dc1", "H800"))
        pipe.execute()


def test_every_node_has_its_cell_and_its_figures(
    acme_llm, clean_redis, django_assert_max_num_queries
):
    job = make_workload(acme_llm, "pretrain", gpus=8)
    scheduling_cycle()
    busy = Node.objects.filter(allocations__workload=job).distinct().get()
    busy.gpus.all().delete()
    for i in range(2):
        Gpu.objects.create(node=busy, index=i, memory_mb=80_000)
    stale = Node.objects.exclude(pk=busy.pk).order_by("id").first()
    Node.objects.filter(pk=stale.pk).update(health=Health.DOWN)
    beat(clean_redis, busy, time.time())
    beat(clean_redis, stale, time.time() - 600)

    with django_assert_max_num_queries(5):
        found = cluster_map()
    nodes = Node.objects.count()
    assert len(found["name"]) == nodes and len(found["rows"]) == 4  # the builders' four leaves
    assert found["rows"][0] == "dc1 / p1 / l1"
    at = {name: i for i, name in enumerate(found["name"])}
    b, s = at[busy.name], at[stale.name]
    assert (found["held"][b], found["jobs"][b]) == (8, "pretrain")
    assert (found["util"][b], found["memory"][b], found["temperature"][b], found["power"][b]) == (
        80.5,
        50.0,
        61,
        1000,
    )
    assert found["util"][s] is None and found["temperature"][s] is None  # a stale heartbeat
    assert found["health_names"][found["health"][s]] == Health.DOWN
    # Cells of one leaf sit side by side in its row.
    assert sorted(found["col"][i] for i in range(nodes) if found["row"][i] == 0) == list(
        range(found["row"].count(0))
    )


def test_only_operators_see_the_map(acme_llm, client, bob, operator):
    client.force_login(bob)
    assert client.get("/ops/cluster/").status_code == 403
    client.force_login(operator)
    page = client.get("/ops/cluster/")
    assert page.status_code == 200 and b"cluster-map-data" in page.content


def test_a_nodes_page_has_its_gpus_workloads_faults_and_lifecycle(
    acme_llm, clean_redis, client, operator, django_assert_max_num_queries
):
    job = make_workload(acme_llm, "pretrain", gpus=8)
    scheduling_cycle()
    node = Node.objects.filter(allocations__workload=job).distinct().get()
    node.facts = SimulatedGpus(node.name, "H800").inventory().facts.to_message()  # its hello's
    node.save(update_fields=["facts"])
    beat(clean_redis, node, time.time(), util=70, temperature=55)
    record_fault(node.pk, faults.lookup("xid-79"), "fell off the bus")
    client.force_login(operator)
    with django_assert_max_num_queries(12):
        page = client.get(f"/ops/nodes/{node.pk}/").content.decode()
    assert "pretrain" in page and "70" in page and "56" in page  # its job, GPU 0 and GPU 1
    assert "GPU has fallen off the bus" in page or "xid-79" in page  # the fault's title
    assert "node.down" in page  # the fault took it down: its lifecycle says so
    assert "550.90.07 · CUDA 12.4 · NVLink 144 of 144 up" in page  # what its agent reported
    assert "224 × Simulated Xeon Platinum 8480+ · 2048 GiB of memory" in page
    assert "eth0 100 Gb/s, ib0 400 Gb/s" in page
    assert client.get("/ops/nodes/999999/").status_code == 404


def test_a_node_a_fault_took_down_is_drawn_apart_from_one_taken_out_of_service(
    cluster, clean_redis
):
    """Red for a failure; grey for a node an operator took down or that drained empty."""
    failed, drained = cluster[0], cluster[1]
    record_fault(failed.pk, faults.lookup("xid-79"), "fell off the bus")
    drained.set_health(Health.DRAINING, "by an operator")
    drained.set_health(Health.DOWN, "drained: it holds no more work")
    found = cluster_map()
    at = {name: i for i, name in enumerate(found["name"])}
    health = {node.name: found["health_names"][found["health"][at[node.name]]] for node in cluster}
    assert health[failed.name] == "failed" and health[drained.name] == Health.DOWN
    assert health[cluster[2].name] == Health.READY


def test_a_shared_gpu_shows_on_its_node_with_its_share_jobs(cluster, acme, clean_redis):
    from portal.workloads.allocations import create
    from portal.workloads.models import Allocation
    from tests.builders import make_queue, make_workload

    queue = make_queue(acme, "llm", h800=8)
    node = cluster[0]
    jobs = [make_workload(queue, f"q{i}", gpus=1, slices=s) for i, s in enumerate((2, 4))]
    create([Allocation(workload=w, node=node, gpu_index=3, slices=w.slices) for w in jobs])
    found = cluster_map()
    at = found["name"].index(node.name)
    assert found["held"][at] == 0.75
    assert found["shares"][at] == "GPU 3: 6/8 held by 2 share jobs"
    assert found["shares"][found["name"].index(cluster[1].name)] == ""
