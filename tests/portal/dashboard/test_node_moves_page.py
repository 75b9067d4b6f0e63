"""Operators move nodes from the node's page, not Django's admin: the moves its lifecycle
allows, each confirmed with what it does to the jobs there (named, with their tenants and what
they lose) and a reason; the move then reaches the jobs as the API's does."""

import re

from portal.agents.intake import carry_out_node_moves
from portal.cluster.choices import Health
from portal.cluster.models import Node, NodeCommand
from portal.core.models import AuditEvent
from portal.workloads.choices import State
from tests.builders import make_queue
from tests.portal.workloads.test_recovery import running_job


def _moves(client, node) -> list[str]:
    page = client.get(f"/ops/nodes/{node.pk}/").content.decode()
    return re.findall(rf'href="/ops/nodes/{node.pk}/(\w+)/"', page)


def test_a_node_taken_down_from_its_page_has_its_jobs_recovered(acme_llm, operator, client):
    workload, (first, _) = running_job(acme_llm, checkpoint_policy="none")
    node = Node.objects.get(pk=first)
    client.force_login(operator)
    assert _moves(client, node) == ["cordon", "drain", "down"]
    page = client.get(f"/ops/nodes/{node.pk}/").content.decode()
    assert f'href="/ops/workloads/{workload.pk}/"' in page  # the operator's page of the job

    confirm = client.get(f"/ops/nodes/{node.pk}/down/").content.decode()
    assert "1 job of 1 tenant(s) holds GPUs here." in confirm
    assert "train of Acme, 8 GPU(s) here: loses about 0 min of work" in confirm

    blank = client.post(f"/ops/nodes/{node.pk}/down/", {"reason": " "})
    assert "Say why" in blank.content.decode()
    node.refresh_from_db()
    assert node.health == Health.READY

    done = client.post(f"/ops/nodes/{node.pk}/down/", {"reason": "PSU smells of smoke"})
    assert done.status_code == 302 and done.url == f"/ops/nodes/{node.pk}/"
    node.refresh_from_db()
    assert node.health == Health.DOWN and node.health_reason == "PSU smells of smoke"
    assert AuditEvent.objects.get(action="node.down").actor == operator
    assert carry_out_node_moves() == [workload.pk]
    workload.refresh_from_db()
    assert workload.state == State.RECOVERING
    assert _moves(client, node) == ["repair"]


def test_a_drain_says_who_saves_first_and_a_cordon_leaves_jobs_running(
    acme, cluster, operator, client
):
    saving, (node_id, _) = running_job(make_queue(acme, "llm", h800=64), gpus=16)
    node = Node.objects.get(pk=node_id)
    client.force_login(operator)
    drain = client.get(f"/ops/nodes/{node.pk}/drain/").content.decode()
    assert "train of Acme, 8 GPU(s) here: saves before it moves" in drain
    cordon = client.get(f"/ops/nodes/{node.pk}/cordon/").content.decode()
    assert "the jobs here run on" in cordon and "impact-jobs" not in cordon
    client.post(f"/ops/nodes/{node.pk}/cordon/", {"reason": "flaky fan"})
    node.refresh_from_db()
    saving.refresh_from_db()
    assert node.health == Health.CORDONED and saving.state == State.RUNNING
    assert _moves(client, node) == ["drain", "down", "ready"]


def test_a_repaired_node_returns_through_a_health_check_or_says_why_not(cluster, operator, client):
    node = cluster[0]
    node.set_health(Health.DOWN, "broken")
    node.set_health(Health.REPAIRING, "fixed")
    client.force_login(operator)
    assert _moves(client, node) == ["down", "ready"]
    Node.objects.filter(pk=node.pk).update(connected=False)
    refused = client.post(f"/ops/nodes/{node.pk}/ready/", {"reason": "new PSU"}, follow=True)
    assert "agent is not connected" in refused.content.decode()
    Node.objects.filter(pk=node.pk).update(connected=True)
    client.post(f"/ops/nodes/{node.pk}/ready/", {"reason": "new PSU"})
    node.refresh_from_db()
    assert node.health == Health.REPAIRING  # until its agent passes the check
    assert NodeCommand.objects.get(node=node).action == "health_check"


def test_a_move_the_lifecycle_forbids_changes_nothing_and_tenants_are_sent_away(
    cluster, operator, alice, client
):
    node = cluster[0]
    client.force_login(operator)
    page = client.get(f"/ops/nodes/{node.pk}/repair/").content.decode()
    assert "Not now: the node is Ready." in page and "<textarea" not in page
    client.post(f"/ops/nodes/{node.pk}/repair/", {"reason": "x"}, follow=True)
    node.refresh_from_db()
    assert node.health == Health.READY
    client.force_login(alice)
    assert client.post(f"/ops/nodes/{node.pk}/down/", {"reason": "x"}).status_code == 403
    node.refresh_from_db()
    assert node.health == Health.READY
