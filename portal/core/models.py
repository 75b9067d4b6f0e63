from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models.functions import Coalesce


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
        ordering = ["-at", "-id"]

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


class IdempotencyKey(models.Model):
    """A creating request a user sent with an `Idempotency-Key`, and the answer it got: a
    retry with the same key gets the same answer instead of creating again."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of method, path and body")
    # Empty only inside the transaction of the first request, which fills them before it commits.
    status = models.PositiveSmallIntegerField(null=True)
    body = models.JSONField(default=dict, encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "key"], name="%(app_label)s_%(class)s_unique_user_key"
            )
        ]

    def __str__(self):
        return f"{self.key} of {self.user_id}"


def counted(children: models.QuerySet, parent: str, value=None) -> Coalesce:
    """How many of `children` point at each row through their field `parent` (or the sum of
    their `value`), as a column of the row. A subquery, not a join and a grouping: a page's
    count leaves it out, where a grouping is counted through every child (at 12,500 nodes,
    every allocation of the fleet: 16 ms of a list's 25)."""
    per_row = children.filter(**{parent: models.OuterRef("pk")}).order_by().values(parent)
    total = models.Count("pk") if value is None else models.Sum(value)
    return Coalesce(models.Subquery(per_row.annotate(n=total).values("n")), 0)
