"""The services API: create with clear errors, tenants apart, viewers read only, change and
stop; the autoscaler's tick adds and stops replicas as the bounds say (no fleet: the load is
nothing, so the count sits at its minimum). A replica its service ends is `stopped`, one a
person cancels `cancelled`."""

import pytest

from portal.core.models import AuditEvent
from portal.services import autoscaling, load
from portal.services.models import Service
from portal.workloads.choices import Kind, State
from portal.workloads.models import Workload, transition
from tests.builders import api_client, make_queue

pytestmark = pytest.mark.django_db

CHAT = {
    "name": "chat",
    "queue": "infer",
    "gpu_model": "H800",
    "gpus_per_replica": 8,
    "min_replicas": 2,
    "max_replicas": 4,
    "target_concurrency": 4,
}


@pytest.fixture
def infer(cluster, acme):
    return make_queue(acme, "infer", h800=32)


def errors(answer):
    return {e["field"]: e["reason"] for e in answer.json()["errors"]}


@pytest.mark.parametrize(
    "change, field, reason",
    [
        ({"min_replicas": 5}, "min_replicas", "Need min_replicas <= max_replicas; got 5 > 4."),
        ({"min_replicas": 0}, "min_replicas", "0 replicas needs scale_to_zero"),
        ({"gpus_per_replica": 12}, "gpus_per_replica", "a multiple of 8"),
        ({"gpus_per_replica": 1.5}, "gpus_per_replica", "A share of a GPU is below 1"),
        ({"gpus_per_replica": 0.25, "gpu_memory_gb": 90}, "gpu_memory_gb", "has 80 GB"),
        ({"gpus_per_replica": 0}, "gpus_per_replica", "greater than or equal to 0.01"),
        ({"gpus_per_replica": 64}, "gpus_per_replica", "can never hold 64 H800 GPUs"),
        ({"queue": "nope"}, "queue", "Your tenant has no queue nope."),
        ({"target_concurrency": 0}, "target_concurrency", "greater than or equal to 0.1"),
        ({"stable_window_s": 3}, "stable_window_s", "greater than or equal to 6"),
        ({"port": 70000}, "port", "less than or equal to 65535"),
    ],
)
def test_a_wrong_service_is_refused_by_field(infer, bob, change, field, reason):
    answer = api_client(bob).post("/api/v1/services/", {**CHAT, **change}, format="json")
    assert answer.status_code == 400
    assert reason in errors(answer)[field]
    assert not Service.objects.exists()


def test_tenants_never_see_each_others_services(infer, bob, charlie, victor):
    created = api_client(bob).post("/api/v1/services/", CHAT, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    globex = api_client(charlie)
    assert globex.get("/api/v1/services/").json()["count"] == 0
    for path in (f"/api/v1/services/{pk}/", f"/api/v1/services/{pk}/endpoints/"):
        assert globex.get(path).status_code == 404
    assert globex.delete(f"/api/v1/services/{pk}/").status_code == 404
    viewer = api_client(victor)
    assert viewer.get(f"/api/v1/services/{pk}/").json()["name"] == "chat"
    assert viewer.patch(f"/api/v1/services/{pk}/", {"max_replicas": 8}).status_code == 403
    again = api_client(bob).post("/api/v1/services/", CHAT, format="json")
    assert errors(again) == {"name": "Your tenant has a service chat already."}
    elsewhere = make_queue(charlie.membership.tenant, "infer", h800=32)
    assert globex.post("/api/v1/services/", CHAT, format="json").status_code == 201
    assert Service.objects.get(tenant=charlie.membership.tenant).queue == elsewhere


def test_the_tick_follows_the_bounds_and_a_stop_stops_every_replica(infer, bob):
    api = api_client(bob)
    pk = api.post("/api/v1/services/", CHAT, format="json").json()["id"]
    autoscaling.tick()
    service = api.get(f"/api/v1/services/{pk}/").json()
    assert (service["desired_replicas"], service["replicas"]) == (2, 2)
    replicas = Workload.objects.filter(replica__service_id=pk)
    assert {(w.kind, w.gpus, w.serve_port, w.state) for w in replicas} == {
        (Kind.INFERENCE, 8, 8000, State.PENDING)
    }
    assert sorted(w.name for w in replicas) == ["chat-1", "chat-2"]
    assert api.get(f"/api/v1/services/{pk}/endpoints/").json() == []  # none serves yet

    changed = api.patch(f"/api/v1/services/{pk}/", {"min_replicas": 1}, format="json")
    assert changed.status_code == 200, changed.json()
    autoscaling.tick()  # not serving yet: the surplus replica is stopped at once
    assert replicas.filter(state=State.STOPPED).count() == 1
    surplus = replicas.get(state=State.STOPPED)
    assert surplus.events.last().reason == "scaled down before it served"
    shown = api.get(f"/api/v1/workloads/{surplus.pk}/").json()
    assert (shown["state"], shown["finished_at"] is not None) == ("stopped", True)
    assert [w["id"] for w in api.get("/api/v1/workloads/?state=stopped").json()["results"]] == [
        surplus.pk
    ]
    [listed] = api.get("/api/v1/services/").json()["results"]
    assert listed["replicas"] == 1  # the list counts live replicas only, as the detail does

    assert api.delete(f"/api/v1/services/{pk}/").status_code == 204
    assert set(replicas.values_list("state", flat=True)) == {State.STOPPED}
    last = replicas.exclude(pk=surplus.pk).get().events.last()
    assert (last.reason, last.actor) == ("its service was stopped", bob)
    assert not AuditEvent.objects.filter(action="workload.cancelled").exists()
    assert api.get(f"/api/v1/services/{pk}/").json()["active"] is False
    autoscaling.tick()
    assert replicas.count() == 2  # a stopped service gets no new replica
    samples = api.get(f"/api/v1/services/{pk}/samples/").json()
    assert [s["desired"] for s in samples] == [2, 1]


def test_a_drained_replica_ends_stopped_with_its_reason(infer, bob, monkeypatch):
    api = api_client(bob)
    pk = api.post("/api/v1/services/", CHAT, format="json").json()["id"]
    autoscaling.tick()
    replicas = Workload.objects.filter(replica__service_id=pk).order_by("pk")
    for replica in replicas:
        for to in (State.ADMITTED, State.RUNNING):
            transition(replica, to, "test")
    idle = {"host": "n1", "port": 8000, "in_flight": 0, "requests_per_s": 0}
    monkeypatch.setattr(load, "serving", lambda ids: dict.fromkeys(ids, idle))
    api.patch(f"/api/v1/services/{pk}/", {"min_replicas": 1}, format="json")
    autoscaling.tick()  # no load: down to one, the other drains at once, being idle
    oldest, newest = replicas.all()
    assert (oldest.state, newest.state) == (State.RUNNING, State.STOPPED)
    assert newest.events.last().reason == "scaled down, drained"


def test_a_person_cancelling_a_replica_still_cancels_it(infer, bob):
    api = api_client(bob)
    pk = api.post("/api/v1/services/", CHAT, format="json").json()["id"]
    autoscaling.tick()
    replica = Workload.objects.filter(replica__service_id=pk).first()
    answer = api.post(f"/api/v1/workloads/{replica.pk}/cancel/")
    assert (answer.status_code, answer.json()["state"]) == (200, "cancelled")
    assert AuditEvent.objects.get(action="workload.cancelled").object_id == str(replica.pk)
    autoscaling.tick()  # a replica that ended is replaced, as after a fault
    assert Workload.objects.filter(replica__service_id=pk).count() == 3


def test_the_list_costs_a_few_queries(infer, bob, django_assert_max_num_queries):
    api = api_client(bob)
    for name in ("a", "b", "c"):
        api.post("/api/v1/services/", {**CHAT, "name": name}, format="json")
    with django_assert_max_num_queries(6):
        assert api.get("/api/v1/services/").json()["count"] == 3


def test_a_replica_of_a_share_is_a_share_job_as_its_memory_asks(infer, bob):
    """0.25 of an H800 with 30 GB per replica: each replica is a share of 3/8 (30 of 80 GB is
    more than a quarter), read back as the 0.375 it holds; a change of size reaches the next
    replicas only."""
    asked = {**CHAT, "gpus_per_replica": 0.25, "gpu_memory_gb": 30, "min_replicas": 1}
    created = api_client(bob).post("/api/v1/services/", asked, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["gpus_per_replica"] == 0.375 and "gpu_memory_gb" not in created.json()
    service = Service.objects.get()
    autoscaling.add(service, 1)
    [first] = Workload.objects.all()
    assert (first.gpus, first.slices, first.kind) == (1, 3, Kind.INFERENCE)
    url = f"/api/v1/services/{service.pk}/"
    assert api_client(bob).patch(url, {"gpus_per_replica": 2}, format="json").status_code == 200
    autoscaling.add(Service.objects.get(), 1)
    assert sorted(Workload.objects.values_list("gpus", "slices")) == [(1, 3), (2, 0)]
    alone = api_client(bob).patch(url, {"gpu_memory_gb": 10}, format="json")
    assert errors(alone) == {
        "gpu_memory_gb": "gpu_memory_gb sizes a replica's share: give gpus_per_replica with it."
    }
