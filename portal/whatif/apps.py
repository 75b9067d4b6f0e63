from django.apps import AppConfig


class WhatifConfig(AppConfig):
    name = "portal.whatif"
    verbose_name = "What-if simulations"
