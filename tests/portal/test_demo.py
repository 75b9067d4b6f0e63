import random

from portal.cluster.models import Node
from portal.demo import installation
from portal.workloads.models import Workload


def test_the_demo_has_two_data_centers_of_h800_and_h20_and_runs_once(db):
    assert installation.seed()
    assert Node.objects.values("leaf__pod__datacenter").distinct().count() == 2
    assert {n.gpu_model.name for n in Node.objects.select_related("gpu_model")} == {"H800", "H20"}
    assert sum(Node.objects.values_list("gpu_count", flat=True)) >= 512
    assert not installation.seed()


def test_demo_traffic_submits_until_enough_are_waiting(db):
    installation.seed()
    Workload.objects.update(state="running")  # setup: the seeded jobs are placed
    rng = random.Random(1)
    before = Workload.objects.count()
    while installation.submit_traffic(rng):
        pass
    assert Workload.objects.filter(state="pending").count() == installation.MAX_PENDING
    assert Workload.objects.count() > before
