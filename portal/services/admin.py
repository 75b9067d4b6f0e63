from django.contrib import admin

from portal.services.models import Service


@admin.register(Service)
class ServiceAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "queue", "gpu_model", "desired_replicas", "panic", "active"]
    list_filter = ["active", "tenant"]
    search_fields = ["name"]
    readonly_fields = ["desired_replicas", "panic", "scale_reason"]
    exclude = ["autoscaler_state"]
