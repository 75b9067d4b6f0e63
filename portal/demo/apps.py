from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo installation: seed data, demo traffic and the standalone portal."""

    name = "portal.demo"
    label = "demo"
