import django_filters
from django.utils.translation import gettext_lazy as _

from portal.workloads.choices import Kind, State
from portal.workloads.models import Workload


class WorkloadFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=State.choices, label=_("State"))
    kind = django_filters.ChoiceFilter(choices=Kind.choices, label=_("Kind"))
    queue = django_filters.CharFilter(field_name="queue__name", label=_("Queue"))
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name", label=_("GPU model"))
    name = django_filters.CharFilter(lookup_expr="icontains", label=_("Name"))

    class Meta:
        model = Workload
        fields = ["state", "kind", "queue", "gpu_model", "name"]
