from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "portal.tenancy"
    label = "tenancy"
