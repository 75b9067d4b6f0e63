from django.contrib import admin

from portal.core.models import AuditEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the control plane writes, and records of what happened: the console shows
    them and changes nothing, not even for a superuser."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor", "tenant", "action", "object_type", "object_id"]
    list_filter = ["action", "tenant"]
