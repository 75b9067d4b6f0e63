"""Defragmentation on the portal's side: which pods are due and with how many moves left, the
operator's settings per pod (the hot spares page, audited, refused without a "when"), and the
tenant's "do not move" flag in the API, the form and the job page."""

from datetime import datetime, time, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from portal.cluster.models import GpuModel, Node, NodeCommand, Pod
from portal.core.models import AuditEvent
from portal.workloads import defrag, lifecycle
from portal.workloads.choices import RecoveryOutcome, RecoveryStep, State
from portal.workloads.models import Allocation, Recovery, Workload
from scheduler import engine
from scheduler.engine.explain import defrag_reason
from tests.builders import api_client, make_queue, make_workload

pytestmark = pytest.mark.django_db

# The default cluster's pods: dc1/p1, dc2/p1 and dc2/p2.
AT_0230 = timezone.make_aware(datetime(2026, 12, 7, 2, 30))


def _pod(path="dc1/p1") -> Pod:
    dc, name = path.split("/")
    return Pod.objects.get(datacenter__name=dc, name=name)


def _moved(pod: Pod, job, ago: timedelta, now=AT_0230) -> None:
    node = Node.objects.filter(leaf__pod=pod).first()
    recovery = Recovery.objects.create(
        workload=job,
        step=RecoveryStep.DONE,
        outcome=RecoveryOutcome.DEFRAGMENTED,
        lost_nodes=[node.pk],
    )
    Recovery.objects.filter(pk=recovery.pk).update(started_at=now - ago)


@pytest.mark.parametrize(
    "settings, now, due",
    [
        pytest.param({}, AT_0230, False, id="off: never due"),
        pytest.param(
            {"defrag_when_scattered": True}, AT_0230, True, id="when scattered: always due"
        ),
        pytest.param({"defrag_at": time(2, 0)}, AT_0230, True, id="half an hour into its hour"),
        pytest.param(
            {"defrag_at": time(2, 0)}, AT_0230 + timedelta(hours=1), False, id="its hour is over"
        ),
        pytest.param(
            {"defrag_at": time(2, 45)}, AT_0230, False, id="a quarter of an hour before it"
        ),
        pytest.param(
            {"defrag_at": time(23, 50)},
            AT_0230.replace(hour=0, minute=20),
            True,
            id="its hour runs over midnight",
        ),
    ],
)
def test_a_pod_is_due_in_its_hour_or_whenever_scattered(cluster, settings, now, due):
    on = {"defrag": bool(settings), **settings}
    Pod.objects.filter(pk=_pod().pk).update(**on)
    assert defrag.due(now) == ((("dc1/p1", 4),) if due else ())


def test_the_moves_of_the_last_hour_in_the_pod_are_spent(cluster, acme_llm):
    Pod.objects.filter(pk=_pod().pk).update(defrag=True, defrag_when_scattered=True)
    Pod.objects.filter(pk=_pod("dc2/p1").pk).update(
        defrag=True, defrag_when_scattered=True, defrag_moves=1
    )
    job = make_workload(acme_llm, gpus=4)
    _moved(_pod(), job, timedelta(minutes=5))
    _moved(_pod(), job, timedelta(minutes=50))
    _moved(_pod(), job, timedelta(minutes=70))  # over an hour ago: not counted
    _moved(_pod("dc2/p1"), job, timedelta(minutes=1))
    _moved(_pod("dc2/p1"), job, timedelta(minutes=2))
    assert set(defrag.due(AT_0230)) == {("dc1/p1", 2), ("dc2/p1", 0)}


def test_a_pod_defragmented_must_say_when(cluster):
    pod = _pod()
    pod.defrag = True
    with pytest.raises(ValidationError, match="Say when"):
        pod.full_clean()
    pod.defrag_at = time(2, 0)
    pod.full_clean()


def test_an_operator_turns_defragmentation_on_for_a_pod(cluster, operator, client):
    pod = _pod()
    client.force_login(operator)
    url = f"/ops/spares/pods/{pod.pk}/"
    form = client.get(url).content.decode()
    assert 'name="defrag_at"' in form and 'name="defrag_when_scattered"' in form
    asked = {"hot_spares": 0, "defrag": "on", "defrag_moves": 2, "reason": "gangs wait"}
    refused = client.post(url, asked).content.decode()
    assert "Say when: a time of day, or when free GPUs are scattered, or both." in refused
    assert not _pod().defrag and not AuditEvent.objects.exists()
    done = client.post(url, {**asked, "defrag_at": "02:00"}, follow=True).content.decode()
    assert "Defragmentation: daily from 02:00 for an hour; at most 2 moves an hour." in done
    assert 'data-defrag="on">daily from 02:00 for an hour; at most 2 moves an hour<' in done
    pod = _pod()
    assert (pod.defrag, pod.defrag_at, pod.defrag_when_scattered, pod.defrag_moves) == (
        True,
        time(2, 0),
        False,
        2,
    )
    entry = AuditEvent.objects.get(action="pod.changed")
    assert entry.data == {
        "changed": {"defrag": [False, True], "defrag_at": [None, "02:00"], "defrag_moves": [4, 2]},
        "reason": "gangs wait",
    }
    client.post(url, {**asked, "defrag_at": "02:00", "defrag_when_scattered": "on"})
    page = client.get("/ops/spares/").content.decode()
    assert "daily from 02:00 for an hour, and whenever free GPUs are scattered" in page


def test_a_tenant_cannot_change_a_pod(cluster, alice, client):
    client.force_login(alice)
    pod = _pod()
    client.post(f"/ops/spares/pods/{pod.pk}/", {"defrag": "on", "defrag_when_scattered": "on"})
    assert not _pod().defrag


JOB = {"name": "eval", "queue": "llm", "gpu_model": "H800", "gpus": 4}


def test_a_job_is_movable_unless_its_submitter_says_not(acme_llm, bob):
    api = api_client(bob)
    assert api.post("/api/v1/workloads/", JOB, format="json").json()["movable"] is True
    pinned = api.post("/api/v1/workloads/", {**JOB, "movable": False}, format="json")
    assert pinned.status_code == 201 and pinned.json()["movable"] is False
    assert Workload.objects.get(pk=pinned.json()["id"]).movable is False
    bad = api.post("/api/v1/workloads/", {**JOB, "movable": "perhaps"}, format="json")
    assert bad.status_code == 400
    assert bad.json() == {"errors": [{"field": "movable", "reason": "Must be a valid boolean."}]}


def test_the_form_marks_a_job_not_to_move_and_its_page_says_so(acme_llm, bob, client):
    client.force_login(bob)
    form = {**JOB, "kind": "training", "priority": "0", "checkpoint_policy": "async"}
    client.post("/workloads/new/", {**form, "pinned": "on"})
    client.post("/workloads/new/", {**form, "name": "free"})
    pinned, free = Workload.objects.get(name="eval"), Workload.objects.get(name="free")
    assert (pinned.movable, free.movable) == (False, True)
    page = client.get(f"/workloads/{pinned.pk}/").content.decode()
    assert 'data-movable="no">never moved while it runs (marked not to move)<' in page
    again = client.get(f"/workloads/new/?from={pinned.pk}").content.decode()
    assert 'name="pinned" checked' in again
    assert 'data-movable="yes"' in client.get(f"/workloads/{free.pk}/").content.decode()


def test_the_save_a_move_asks_for_names_no_other_tenants_work(cluster, acme, globex):
    """The reason of a save request reaches the job's own files on its node: a move made for
    another tenant's gang names it as that tenant's reader would, not by its id."""
    gang = make_workload(make_queue(globex, "big", h800=64), "secret-gang", gpus=16)
    job = make_workload(
        make_queue(acme, "llm", h800=64), "small", gpus=2, state=State.RUNNING,
        started_at=timezone.now() - timedelta(hours=3), checkpoint_policy="async",
    )  # fmt: skip
    Allocation.objects.bulk_create(
        Allocation(workload=job, node_rank=0, node=cluster[0], gpu_index=i) for i in (0, 1)
    )
    waiting = engine.Workload(gang.pk, gang.queue_id, "H800", 16, submitted_at=0.0)
    reason = defrag_reason(cluster[1].name, "dc1/p1", waiting)
    assert f"workload {gang.pk}" in reason
    h800 = GpuModel.objects.get(name="H800").pk
    lifecycle.move(job, h800, [(cluster[1].pk, (0, 1))], reason, RecoveryOutcome.DEFRAGMENTED)
    [said] = [a["reason"] for a in NodeCommand.objects.filter(workload=job).values_list(
        "args", flat=True) if "reason" in a]  # fmt: skip
    assert "before moving" in said and f"workload {gang.pk}" not in said
