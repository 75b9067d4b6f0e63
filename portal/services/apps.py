from django.apps import AppConfig


class ServicesConfig(AppConfig):
    name = "portal.services"
    label = "services"
