from datetime import UTC

import django_filters

from portal.cluster.choices import Health, Severity
from portal.cluster.models import FaultEvent, Node


class NodeFilterSet(django_filters.FilterSet):
    health = django_filters.MultipleChoiceFilter(choices=Health.choices)
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    datacenter = django_filters.CharFilter(field_name="leaf__pod__datacenter__name")
    pod = django_filters.CharFilter(field_name="leaf__pod__name")

    class Meta:
        model = Node
        fields = ["health", "gpu_model", "datacenter", "pod", "connected"]


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 moment, compared in UTC: Python takes offsets up to 23:59, PostgreSQL only
    to 15:59, so "+19:09" would reach the database as an error."""

    def filter(self, qs, value):
        return super().filter(qs, value and value.astimezone(UTC))


class FaultFilterSet(django_filters.FilterSet):
    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices)
    node = django_filters.CharFilter(field_name="node__name")
    since = UtcDateTimeFilter(field_name="occurred_at", lookup_expr="gte")

    class Meta:
        model = FaultEvent
        fields = ["kind", "code", "severity", "node", "since"]
