from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """The Prometheus door: /metrics, worked out at scrape time from the database and Redis."""

    name = "portal.metrics"
    label = "metrics"
