import django_filters

from portal.workloads.choices import Kind, State
from portal.workloads.models import Workload


class WorkloadFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=State.choices)
    kind = django_filters.ChoiceFilter(choices=Kind.choices)
    queue = django_filters.CharFilter(field_name="queue__name")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Workload
        fields = ["state", "kind", "queue", "gpu_model", "name"]
