from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """Who did what to which object, and when: the trail operators and tenants read."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self):
        return f"{self.action} {self.object_type}#{self.object_id}"


def audit(action: str, obj: models.Model, actor=None, tenant=None, **data) -> AuditEvent:
    """Record `action` on `obj`; call inside the transaction that made the change."""
    return AuditEvent.objects.create(
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        actor=actor if actor and actor.is_authenticated else None,
        tenant=tenant,
        data=data,
    )
