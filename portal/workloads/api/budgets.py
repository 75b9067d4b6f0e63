"""`/api/v1/budgets/`: operators write budgets, each change audited with what it was before;
tenants read their own, with where each stands: used, left, burn and when it runs out."""

from django.db import transaction
from django.utils.translation import gettext as _
from rest_framework import permissions, serializers, viewsets

from portal.core.api import KnownFields, NameField, TenantPermission, TenantViewSet, is_operator
from portal.core.idempotency import IdempotentCreateModelMixin
from portal.core.models import audit
from portal.quotas.models import Budget, Queue
from portal.tenancy.models import Tenant
from portal.workloads.budgets import standings


class OperatorsWrite(TenantPermission):
    """Tenants' members read (their own); only operators write."""

    message = "Only operators can change budgets."

    def has_permission(self, request, view):
        if request.method in permissions.SAFE_METHODS:
            return super().has_permission(request, view)
        return is_operator(request.user)


class BudgetSerializer(KnownFields, serializers.ModelSerializer):
    tenant = NameField(
        slug_field="slug",
        queryset=Tenant.objects.all(),
        error_messages={"does_not_exist": "Unknown tenant {value}."},
    )
    queue = serializers.CharField(
        source="queue.name",
        required=False,
        allow_null=True,
        help_text="A queue of the tenant; empty: the whole tenant",
    )
    thresholds = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=1000),
        max_length=10,
        required=False,
        help_text="Percentages at which members are warned",
    )
    window_start = serializers.SerializerMethodField()
    window_end = serializers.SerializerMethodField()
    used = serializers.SerializerMethodField(help_text="Weighted GPU-hours used in the window")
    left = serializers.SerializerMethodField()
    percent = serializers.SerializerMethodField()
    burn_per_hour = serializers.SerializerMethodField(help_text="Over the last 24 hours")
    runs_out_at = serializers.SerializerMethodField(
        help_text="At the current burn; null when nothing burns"
    )

    class Meta:
        model = Budget
        fields = [
            "id",
            "tenant",
            "queue",
            "gpu_hours",
            "window",
            "window_days",
            "hard",
            "thresholds",
            "window_start",
            "window_end",
            "used",
            "left",
            "percent",
            "burn_per_hour",
            "runs_out_at",
            "updated_at",
        ]
        read_only_fields = ["updated_at"]

    def validate(self, attrs):
        name = attrs.pop("queue", {}).get("name") or None
        if self.instance is None:
            attrs["queue"] = self._queue(attrs["tenant"], name)
        elif attrs.pop("tenant", self.instance.tenant) != self.instance.tenant or (
            "queue" in self.initial_data and name != getattr(self.instance.queue, "name", None)
        ):
            raise serializers.ValidationError(
                {"queue": _("A budget keeps its tenant and queue; delete it and create another.")}
            )
        if "thresholds" in attrs:
            attrs["thresholds"] = sorted(set(attrs["thresholds"]))
        return attrs

    def _queue(self, tenant: Tenant, name: str | None) -> Queue | None:
        """The tenant's queue of that name (None: the whole tenant), which has no budget yet."""
        queue = None
        if name is not None:
            queue = Queue.objects.filter(tenant=tenant, name=name).first()
            if queue is None:
                why = _("Tenant %(tenant)s has no queue %(queue)s.") % {
                    "tenant": tenant.slug,
                    "queue": name,
                }
                raise serializers.ValidationError({"queue": why})
        if Budget.objects.filter(tenant=tenant, queue=queue).exists():
            why = (
                _("Queue %(queue)s has a budget already.") % {"queue": name}
                if queue
                else _("Tenant %(tenant)s has a budget already.") % {"tenant": tenant.slug}
            )
            raise serializers.ValidationError({"queue": why})
        return queue

    def _standing(self, budget):
        """Where the budget stands: from the list's one pass, else on its own."""
        found = self.context.setdefault("standings", {})
        if budget.pk not in found:
            found.update(_standings([budget]))
        return found[budget.pk]

    def get_window_start(self, budget) -> str:
        return self._standing(budget).since.isoformat()

    def get_window_end(self, budget) -> str:
        return self._standing(budget).until.isoformat()

    def get_used(self, budget) -> float:
        return round(self._standing(budget).used, 3)

    def get_left(self, budget) -> float:
        return round(self._standing(budget).left, 3)

    def get_percent(self, budget) -> float:
        return round(self._standing(budget).percent, 2)

    def get_burn_per_hour(self, budget) -> float:
        return round(self._standing(budget).burn or 0.0, 3)

    def get_runs_out_at(self, budget) -> str | None:
        out = self._standing(budget).runs_out_at
        return out.isoformat() if out else None


class BudgetViewSet(IdempotentCreateModelMixin, viewsets.ModelViewSet, TenantViewSet):
    queryset = Budget.objects.select_related("tenant", "queue")
    serializer_class = BudgetSerializer
    permission_classes = [permissions.IsAuthenticated, OperatorsWrite]
    filterset_fields = ["queue__name", "hard", "window"]

    def list(self, request):
        """Budgets with where each stands, the page's budgets in one usage pass."""
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        context = {**self.get_serializer_context(), "standings": _standings(page)}
        return self.get_paginated_response(BudgetSerializer(page, many=True, context=context).data)

    @transaction.atomic
    def perform_create(self, serializer):
        serializer.save().record(self.request.user)

    @transaction.atomic
    def perform_update(self, serializer):
        before = serializer.instance.facts()
        serializer.save().record(self.request.user, before)

    @transaction.atomic
    def perform_destroy(self, instance):
        facts = instance.facts()
        audit("budget.deleted", instance, actor=self.request.user, tenant=instance.tenant, **facts)
        instance.delete()


def _standings(budgets) -> dict:
    return {standing.budget.pk: standing for standing in standings(budgets)}
