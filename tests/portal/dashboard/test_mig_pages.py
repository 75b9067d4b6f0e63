"""MIG layouts on the node page and the cluster map, in English and Chinese: per GPU its MIG
instances, each with its profile and whether it is in use."""

import pytest
from django.utils import translation

from portal.cluster.models import Gpu, GpuModel
from portal.dashboard.cluster_map import cluster_map
from portal.workloads.cycle import apply
from scheduler import engine
from tests.builders import make_workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def sliced(cluster):
    """The first node's GPU 0 sliced (its 3g.40gb in use), GPU 1 going to MIG at its next
    reset; its other GPUs and the other nodes without MIG."""
    node = cluster[0]
    profiles = [("3g.40gb", True), ("2g.20gb", False), ("1g.10gb", False), ("1g.10gb", False)]
    devices = [{"uuid": f"MIG-{i}", "profile": p, "in_use": u} for i, (p, u) in enumerate(profiles)]
    mig = {"enabled": True, "pending": True, "devices": devices}
    gpus = [Gpu(node=node, index=i, memory_mb=81559) for i in range(3)]
    gpus[0].mig, gpus[1].mig = mig, {"enabled": False, "pending": True, "devices": []}
    Gpu.objects.bulk_create(gpus)
    return node


def test_the_node_page_lists_each_gpus_mig_instances(sliced, client, operator):
    client.force_login(operator)
    page = client.get(f"/ops/nodes/{sliced.pk}/").content.decode()
    table = page[page.index('<table id="node-mig-gpus">') :]
    table = table[: table.index("</table>")]
    assert "3g.40gb (in use)" in table and "2g.20gb (free)" in table
    assert table.count("1g.10gb (free)") == 2
    assert "<td>1</td><td>off · on at its next reset</td>" in table
    assert "<td>2</td>" not in table  # no MIG: not listed
    assert "a GPU with an instance in use is never re-sliced" in page
    chinese = client.get(f"/ops/nodes/{sliced.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    text = chinese.content.decode()
    assert "MIG 实例" in text and "3g.40gb (使用中)" in text and "关闭 · 下次重置后开启" in text


def test_a_node_without_mig_has_no_mig_section(cluster, client, operator):
    client.force_login(operator)
    assert 'id="node-mig"' not in client.get(f"/ops/nodes/{cluster[1].pk}/").content.decode()


def test_the_map_names_each_sliced_gpus_instances_in_the_readers_language(
    sliced, cluster, django_assert_max_num_queries
):
    with django_assert_max_num_queries(6):  # one more than without MIG
        found = cluster_map()
    at = found["name"].index(sliced.name)
    assert found["mig"][at] == (
        "GPU 0: 3g.40gb (in use), 2g.20gb, 1g.10gb, 1g.10gb<br>GPU 1: MIG on at its next reset"
    )
    assert found["mig"][found["name"].index(cluster[1].name)] == ""
    with translation.override("zh-hans"):
        assert cluster_map()["mig"][at].startswith("GPU 0：3g.40gb（使用中）, 2g.20gb")


def test_the_map_counts_a_mig_job_as_held_not_as_a_share_job(cluster, acme_llm, clean_redis):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)
    job = make_workload(acme_llm, "half", gpus=1, mig="3g.40gb")
    placement = engine.Placement(cluster[0].id, (0,))
    apply(engine.Plan(admissions=[engine.Admission(job.pk, (placement,))]))
    found = cluster_map()
    at = found["name"].index(cluster[0].name)
    assert (found["held"][at], found["shares"][at]) == (0.5, "")  # its 4 memory slots of 8
