from django.contrib import admin

from portal.tenancy.models import ApiToken, Membership, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "user",
        "scope",
        "hint",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked",
    ]
    fields = list_display
    readonly_fields = [name for name in fields if name != "revoked"]
    list_filter = ["revoked", "scope"]

    def has_add_permission(self, request):
        return False  # members issue their own on the API tokens page; the key is shown once
