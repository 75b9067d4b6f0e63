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


class FaultFilterSet(django_filters.FilterSet):
    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices)
    node = django_filters.CharFilter(field_name="node__name")
    since = django_filters.IsoDateTimeFilter(field_name="occurred_at", lookup_expr="gte")

    class Meta:
        model = FaultEvent
        fields = ["kind", "code", "severity", "node", "since"]
