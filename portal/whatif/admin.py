from django.contrib import admin

from portal.whatif.models import WhatIfRun


@admin.register(WhatIfRun)
class WhatIfRunAdmin(admin.ModelAdmin):
    list_display = ["created_at", "trace", "cluster", "policies", "state", "progress", "message"]
    list_filter = ["state", "trace"]
    exclude = ["results", "trace_csv", "cluster_json"]
    readonly_fields = ["state", "progress", "message", "started_at", "finished_at"]
