"""Hot spares are held back for recoveries: never given ordinary work, refilled by repaired
nodes, shown per pod in the operator console."""

import re

from portal.cluster.choices import Health
from portal.cluster.models import Node, Pod
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation
from tests.builders import make_cluster, make_queue, make_workload


def test_a_spare_gets_no_ordinary_work_even_when_it_is_the_only_free_node(db, acme):
    nodes = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=2)
    Node.objects.filter(pk=nodes[1].pk).update(spare=True)
    queue = make_queue(acme, "llm", h800=64)
    first, second = make_workload(queue, "first", gpus=8), make_workload(queue, "second", gpus=8)
    scheduling_cycle()
    first.refresh_from_db(), second.refresh_from_db()
    assert (first.state, second.state) == (State.ADMITTED, State.PENDING)
    assert not Node.objects.get(pk=nodes[1].pk).allocations.exists()


def test_a_repaired_node_refills_a_short_pool_and_only_a_short_one(db):
    nodes = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=3)
    Pod.objects.update(hot_spares=1)
    repaired, other = nodes[0], nodes[1]
    for node in (repaired, other):
        node.set_health(Health.DOWN, "xid-79")
        node.set_health(Health.REPAIRING, "reseated the GPU")
    repaired.set_health(Health.READY, "passed its health check", checked=True)
    assert Node.objects.get(pk=repaired.pk).spare  # the pool had none
    other.set_health(Health.READY, "passed its health check", checked=True)
    assert not Node.objects.get(pk=other.pk).spare  # the pool is full again
    assert Pod.objects.get().spares_missing() == 0


def test_a_spare_holding_gpus_or_offline_is_not_ready_so_a_repaired_node_refills_the_pool(db, acme):
    """One meaning of "ready" for a recovery, the pool's refill, the admin and the spares page:
    ready, its agent connected, holding no GPUs."""
    nodes = make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=4)
    Pod.objects.update(hot_spares=2)
    busy, offline, repaired = nodes[0], nodes[1], nodes[2]
    Node.objects.filter(pk__in=[busy.pk, offline.pk]).update(spare=True)
    Node.objects.filter(pk=offline.pk).update(connected=False)
    job = make_workload(make_queue(acme, "llm", h800=64), "job", gpus=8)
    Allocation.objects.create(workload=job, node=busy, gpu_index=0)
    assert Pod.objects.get().spares_missing() == 2
    repaired.set_health(Health.DOWN, "xid-79")
    repaired.set_health(Health.REPAIRING, "reseated the GPU")
    repaired.set_health(Health.READY, "passed its health check", checked=True)
    assert Node.objects.get(pk=repaired.pk).spare
    assert Pod.objects.get().spares_missing() == 1


def test_the_console_shows_each_pool_its_target_and_what_is_missing(db, client, operator):
    make_cluster({"dc1": {"p1": ("H800", 1), "p2": ("H800", 1)}}, nodes_per_leaf=2)
    Pod.objects.filter(name="p1").update(hot_spares=2)
    spare = Node.objects.filter(leaf__pod__name="p1").first()
    spare.spare = True
    spare.save()
    client.force_login(operator)
    page = client.get("/admin/cluster/pod/").content.decode()
    rows = {cells[0]: cells[1:] for cells in _rows(page)}
    assert rows["dc1/p1"][:3] == ["2", "1", "1"]  # target, ready spares, missing
    assert rows["dc1/p2"][:3] == ["0", "0", "0"]


def _rows(page: str) -> list[list[str]]:
    """The change list's rows as text cells (the target is an input: its value)."""
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        text = []
        for cell in cells:
            value = re.search(r'name="form-\d+-hot_spares"[^>]*value="(\d+)"', cell) or re.search(
                r'value="(\d+)"[^>]*name="form-\d+-hot_spares"', cell
            )
            text.append(value.group(1) if value else re.sub(r"<[^>]+>", "", cell).strip())
        if text and text[0] == "":
            text = text[1:]  # the action checkbox
        if text:
            rows.append(text)
    return rows
