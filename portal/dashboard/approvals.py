"""The operators' pages for quota and budget requests: every tenant's quota requests, pending
first, each pending one with its region's capacity check, and the pending budget requests, each
with where its budget stands; for each decision a confirmation that shows the request and asks
for a note (required to reject), then decides it (`QuotaRequest.decide`,
`BudgetRequest.decide`: atomic, audited, published to the tenant)."""

import django_filters
from django.contrib import messages
from django.db.models import Case, F, IntegerField, Value, When
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_GET

from portal.core.access import operator_page
from portal.dashboard.paging import paged
from portal.quotas.choices import RequestStatus
from portal.quotas.models import BudgetRequest, CapacityCheck, QuotaRequest
from portal.tenancy.models import Tenant
from portal.workloads.budgets import standings

DECISIONS = {"approve": gettext_lazy("Approve"), "reject": gettext_lazy("Reject")}
RELATED = ["tenant", "queue__tenant", "gpu_model", "region", "requested_by", "decided_by"]


class QuotaRequestFilterSet(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(
        choices=[*RequestStatus.choices, ("all", gettext_lazy("All"))],
        method="by_status",
        empty_label=None,
        label=gettext_lazy("Status"),
    )
    tenant = django_filters.ModelChoiceFilter(
        queryset=Tenant.objects.order_by("name"), label=gettext_lazy("Tenant")
    )

    class Meta:
        model = QuotaRequest
        fields = ["status", "tenant"]

    def by_status(self, queryset, name, value):
        return queryset if value == "all" else queryset.filter(status=value)


@operator_page
@require_GET
def quota_requests(request):
    """Pending requests first, those waiting longest at the top, then the decided ones, the
    newest decision first; filtered by status (pending unless told) and tenant, and paged."""
    data = request.GET.copy()
    if not data.get("status"):
        data["status"] = RequestStatus.PENDING
    rows = QuotaRequest.with_capacity(QuotaRequest.objects.select_related(*RELATED))
    filterset = QuotaRequestFilterSet(data, queryset=rows)
    found = filterset.qs if filterset.is_valid() else QuotaRequest.objects.none()
    pending_first = Case(
        When(status=RequestStatus.PENDING, then=Value(0)),
        default=Value(1),
        output_field=IntegerField(),
    )
    page, query = paged(
        request,
        found.order_by(pending_first, F("decided_at").desc(nulls_last=True), "requested_at", "id"),
    )
    page.object_list = list(page.object_list)
    for row in page.object_list:
        if row.status == RequestStatus.PENDING:
            row.check = CapacityCheck(row.capacity_gpus, row.committed_gpus, row.count)
            row.check_words = str(row.check)
    return render(
        request,
        "dashboard/ops_quota_requests.html",
        {"filter": filterset, "page": page, "query": query, "budget_requests": _budget_requests()},
    )


def _budget_requests() -> list[BudgetRequest]:
    """The pending budget requests, oldest first, each with its budget's `standing` now."""
    rows = list(
        BudgetRequest.objects.filter(status=RequestStatus.PENDING)
        .select_related("tenant", "budget__tenant", "budget__queue", "requested_by")
        .order_by("requested_at", "id")[:100]
    )
    now = {s.budget.pk: s for s in standings([row.budget for row in rows], burn=False)}
    for row in rows:
        row.standing = now[row.budget_id]
    return rows


def _refused(quota_request, approve: bool) -> str:
    """Why `decide` said no, read again from the database: decided meanwhile, or (for an
    approval) no longer room in the region."""
    quota_request.refresh_from_db()
    if quota_request.status != RequestStatus.PENDING:
        return _("Nothing changed: this request was already decided (%(status)s by %(who)s).") % {
            "status": quota_request.get_status_display(),
            "who": quota_request.decided_by.username if quota_request.decided_by else "—",
        }
    if approve:
        return _("Not approved: it no longer fits the region's capacity (%(check)s).") % {
            "check": quota_request.capacity_check()
        }
    return _("Nothing changed: the request could not be decided. Try again.")


def _done(quota_request, approve: bool) -> str:
    facts = {
        "count": quota_request.count,
        "model": quota_request.asked,
        "queue": str(quota_request.queue),
    }
    if approve:
        text = ngettext(
            "Approved: %(count)s %(model)s GPU for %(queue)s.",
            "Approved: %(count)s %(model)s GPUs for %(queue)s.",
            quota_request.count,
        )
    else:
        text = ngettext(
            "Rejected: %(count)s %(model)s GPU for %(queue)s.",
            "Rejected: %(count)s %(model)s GPUs for %(queue)s.",
            quota_request.count,
        )
    return text % facts


@operator_page
def quota_request_decide(request, pk, decision):
    """GET: the request, its capacity check now, and the note; POST: the decision."""
    if decision not in DECISIONS:
        return redirect("ops-quota-requests")
    quota_request = get_object_or_404(QuotaRequest.objects.select_related(*RELATED), pk=pk)
    approve = decision == "approve"
    errors = {}
    if request.method == "POST":
        note = request.POST.get("note", "").strip()
        if not approve and not note:
            errors["note"] = [_("Say why: the tenant reads it with the decision.")]
        if not errors:
            if quota_request.decide(request.user, approve, note):
                messages.success(request, _done(quota_request, approve))
            else:
                messages.error(request, _refused(quota_request, approve))
            return redirect("ops-quota-requests")
    check = quota_request.capacity_check()
    return render(
        request,
        "dashboard/ops_quota_decide.html",
        {
            "quota_request": quota_request,
            "decision": decision,
            "decision_name": DECISIONS[decision],
            "approve": approve,
            "pending": quota_request.status == RequestStatus.PENDING,
            "check": check,
            "check_words": str(check),
            "errors": errors,
            "data": request.POST,
        },
    )


@operator_page
def budget_request_decide(request, pk, decision):
    """GET: the request and where its budget stands, and the note; POST: the decision."""
    if decision not in DECISIONS:
        return redirect("ops-quota-requests")
    asked = get_object_or_404(
        BudgetRequest.objects.select_related("tenant", "budget__tenant", "budget__queue"), pk=pk
    )
    approve = decision == "approve"
    errors = {}
    if request.method == "POST":
        note = request.POST.get("note", "").strip()
        if not approve and not note:
            errors["note"] = [_("Say why: the tenant reads it with the decision.")]
        else:
            if asked.decide(request.user, approve, note):
                done = _("%(decision)s: a budget of %(hours)s GPU-hours for %(tenant)s.")
                facts = {"decision": DECISIONS[decision], "hours": asked.gpu_hours}
                messages.success(request, done % {**facts, "tenant": asked.tenant.name})
            else:
                messages.error(request, _("Nothing changed: this request was already decided."))
            return redirect("ops-quota-requests")
    [standing] = standings([asked.budget], burn=False)
    return render(
        request,
        "dashboard/ops_budget_decide.html",
        {
            "asked": asked,
            "standing": standing,
            "decision": decision,
            "decision_name": DECISIONS[decision],
            "approve": approve,
            "pending": asked.status == RequestStatus.PENDING,
            "errors": errors,
            "data": request.POST,
        },
    )
