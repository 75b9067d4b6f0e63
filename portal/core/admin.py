from django.contrib import admin

from portal.core.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["at", "actor", "tenant", "action", "object_type", "object_id"]
    list_filter = ["action", "tenant"]
    readonly_fields = [f.name for f in AuditEvent._meta.fields]
