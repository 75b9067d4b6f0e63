from django.contrib import admin, messages

from portal.core.models import audit
from portal.quotas.choices import RequestStatus
from portal.quotas.models import (
    Budget,
    BudgetAlert,
    CapacityCheck,
    Cohort,
    CohortQuota,
    FamilyQuota,
    GpuRate,
    PriorityFactor,
    Queue,
    QueueQuota,
    QuotaRequest,
)


class QueueQuotaInline(admin.TabularInline):
    model = QueueQuota
    extra = 0


class FamilyQuotaInline(admin.TabularInline):
    model = FamilyQuota
    extra = 0


# The preemption settings that take a few values: columns and filters of the queue list.
PREEMPTION_CHOICES = [f for f in Queue.PREEMPTION_FIELDS if f != "max_priority_threshold"]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "tenant",
        "region",
        "cohort",
        "priority",
        "weight",
        "strategy",
        *PREEMPTION_CHOICES,
    ]
    list_filter = ["tenant", "region", "cohort", *PREEMPTION_CHOICES]
    list_select_related = ["tenant", "region", "cohort"]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "region", "cohort", "priority", "weight"]}),
        (
            "Scheduling",
            {
                "fields": [
                    "strategy",
                    "preemption_grace_s",
                    "straggler_policy",
                    "spans_datacenters",
                ]
            },
        ),
        (
            "Preemption (Kueue's names)",
            {
                "fields": Queue.PREEMPTION_FIELDS,
                "description": "What this queue's waiting work may evict to start, as Kueue's "
                "ClusterQueue preemption policy says it.",
            },
        ),
    ]
    inlines = [QueueQuotaInline, FamilyQuotaInline]


class CohortQuotaInline(admin.TabularInline):
    model = CohortQuota
    extra = 0


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    """Cohorts nest; each may hold quota of its own, lent to the queues below it."""

    list_display = ["name", "parent"]
    inlines = [CohortQuotaInline]


@admin.register(QuotaRequest)
class QuotaRequestAdmin(admin.ModelAdmin):
    list_display = [
        "requested_at",
        "tenant",
        "queue",
        "asked",
        "region",
        "count",
        "status",
        "capacity",
    ]
    list_filter = ["status", "gpu_model", "region", "tenant"]
    readonly_fields = [
        "tenant",
        "queue",
        "gpu_model",
        "family",
        "region",
        "count",
        "reason",
        "requested_by",
        "requested_at",
        "status",
        "decided_by",
        "decided_at",
        "capacity",
    ]
    fields = [*readonly_fields, "decision_note"]
    actions = ["approve", "reject"]
    list_select_related = ["tenant", "queue__tenant", "gpu_model", "region"]

    def get_queryset(self, request):
        return QuotaRequest.with_capacity(super().get_queryset(request))

    @admin.display(description="GPU model or family")
    def asked(self, obj):
        return obj.asked

    @admin.display(description="Capacity check")
    def capacity(self, obj):
        if obj.status != RequestStatus.PENDING:
            return "—"
        return str(CapacityCheck(obj.capacity_gpus, obj.committed_gpus, obj.count))

    def has_add_permission(self, request):
        return False  # tenants file requests; operators decide them

    def _decide(self, request, queryset, approve):
        for quota_request in queryset.select_related("queue", "gpu_model", "tenant"):
            if quota_request.decide(request.user, approve, quota_request.decision_note):
                self.message_user(request, f"{quota_request}: {quota_request.status}.")
            else:
                verb = "approved" if approve else "rejected"
                self.message_user(
                    request,
                    f"{quota_request} not {verb}: it is "
                    f"{quota_request.status}; {quota_request.capacity_check()}.",
                    messages.ERROR,
                )

    @admin.action(description="Approve (checks the region's capacity)")
    def approve(self, request, queryset):
        self._decide(request, queryset, approve=True)

    @admin.action(description="Reject")
    def reject(self, request, queryset):
        self._decide(request, queryset, approve=False)


class BudgetAlertInline(admin.TabularInline):
    model = BudgetAlert
    extra = 0
    can_delete = False
    readonly_fields = ["at", "threshold", "used", "window_start"]
    fields = readonly_fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    """Budgets of tenants and queues; each change is audited with what it was before."""

    list_display = ["tenant", "queue", "gpu_hours", "window", "window_days", "hard", "thresholds"]
    list_filter = ["hard", "window", "tenant"]
    list_select_related = ["tenant", "queue"]
    fields = ["tenant", "queue", "gpu_hours", "window", "window_days", "hard", "thresholds"]
    inlines = [BudgetAlertInline]

    def save_model(self, request, obj, form, change):
        before = Budget.objects.get(pk=obj.pk).facts() if change else None
        super().save_model(request, obj, form, change)
        obj.record(request.user, before)

    def delete_model(self, request, obj):
        audit("budget.deleted", obj, actor=request.user, tenant=obj.tenant, **obj.facts())
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for budget in queryset:
            self.delete_model(request, budget)


@admin.register(GpuRate)
class GpuRateAdmin(admin.ModelAdmin):
    """What a GPU-hour of each model counts against budgets, and its price."""

    list_display = ["gpu_model", "weight", "price"]
    list_editable = ["weight", "price"]


@admin.register(PriorityFactor)
class PriorityFactorAdmin(admin.ModelAdmin):
    """What each priority class multiplies the price by."""

    list_display = ["priority", "factor"]
    list_editable = ["factor"]
