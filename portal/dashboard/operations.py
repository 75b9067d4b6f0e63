"""The operators' pages for jobs and their trail: every tenant's jobs, searched, filtered,
sorted and paged; a job's page with the actions its state allows; for each action a
confirmation that says what it would do and asks why (`portal.workloads.actions` does it,
audited); and the audit trail, filtered and read only."""

import django_filters
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET

from portal.core.access import operator_page
from portal.core.errors import Conflict
from portal.core.models import AuditEvent
from portal.core.ordering import stable
from portal.dashboard.paging import paged
from portal.dashboard.views import workload_context
from portal.tenancy.models import Tenant
from portal.workloads import actions
from portal.workloads.choices import PriorityClass
from portal.workloads.filtersets import SORTS, WorkloadFilterSet
from portal.workloads.models import Workload, with_version

ACTION_NAMES = {
    "preempt": gettext_lazy("Preempt"),
    "requeue": gettext_lazy("Requeue"),
    "checkpoint": gettext_lazy("Checkpoint now"),
    "priority": gettext_lazy("Change priority"),
    "cancel": gettext_lazy("Cancel"),
}


class OperatorWorkloadFilterSet(WorkloadFilterSet):
    """The tenants' filters, and the tenant."""

    tenant = django_filters.ModelChoiceFilter(
        queryset=Tenant.objects.order_by("name"), label=gettext_lazy("Tenant")
    )

    class Meta(WorkloadFilterSet.Meta):
        fields = ["tenant", *WorkloadFilterSet.Meta.fields]


@operator_page
def workload_list(request):
    workloads = with_version(Workload.objects.select_related("tenant", "queue", "gpu_model"))
    filterset = OperatorWorkloadFilterSet(request.GET, queryset=workloads)
    found = filterset.qs if filterset.is_valid() else Workload.objects.none()
    sort = request.GET.get("sort", "-submitted_at")
    sort = sort if sort in SORTS else "-submitted_at"
    page, query = paged(request, found.order_by(*stable(sort)))
    return render(
        request,
        "dashboard/ops_workloads.html",
        {
            "filter": filterset,
            "page": page,
            "sorts": SORTS,
            "sort": sort,
            "query": query,
        },
    )


@operator_page
def workload_page(request, pk):
    workload = get_object_or_404(Workload.objects.select_related("queue", "gpu_model"), pk=pk)
    context = workload_context(workload)
    context["actions"] = [(a, ACTION_NAMES[a]) for a in actions.allowed(workload)]
    return render(request, "dashboard/workload_detail.html", context)


@operator_page
def workload_action(request, pk, action):
    workload = get_object_or_404(Workload.objects.select_related("tenant", "queue"), pk=pk)
    if action not in actions.ACTIONS:
        return redirect("ops-workload", pk=pk)
    errors = {}
    if request.method == "POST":
        reason = request.POST.get("reason", "").strip()
        priority = request.POST.get("priority")
        if not reason:
            errors["reason"] = [_("Say why: the tenant reads it in the job's history.")]
        if action == "priority" and priority not in {str(v) for v in PriorityClass.values}:
            errors["priority"] = [_("Choose a priority class from the list.")]
        if not errors:
            try:
                actions.perform(workload, action, request.user, reason[:200], priority)
            except Conflict as refused:
                messages.error(request, str(refused))
            else:
                messages.success(
                    request,
                    _("%(action)s: done for %(job)s.")
                    % {"action": ACTION_NAMES[action], "job": workload.name},
                )
            return redirect("ops-workload", pk=pk)
    return render(
        request,
        "dashboard/ops_action.html",
        {
            "workload": workload,
            "action": action,
            "action_name": ACTION_NAMES[action],
            "allowed": action in actions.allowed(workload),
            "impact": actions.impact(workload, action),
            "errors": errors,
            "data": request.POST,
            "priorities": PriorityClass.choices,
        },
    )


class AuditFilterSet(django_filters.FilterSet):
    action = django_filters.CharFilter(lookup_expr="startswith", label=gettext_lazy("Action"))
    tenant = django_filters.ModelChoiceFilter(
        queryset=Tenant.objects.order_by("name"), label=gettext_lazy("Tenant")
    )
    actor = django_filters.CharFilter(field_name="actor__username", label=gettext_lazy("Who"))
    object_type = django_filters.CharFilter(label=gettext_lazy("Object type"))
    object_id = django_filters.CharFilter(label=gettext_lazy("Object id"))

    class Meta:
        model = AuditEvent
        fields = ["action", "tenant", "actor", "object_type", "object_id"]


@operator_page
@require_GET
def audit_log(request):
    """The audit trail, newest first, filtered and paged; read only, here as in the admin."""
    entries = AuditEvent.objects.select_related("actor", "tenant")
    filterset = AuditFilterSet(request.GET, queryset=entries)
    found = filterset.qs if filterset.is_valid() else AuditEvent.objects.none()
    page, query = paged(request, found.order_by("-at", "-id"))
    return render(
        request,
        "dashboard/ops_audit.html",
        {"filter": filterset, "page": page, "query": query},
    )
