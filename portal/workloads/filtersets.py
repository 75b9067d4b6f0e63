import django_filters
from django.utils.translation import gettext_lazy as _

from portal.core.api import FormOnce
from portal.core.ordering import stable
from portal.workloads.choices import Kind, State
from portal.workloads.models import Workload

# How lists of workloads sort: the API's `ordering` values, and their names.
SORTS = {
    "-submitted_at": _("Newest first"),
    "submitted_at": _("Oldest first"),
    "-gpus": _("Most GPUs first"),
    "-priority": _("Highest priority first"),
    "estimated_start": _("Soonest estimated start first"),
}


class WorkloadFilterSet(FormOnce, django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=State.choices, label=_("State"))
    kind = django_filters.ChoiceFilter(choices=Kind.choices, label=_("Kind"))
    queue = django_filters.CharFilter(field_name="queue__name", label=_("Queue"))
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name", label=_("GPU model"))
    name = django_filters.CharFilter(lookup_expr="icontains", label=_("Name"))

    class Meta:
        model = Workload
        fields = ["state", "kind", "queue", "gpu_model", "name"]


class _StableOrdering(django_filters.OrderingFilter):
    """The chosen order as the API sorts it (`portal.core.ordering.stable`)."""

    def filter(self, qs, value):
        return qs.order_by(*stable(*value)) if value else qs


class SortedWorkloadFilterSet(WorkloadFilterSet):
    """The pages' lists: the API's filters and a sort, under the API's own `ordering` name and
    values, so a list that follows live through the API gets its rows in the same order."""

    ordering = _StableOrdering(
        fields=["submitted_at", "estimated_start", "gpus", "priority"],
        choices=list(SORTS.items()),
        label=_("Sort"),
    )

    class Meta(WorkloadFilterSet.Meta):
        fields = [*WorkloadFilterSet.Meta.fields, "ordering"]
