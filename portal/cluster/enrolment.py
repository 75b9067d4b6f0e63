"""Enrolment: a new node's agent trades a one-time bootstrap token for a node token of its own."""

from django.db import transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from portal.cluster.models import BootstrapToken, DataCenter, GpuModel, Leaf, Node, Pod
from portal.core.models import audit
from portal.tenancy.models import hash_token


def _refuse(field: str, reason: str):
    raise ValidationError({field: [reason]})


@transaction.atomic
def enrol(raw_token: str, hostname: str, facts: dict) -> tuple[Node, str]:
    """Use the bootstrap token once: create the node (or take over the one an operator
    registered under that name) where its facts place it, and return it with its new token."""
    token = (
        BootstrapToken.objects.select_for_update().filter(token_hash=hash_token(raw_token)).first()
    )
    if token is None or token.revoked:
        _refuse("bootstrap_token", "Unknown or revoked bootstrap token.")
    if token.used_at is not None:
        _refuse("bootstrap_token", "This bootstrap token has already been used.")
    if token.expires_at <= timezone.now():
        _refuse("bootstrap_token", "This bootstrap token has expired; ask for a new one.")
    datacenter = DataCenter.objects.filter(name=facts["datacenter"]).first()
    if datacenter is None:
        _refuse("facts.datacenter", f"Unknown data center {facts['datacenter']!r}.")
    model = GpuModel.objects.filter(name=facts["gpu_model"]).first()
    if model is None:
        _refuse("facts.gpu_model", f"Unknown GPU model {facts['gpu_model']!r}.")
    pod, _ = Pod.objects.get_or_create(datacenter=datacenter, name=str(facts["pod"])[:64])
    leaf, _ = Leaf.objects.get_or_create(pod=pod, name=str(facts["leaf"])[:64])
    node, created = Node.objects.get_or_create(
        name=hostname, defaults={"leaf": leaf, "gpu_model": model, "gpu_count": facts["gpu_count"]}
    )
    if not created and node.token_hash:
        _refuse(
            "hostname",
            f"Node {hostname} is already enrolled; an operator can issue "
            "it a new token or remove it first.",
        )
    node.leaf, node.gpu_model, node.gpu_count, node.facts = (leaf, model, facts["gpu_count"], facts)
    node.single_tenant = facts.get("isolates_tenants") is False
    node.save(update_fields=["leaf", "gpu_model", "gpu_count", "facts", "single_tenant"])
    raw = node.issue_token()
    token.used_at, token.node = timezone.now(), node
    token.save(update_fields=["used_at", "node"])
    audit("node.enrolled", node, actor=token.created_by, bootstrap_token=token.pk)
    return node, raw
