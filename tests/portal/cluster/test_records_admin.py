"""Records of what happened (audit events, faults, commands to agents) can be read in the
console, never added, edited or deleted by hand, not even by a superuser."""

import pytest
from django.urls import reverse

from portal.cluster.models import FaultEvent, Node, NodeCommand
from portal.core.models import AuditEvent, audit
from tests.builders import make_cluster


@pytest.mark.parametrize("model", [AuditEvent, FaultEvent, NodeCommand])
def test_a_record_is_read_only_in_the_console(client, operator, model):
    node = make_cluster({"dc1": {"p1": ("H800", 1)}})[0]
    audit("node.cordoned", node, actor=operator)
    FaultEvent.objects.create(node=node, kind="xid-79", message="GPU fell off the bus")
    NodeCommand.objects.create(node=node, action="inject_fault")
    record = model.objects.first()
    opts = model._meta
    client.force_login(operator)
    page = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[record.pk]))
    assert page.status_code == 200 and b'name="_save"' not in page.content  # shown, no Save
    assert client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403
    delete = reverse(f"admin:{opts.app_label}_{opts.model_name}_delete", args=[record.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=record.pk).exists()
    assert Node.objects.filter(pk=node.pk).exists()
