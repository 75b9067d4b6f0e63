from django.contrib import admin

from portal.workloads.models import Allocation, Checkpoint, UsageRecord, Workload, WorkloadEvent


class WorkloadEventInline(admin.TabularInline):
    model = WorkloadEvent
    extra = 0
    readonly_fields = ["at", "from_state", "to_state", "reason", "actor"]
    can_delete = False


@admin.register(Workload)
class WorkloadAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "queue", "gpus", "gpu_model", "priority", "state",
                    "submitted_at"]
    list_filter = ["state", "kind", "gpu_model", "tenant"]
    list_select_related = ["tenant", "queue", "gpu_model"]
    search_fields = ["name"]
    readonly_fields = ["state", "pending_reason", "queue_position", "admitted_at",
                       "started_at", "finished_at", "exit_code"]
    inlines = [WorkloadEventInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["workload", "node", "gpu_index", "started", "created_at"]
    list_select_related = ["workload", "node"]


admin.site.register(Checkpoint)


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin):
    list_display = ["tenant", "workload", "gpu_model", "gpus", "gpu_hours", "ended_at"]
    list_filter = ["tenant", "gpu_model"]
    list_select_related = ["tenant", "workload", "gpu_model"]
