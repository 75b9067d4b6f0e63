"""MIG jobs in the database: a booking holds its profile's memory slots of its GPU, never past
eight; the cycle sees each GPU's MIG instances; GPU-hours are charged at the profile's share."""

import pytest
from django.db import IntegrityError
from django.test import Client

from portal.cluster.models import Gpu, GpuModel
from portal.dashboard.queues import gpus_held
from portal.workloads.allocations import release
from portal.workloads.cycle import apply, build_snapshot
from portal.workloads.invariants import unreconciled_usage
from portal.workloads.models import Allocation, UsageRecord, Workload
from portal.workloads.usage import held_now
from scheduler import engine
from tests.builders import api_client, make_workload


@pytest.fixture
def h800_80gb(db):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)


def mig(queue, name, profile):
    return make_workload(queue, name, gpus=1, mig=profile)


def admit(node, *workloads):
    placement = engine.Placement(node.id, (0,))
    apply(engine.Plan(admissions=[engine.Admission(w.pk, (placement,)) for w in workloads]))


@pytest.mark.django_db
def test_a_mig_booking_holds_its_memory_slots_and_is_charged_its_share(
    acme_llm, cluster, h800_80gb
):
    job = mig(acme_llm, "small", "1g.10gb")
    admit(cluster[0], job)
    assert list(Allocation.objects.values_list("gpu_index", "slices")) == [(0, 1)]
    # While it runs, what quota, usage and metrics count is its charge too, not its slots.
    charge = pytest.approx(1 / 7)  # its compute, the larger of the two
    assert held_now(Workload.objects.all())[0] == charge
    assert gpus_held() == {(acme_llm.pk, "H800"): charge}
    assert unreconciled_usage() == []
    release(job)
    [record] = UsageRecord.objects.all()
    assert record.gpus == pytest.approx(1 / 7)
    assert unreconciled_usage() == []


@pytest.mark.django_db
def test_mig_charges_read_as_gpus_in_the_api_the_pages_and_the_command(
    acme_llm, cluster, h800_80gb, bob
):
    """Three 1g.10gb hold three sevenths of a GPU: the usage API says so (it said 0), the
    queues and quota pages round it to 0.429 (`wanka quota`: `test_cli_rows`)."""
    admit(cluster[0], *(mig(acme_llm, name, "1g.10gb") for name in "abc"))
    [row] = api_client(bob).get("/api/v1/usage/").json()["rows"]
    assert row["in_use"] == pytest.approx(3 / 7)
    client = Client()
    client.force_login(bob)
    for page in ("/queues/", "/quota/"):
        html = client.get(page).content.decode()
        assert "0.429 in use" in html and "0.42857" not in html


@pytest.mark.django_db
def test_a_gpu_never_holds_mig_instances_past_its_memory(acme_llm, cluster, h800_80gb):
    """Two 4g.40gb (four slots each) fill a GPU; a third cannot be booked beside them."""
    admit(cluster[0], mig(acme_llm, "a", "4g.40gb"), mig(acme_llm, "b", "4g.40gb"))
    with pytest.raises(IntegrityError, match="past their whole"):
        admit(cluster[0], mig(acme_llm, "c", "1g.10gb"))


@pytest.mark.django_db
def test_the_cycle_sees_each_gpus_mig_instances_and_each_models_profiles(
    acme_llm, cluster, h800_80gb
):
    devices = [
        {"uuid": f"MIG-{i}", "profile": p, "in_use": False}
        for i, p in enumerate(("3g.40gb", "1g.10gb"))
    ]
    for index, layout in [
        (1, {}),
        (2, {"enabled": True, "pending": True, "devices": devices}),
        (3, {"enabled": False, "pending": True, "devices": []}),
    ]:
        Gpu.objects.create(
            node=cluster[0], index=index, uuid=f"GPU-{index}", memory_mb=81_559, mig=layout
        )
    snapshot = build_snapshot()
    assert snapshot.mig_layouts == {(cluster[0].id, 2): ("3g.40gb", "1g.10gb")}
    assert "7g.80gb" in snapshot.mig_profiles["H800"]
    assert "H20" not in snapshot.mig_profiles
