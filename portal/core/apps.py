from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "portal.core"
    label = "core"

    def ready(self):
        from portal.core import schema  # noqa: F401 - registers its schema extension
