"""Operators act on any tenant's job, each action with a reason, audited, carried to the nodes:
through the API and through the console's confirmation pages."""

import re

import pytest

from portal.cluster.models import NodeCommand
from portal.core.models import AuditEvent
from portal.workloads.choices import PriorityClass, State
from portal.workloads.desired import desired_states
from tests.builders import api_client, make_workload
from tests.portal.workloads.test_recovery import running_job


@pytest.fixture
def job(acme_llm):
    return running_job(acme_llm, checkpoint_policy="async")


def _operate(user, workload, **body):
    return api_client(user).post(f"/api/v1/workloads/{workload.pk}/operate/", body, format="json")


def _assigned(nodes, workload) -> bool:
    return any(
        a["workload_id"] == workload.pk
        for state in desired_states(nodes).values()
        for a in state["assignments"]
    )


def test_preempting_saves_first_and_the_tenant_reads_why(job, operator, bob):
    workload, nodes = job
    answer = _operate(operator, workload, action="preempt", reason="draining rack 7")
    assert answer.status_code == 200 and answer.json()["state"] == State.PREEMPTING
    saves = NodeCommand.objects.filter(workload=workload, action="checkpoint")
    assert sorted(saves.values_list("node_id", flat=True)) == sorted(nodes)
    assert _assigned(nodes, workload)  # it runs on until it has saved
    entry = AuditEvent.objects.get(action="workload.preempt")
    assert (entry.actor, entry.data["reason"]) == (operator, "draining rack 7")
    events = api_client(bob).get(f"/api/v1/workloads/{workload.pk}/").json()["events"]
    assert events[-1]["reason"] == "preempted by an operator: draining rack 7"


def test_requeueing_stops_at_once_without_a_save(job, operator):
    workload, nodes = job
    assert _operate(operator, workload, action="requeue", reason="hung").status_code == 200
    assert not NodeCommand.objects.filter(workload=workload, action="checkpoint").exists()
    assert not _assigned(nodes, workload)  # its agents are told to stop it


def test_a_save_now_goes_to_every_node_and_the_job_runs_on(job, operator):
    workload, nodes = job
    answer = _operate(operator, workload, action="checkpoint", reason="before the upgrade")
    assert answer.json()["state"] == State.RUNNING
    saves = NodeCommand.objects.filter(workload=workload, action="checkpoint")
    assert sorted(saves.values_list("node_id", flat=True)) == sorted(nodes)
    assert saves.first().args["kind"] == "requested"


def test_priority_changes_are_audited_and_need_a_class(job, operator):
    workload, _ = job
    missing = _operate(operator, workload, action="priority", reason="deadline")
    assert missing.status_code == 400
    assert missing.json()["errors"] == [
        {"field": "priority", "reason": "Give the new priority class."}
    ]
    answer = _operate(
        operator, workload, action="priority", reason="deadline", priority=PriorityClass.HIGH
    )
    assert answer.json()["priority"] == PriorityClass.HIGH
    data = AuditEvent.objects.get(action="workload.priority").data
    assert (data["before"], data["after"]) == (PriorityClass.NORMAL, PriorityClass.HIGH)


def test_tenants_cannot_and_a_state_that_forbids_it_is_a_conflict(acme_llm, alice, operator):
    waiting = make_workload(acme_llm, "waiting", gpus=1000)
    assert _operate(alice, waiting, action="cancel", reason="x").status_code == 403
    refused = _operate(operator, waiting, action="preempt", reason="x")
    assert refused.status_code == 409 and "cannot be asked to preempt" in str(refused.json())
    waiting.refresh_from_db()
    assert waiting.state == State.PENDING


def test_the_console_lists_every_tenant_and_confirms_with_the_impact(
    job, operator, charlie, globex, client
):
    workload, _ = job
    from tests.builders import make_queue

    make_workload(make_queue(globex, "vision", h800=8), "globex-job", gpus=8)
    client.force_login(operator)
    page = client.get("/ops/workloads/").content.decode()
    assert "globex-job" in page and f'href="/ops/workloads/{workload.pk}/"' in page
    only = client.get(f"/ops/workloads/?tenant={globex.pk}").content.decode()
    assert "globex-job" in only and ">train<" not in only
    detail = client.get(f"/ops/workloads/{workload.pk}/").content.decode()
    actions = re.findall(rf'href="/ops/workloads/{workload.pk}/(\w+)/"', detail)
    assert actions == ["preempt", "requeue", "checkpoint", "priority", "cancel"]
    confirm = client.get(f"/ops/workloads/{workload.pk}/preempt/").content.decode()
    assert "Frees 16 GPUs on 2 nodes." in confirm and "It saves first" in confirm
    blank = client.post(f"/ops/workloads/{workload.pk}/preempt/", {"reason": " "})
    assert "Say why" in blank.content.decode()
    workload.refresh_from_db()
    assert workload.state == State.RUNNING
    done = client.post(f"/ops/workloads/{workload.pk}/preempt/", {"reason": "rack 7"})
    assert done.status_code == 302 and done.url == f"/ops/workloads/{workload.pk}/"
    workload.refresh_from_db()
    assert workload.state == State.PREEMPTING
    client.force_login(charlie)
    refused = client.get("/ops/workloads/")  # the portal's refusal, not the admin's sign-in
    assert refused.status_code == 403 and "Only the platform" in refused.text
    client.logout()
    assert client.get("/ops/workloads/").url == "/login/?next=/ops/workloads/"


def test_the_audit_log_shows_who_did_what_and_why_and_cannot_be_written(job, operator, bob, client):
    workload, _ = job
    _operate(operator, workload, action="checkpoint", reason="before the upgrade")
    client.force_login(operator)
    page = client.get("/ops/audit/?action=workload.").content.decode()
    row = re.search(r"<tr data-audit=.*?</tr>", page, re.S).group(0)
    assert "workload.checkpoint" in row and "operator" in row and "before the upgrade" in row
    assert "data-audit" not in client.get("/ops/audit/?action=node.").content.decode()
    assert client.post("/ops/audit/").status_code == 405
    client.force_login(bob)
    assert client.get("/ops/audit/").status_code == 403


def test_the_console_pages_fifty_at_a_time_keeping_the_filter(acme_llm, operator, client):
    from portal.workloads.models import Workload

    Workload.objects.bulk_create(
        Workload(tenant=acme_llm.tenant, queue=acme_llm, name=f"w{i}", gpus=8,
                 gpu_model=acme_llm.quotas.first().gpu_model)
        for i in range(51)
    )  # fmt: skip
    client.force_login(operator)
    first = client.get("/ops/workloads/?state=pending").content.decode()
    assert first.count("<tr data-workload=") == 50
    assert 'href="?state=pending&amp;page=2" rel="next"' in first
    second = client.get("/ops/workloads/?state=pending&page=2").content.decode()
    assert second.count("<tr data-workload=") == 1 and 'rel="prev"' in second
