from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Sum
from django.db.models.functions import Coalesce

from portal.cluster import checks
from portal.cluster.choices import Health
from portal.cluster.models import (
    BootstrapToken,
    DataCenter,
    FaultEvent,
    Gpu,
    GpuModel,
    Leaf,
    Node,
    NodeCommand,
    Pod,
    Region,
)
from portal.cluster.summary import from_eighths, held_eighths
from portal.core.admin import ReadOnlyAdmin
from portal.core.errors import Conflict
from portal.core.models import audit

for model in (GpuModel, Region, DataCenter, Leaf):
    admin.site.register(model)


@admin.register(Pod)
class PodAdmin(admin.ModelAdmin):
    """Each pod's pool of hot spares (its target, the ready spares it has, what is missing) and
    its defragmentation."""

    list_display = ["__str__", "hot_spares", "ready_spares", "missing", "defrag", "defrag_at"]
    list_editable = ["hot_spares"]
    list_select_related = ["datacenter"]

    def get_queryset(self, request):
        ready = Coalesce(Node.objects.ready_spares_per_pod(), 0)
        return super().get_queryset(request).annotate(ready=ready)

    @admin.display(description="ready spares", ordering="ready")
    def ready_spares(self, pod):
        return pod.ready

    @admin.display(description="missing")
    def missing(self, pod):
        return max(0, pod.hot_spares - pod.ready)


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    readonly_fields = ["index", "uuid", "memory_mb"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "leaf",
        "gpu_model",
        "gpu_count",
        "allocated",
        "health",
        "health_reason",
        "spare",
        "connected",
        "last_seen_at",
    ]
    list_filter = ["health", "spare", "connected", "gpu_model", "leaf__pod__datacenter"]
    search_fields = ["name"]
    readonly_fields = [
        "health",
        "health_reason",
        "health_changed_at",
        "facts",
        "token_hash",
        "agent_version",
        "connected",
        "last_seen_at",
        "generation",
        "reported_generation",
    ]
    inlines = [GpuInline]
    actions = ["cordon", "drain", "make_ready", "mark_down", "repair", "make_spare", "issue_token"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("gpu_model", "leaf__pod__datacenter")
            .annotate(allocated_eighths=Sum(held_eighths("allocations__")))
        )

    @admin.display(ordering="allocated_eighths")
    def allocated(self, obj):
        return from_eighths(obj.allocated_eighths or 0)

    def _set_health(self, request, queryset, health):
        moved, checking, refused = 0, 0, 0
        for node in queryset:
            try:
                with transaction.atomic():
                    checks.move(node, health, f"by {request.user}", actor=request.user)
                if node.health == health:
                    moved += 1
                else:
                    checking += 1  # a repaired node: ready once its agent passes the check
            except Conflict as refusal:
                refused += 1
                self.message_user(request, str(refusal), messages.WARNING)
        now = Health(health).label.lower()
        said = f"{moved} node(s) now {now}"
        if checking:
            said += f", {checking} ready once their agent passes a health check"
        if refused:  # a partly failed action says so, never plain success
            self.message_user(request, f"{said}, {refused} refused.", messages.WARNING)
        else:
            self.message_user(request, f"{said}.", messages.SUCCESS)

    @admin.action(description="Cordon (no new work)")
    def cordon(self, request, queryset):
        self._set_health(request, queryset, Health.CORDONED)

    @admin.action(description="Drain")
    def drain(self, request, queryset):
        self._set_health(request, queryset, Health.DRAINING)

    @admin.action(description="Mark down")
    def mark_down(self, request, queryset):
        self._set_health(request, queryset, Health.DOWN)

    @admin.action(description="Send for repair")
    def repair(self, request, queryset):
        self._set_health(request, queryset, Health.REPAIRING)

    @admin.action(description="Return to ready")
    def make_ready(self, request, queryset):
        self._set_health(request, queryset, Health.READY)

    @admin.action(description="Keep as hot spare (for fault recovery only)")
    def make_spare(self, request, queryset):
        kept, refused = 0, 0
        for node in queryset:
            try:
                with transaction.atomic():
                    kept += node.set_spare(True, request.user)
            except Conflict as refusal:
                refused += 1
                self.message_user(request, str(refusal), messages.WARNING)
        level = messages.WARNING if refused else messages.SUCCESS
        self.message_user(request, f"{kept} node(s) kept as spares, {refused} refused.", level)

    @admin.action(description="Issue a new agent token (the old one stops working)")
    def issue_token(self, request, queryset):
        for node in queryset:
            token = node.issue_token()
            audit("node.token_issued", node, actor=request.user)
            self.message_user(request, f"Agent token for {node}: {token} (shown this once)")


@admin.register(FaultEvent)
class FaultEventAdmin(ReadOnlyAdmin):
    list_display = ["occurred_at", "node", "gpu_index", "kind", "code", "severity"]
    list_filter = ["severity", "kind"]
    list_select_related = ["node"]


@admin.register(BootstrapToken)
class BootstrapTokenAdmin(admin.ModelAdmin):
    """One-time tokens for enrolling new nodes; the raw token is shown once, on creation."""

    list_display = [
        "__str__",
        "created_by",
        "created_at",
        "expires_at",
        "used_at",
        "node",
        "revoked",
    ]
    fields = ["note", "revoked"]

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        obj.created_by = request.user
        raw = obj.new_secret()
        super().save_model(request, obj, form, change)
        audit("bootstrap_token.issued", obj, actor=request.user)
        self.message_user(
            request,
            f"Bootstrap token (shown this once, valid 24 h): {raw}  "
            f"Start the agent with: wanka-agent --url <portal ws url> "
            f"--bootstrap-token {raw}",
        )


@admin.register(NodeCommand)
class NodeCommandAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "node", "action", "workload", "state", "detail"]
    list_filter = ["state", "action"]
    list_select_related = ["node", "workload"]
