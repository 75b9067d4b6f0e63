from django.contrib import admin

from portal.core.models import AuditEvent


class RecordAdmin(admin.ModelAdmin):
    """A record of what happened: it can be read, never added, edited or deleted by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(RecordAdmin):
    list_display = ["at", "actor", "tenant", "action", "object_type", "object_id"]
    list_filter = ["action", "tenant"]
