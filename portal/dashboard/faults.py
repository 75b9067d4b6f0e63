"""The operators' page of faults and the recoveries they set off: every fault, newest first,
filtered by kind, data center, node and age, each with the workloads it hit, how far each
recovery got and how long it took (from the fault to the recovery's end); read only."""

import statistics
from datetime import timedelta

import django_filters
from django.db.models import Count, F, Prefetch, Q
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET

from portal.cluster.models import DataCenter, FaultEvent
from portal.core.access import operator_page
from portal.dashboard.paging import paged
from portal.dashboard.templatetags.words import fault_title
from portal.workloads.choices import RecoveryStep
from portal.workloads.models import Recovery

SINCE = {
    "1h": (timedelta(hours=1), gettext_lazy("Last hour")),
    "24h": (timedelta(days=1), gettext_lazy("Last 24 hours")),
    "7d": (timedelta(days=7), gettext_lazy("Last 7 days")),
}


def _kinds():
    """The kinds of fault seen, each with its title, for the filter."""
    seen = FaultEvent.objects.order_by("kind").values_list("kind", flat=True).distinct()
    return [(kind, f"{kind}: {fault_title(kind)}") for kind in seen]


class FaultFilterSet(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(
        choices=_kinds, label=gettext_lazy("Kind"), empty_label=gettext_lazy("Any kind")
    )
    datacenter = django_filters.ModelChoiceFilter(
        field_name="node__leaf__pod__datacenter",
        queryset=DataCenter.objects.order_by("name"),
        label=gettext_lazy("Data center"),
    )
    node = django_filters.CharFilter(
        field_name="node__name", lookup_expr="icontains", label=gettext_lazy("Node name")
    )
    since = django_filters.ChoiceFilter(
        choices=[(key, label) for key, (_, label) in SINCE.items()],
        method="seen_since",
        label=gettext_lazy("Since"),
        empty_label=gettext_lazy("All time"),
    )

    class Meta:
        model = FaultEvent
        fields = ["kind", "datacenter", "node", "since"]

    def seen_since(self, queryset, name, value):
        return queryset.filter(occurred_at__gte=timezone.now() - SINCE[value][0])


def _took_s(recovery: Recovery, fault: FaultEvent) -> float | None:
    """Seconds from the fault to the recovery's end; None while it runs."""
    if recovery.step != RecoveryStep.DONE or recovery.finished_at is None:
        return None
    return max(0.0, (recovery.finished_at - fault.occurred_at).total_seconds())


def _summary(found, count: int) -> dict:
    """Of the faults `found` (`count` of them): their recoveries done and running, and the median
    time to recover of those done."""
    recoveries = Recovery.objects.filter(fault__in=found)
    done = Q(step=RecoveryStep.DONE)
    counts = recoveries.aggregate(done=Count("pk", filter=done), running=Count("pk", filter=~done))
    took = recoveries.filter(done, finished_at__isnull=False).values_list(
        F("finished_at") - F("fault__occurred_at"), flat=True
    )
    seconds = [max(0.0, t.total_seconds()) for t in took]
    return {
        "faults": count,
        **counts,
        "median_s": statistics.median(seconds) if seconds else None,
    }


@operator_page
@require_GET
def fault_list(request):
    faults = FaultEvent.objects.select_related("node__leaf__pod__datacenter").prefetch_related(
        Prefetch(
            "recoveries",
            queryset=Recovery.objects.select_related("workload").order_by("started_at", "id"),
        )
    )
    filterset = FaultFilterSet(request.GET, queryset=faults)
    found = filterset.qs if filterset.is_valid() else FaultEvent.objects.none()
    page, query = paged(request, found.order_by("-occurred_at", "-id"))
    for fault in page:
        for recovery in fault.recoveries.all():
            recovery.took_s = _took_s(recovery, fault)
    return render(
        request,
        "dashboard/ops_faults.html",
        {
            "filter": filterset,
            "page": page,
            "query": query,
            "summary": _summary(found, page.paginator.count),
        },
    )
