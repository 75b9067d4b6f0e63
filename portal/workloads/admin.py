from django.contrib import admin, messages

from portal.core.admin import ReadOnlyAdmin
from portal.workloads import lifecycle
from portal.workloads.models import (
    Allocation,
    Checkpoint,
    IllegalTransition,
    Recovery,
    UsageRecord,
    Workload,
    WorkloadEvent,
)


class WorkloadEventInline(admin.TabularInline):
    model = WorkloadEvent
    extra = 0
    readonly_fields = ["at", "from_state", "to_state", "reason", "actor"]
    can_delete = False


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyAdmin):
    """Tenants submit workloads; operators read them and may cancel them, through the same
    lifecycle as a tenant (so GPUs are released, booked and the agents told)."""

    list_display = [
        "name",
        "tenant",
        "queue",
        "gpus",
        "gpu_model",
        "priority",
        "state",
        "submitted_at",
    ]
    list_filter = ["state", "kind", "gpu_model", "tenant"]
    list_select_related = ["tenant", "queue", "gpu_model"]
    search_fields = ["name"]
    inlines = [WorkloadEventInline]
    actions = ["cancel"]

    def has_change_permission(self, request, obj=None):
        return obj is None and request.user.is_staff  # the list and its actions only

    @admin.action(description="Cancel (releases the GPUs)")
    def cancel(self, request, queryset):
        cancelled = 0
        for workload in queryset:
            try:
                lifecycle.cancel(workload, actor=request.user)
                cancelled += 1
            except IllegalTransition as error:
                self.message_user(request, str(error), messages.WARNING)
        if cancelled:
            self.message_user(request, f"{cancelled} workload(s) cancelled.", messages.SUCCESS)


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = [
        "workload",
        "node",
        "node_rank",
        "gpu_index",
        "started",
        "exit_code",
        "created_at",
    ]
    list_select_related = ["workload", "node"]


admin.site.register(Checkpoint, ReadOnlyAdmin)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ["tenant", "workload", "gpu_model", "gpus", "gpu_hours", "ended_at"]
    list_filter = ["tenant", "gpu_model"]
    list_select_related = ["tenant", "workload", "gpu_model"]


@admin.register(Recovery)
class RecoveryAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "workload",
        "fault",
        "step",
        "outcome",
        "resume_step",
        "lost_s",
        "finished_at",
    ]
    list_filter = ["step", "outcome"]
    list_select_related = ["workload", "fault__node"]
