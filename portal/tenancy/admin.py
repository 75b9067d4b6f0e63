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
    list_display = ["name", "membership", "hint", "created_at", "last_used_at", "revoked"]
    readonly_fields = ["key_hash", "hint", "last_used_at"]
    list_filter = ["revoked"]
