"""A new node trades a one-time bootstrap token for a node token of its own."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.cluster.choices import Health
from portal.cluster.models import BootstrapToken, Node
from portal.core.errors import Conflict
from portal.core.models import AuditEvent
from portal.tenancy.models import hash_token

FACTS = {
    "datacenter": "dc1",
    "pod": "p9",
    "leaf": "l1",
    "gpu_model": "H800",
    "gpu_count": 8,
    "driver_version": "570.86.15",
    "cuda_version": "12.8",
}


def enrol(raw, hostname="gpu-new-001", **facts):
    return APIClient().post(
        "/api/v1/enrol/",
        {"bootstrap_token": raw, "hostname": hostname, "facts": {**FACTS, **facts}},
        format="json",
    )


@pytest.fixture
def token(cluster, operator):
    return BootstrapToken.issue(note="rack 9", actor=operator)


def test_a_bootstrap_token_enrols_one_node_once(token):
    bootstrap, raw = token
    response = enrol(raw)
    assert response.status_code == 201, response.json()
    body = response.json()
    node = Node.objects.get(name="gpu-new-001")
    assert body["node"] == node.name and node.token_hash == hash_token(body["token"])
    assert (node.leaf.pod.name, node.leaf.pod.datacenter.name, node.gpu_count) == ("p9", "dc1", 8)
    assert node.facts["driver_version"] == "570.86.15"
    bootstrap.refresh_from_db()
    assert bootstrap.node == node and bootstrap.used_at is not None
    assert AuditEvent.objects.filter(action="node.enrolled", object_id=str(node.pk)).exists()
    again = enrol(raw, hostname="gpu-new-002")
    assert again.status_code == 400
    assert again.json() == {
        "errors": [
            {"field": "bootstrap_token", "reason": "This bootstrap token has already been used."}
        ]
    }
    assert not Node.objects.filter(name="gpu-new-002").exists()


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        pytest.param(
            {"raw": "wb_nonsense"},
            "bootstrap_token",
            "Unknown or revoked",
            id="an unknown token is refused",
        ),
        pytest.param(
            {"revoked": True},
            "bootstrap_token",
            "Unknown or revoked",
            id="a revoked token is refused",
        ),
        pytest.param(
            {"expired": True}, "bootstrap_token", "expired", id="an expired token is refused"
        ),
        pytest.param(
            {"facts": {"datacenter": "dc9"}},
            "facts.datacenter",
            "Unknown data center",
            id="a node in an unknown data center is refused",
        ),
        pytest.param(
            {"facts": {"gpu_model": "B300"}},
            "facts.gpu_model",
            "Unknown GPU model",
            id="an unknown GPU model is refused",
        ),
        pytest.param(
            {"facts": {"gpu_count": "eight"}},
            "facts",
            "gpu_count must be",
            id="a GPU count that is not a number is refused",
        ),
        pytest.param(
            {"hostname": "../etc"}, "hostname", "", id="a hostname that is not one is refused"
        ),
    ],
)
def test_bad_enrolments_say_which_field_and_why_and_change_nothing(token, change, field, reason):
    bootstrap, raw = token
    if change.get("revoked"):
        BootstrapToken.objects.filter(pk=bootstrap.pk).update(revoked=True)
    if change.get("expired"):
        BootstrapToken.objects.filter(pk=bootstrap.pk).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    nodes = Node.objects.count()
    response = enrol(
        change.get("raw", raw), change.get("hostname", "gpu-new-001"), **change.get("facts", {})
    )
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == field and reason in error["reason"]
    assert Node.objects.count() == nodes
    assert BootstrapToken.objects.get(pk=bootstrap.pk).used_at is None


def test_a_node_already_enrolled_cannot_be_taken_over(token, cluster):
    _, raw = token
    taken = cluster[0]
    taken.issue_token()
    response = enrol(raw, hostname=taken.name)
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "hostname"


def test_an_operator_registered_node_without_a_token_is_taken_over(token, cluster):
    _, raw = token
    node = cluster[0]
    assert enrol(raw, hostname=node.name).status_code == 201
    node.refresh_from_db()
    assert node.token_hash and node.leaf.pod.name == "p9"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ([Health.CORDONED, Health.DRAINING, Health.DOWN, Health.REPAIRING, Health.READY], True),
        ([Health.REPAIRING], False),
        ([Health.DOWN, Health.DRAINING], False),
        ([Health.DOWN, Health.READY], False),
        ([Health.DOWN, Health.REPAIRING, Health.READY], False),
    ],
    ids=[
        "the full lifecycle",
        "a ready node is not repaired",
        "a down node is not drained",
        "a down node is repaired before it is ready",
        "a repaired node is ready only once it passed a health check",
    ],
)
def test_node_lifecycle_moves(cluster, operator, path, allowed):
    node = cluster[0]
    if allowed:
        for health in path:
            node.set_health(health, "test", actor=operator, checked=True)
        assert node.health == path[-1]
        assert AuditEvent.objects.filter(object_id=str(node.pk)).count() == len(path)
    else:
        with pytest.raises(Conflict):
            for health in path:
                node.set_health(health, "test", actor=operator)


def test_the_enrol_throttle_counts_the_client_not_the_forwarded_for_header(db, settings):
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    limit = int(rates["enrol"].split("/")[0])
    client = APIClient()
    answers = [
        client.post(
            "/api/v1/enrol/",
            {"bootstrap_token": "nope", "hostname": "h", "facts": FACTS},
            format="json",
            HTTP_X_FORWARDED_FOR=f"10.0.0.{i % 250}",
        ).status_code
        for i in range(limit + 1)
    ]
    assert 429 not in answers[:limit]
    assert answers[-1] == 429  # a new X-Forwarded-For each time did not make a new client
