from django.contrib import admin
from django.db.models import Count

from portal.cluster.choices import Health
from portal.cluster.models import DataCenter, FaultEvent, Gpu, GpuModel, Leaf, Node, Pod, Region
from portal.core.models import audit

for model in (GpuModel, Region, DataCenter, Pod, Leaf):
    admin.site.register(model)


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    readonly_fields = ["index", "uuid", "memory_mb"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "leaf", "gpu_model", "gpu_count", "allocated", "health",
                    "connected", "last_seen_at"]
    list_filter = ["health", "connected", "gpu_model", "leaf__pod__datacenter"]
    search_fields = ["name"]
    readonly_fields = ["token_hash", "agent_version", "connected", "last_seen_at",
                       "generation", "reported_generation"]
    inlines = [GpuInline]
    actions = ["cordon", "drain", "make_ready", "issue_token"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related(
            "gpu_model", "leaf__pod__datacenter").annotate(allocated=Count("allocations"))

    @admin.display(ordering="allocated")
    def allocated(self, obj):
        return obj.allocated

    def _set_health(self, request, queryset, health):
        for node in queryset:
            audit(f"node.{health}", node, actor=request.user, previous=node.health)
        queryset.update(health=health)

    @admin.action(description="Cordon (no new work)")
    def cordon(self, request, queryset):
        self._set_health(request, queryset, Health.CORDONED)

    @admin.action(description="Drain")
    def drain(self, request, queryset):
        self._set_health(request, queryset, Health.DRAINING)

    @admin.action(description="Return to ready")
    def make_ready(self, request, queryset):
        self._set_health(request, queryset, Health.READY)

    @admin.action(description="Issue a new agent token (the old one stops working)")
    def issue_token(self, request, queryset):
        for node in queryset:
            token = node.issue_token()
            audit("node.token_issued", node, actor=request.user)
            self.message_user(request, f"Agent token for {node}: {token} (shown this once)")


@admin.register(FaultEvent)
class FaultEventAdmin(admin.ModelAdmin):
    list_display = ["occurred_at", "node", "gpu_index", "kind", "code", "severity"]
    list_filter = ["severity", "kind"]
    list_select_related = ["node"]
