"""The audit trail in the operator console: readable, and not to be added to, edited or
deleted by anyone, a superuser included."""

from portal.core.models import AuditEvent, audit


def test_nobody_changes_the_audit_trail_from_the_console(operator, acme, client):
    entry = audit("member.removed", acme, actor=operator, tenant=acme, username="bob")
    client.force_login(operator)
    assert client.get("/admin/core/auditevent/").status_code == 200
    assert client.get("/admin/core/auditevent/add/").status_code == 403
    change = f"/admin/core/auditevent/{entry.pk}/change/"
    assert client.post(change, {"action": "nothing.happened"}).status_code == 403
    assert (
        client.post(f"/admin/core/auditevent/{entry.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    bulk = {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"}
    client.post("/admin/core/auditevent/", bulk)
    entry.refresh_from_db()
    assert (entry.action, AuditEvent.objects.count()) == ("member.removed", 1)
