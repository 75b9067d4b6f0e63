"""The usage page (GPU-hours and cost over a window, grouped, charted per day, downloadable as
the API's CSV; a tenant's members see their own, operators every tenant's) and the budgets of
the quota page."""

from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timeuntil
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from portal.quotas.choices import BudgetWindow
from portal.quotas.models import Budget
from portal.tenancy.models import membership_of
from portal.workloads import usage as usage_report
from portal.workloads.api.serializers import UsageQuerySerializer
from portal.workloads.budgets import standings
from portal.workloads.models import Workload

WINDOWS = {
    "month": _("This month"),
    "last-month": _("Last month"),
    "30d": _("Last 30 days"),
    "7d": _("Last 7 days"),
    "24h": _("Last 24 hours"),
}
KEY_NAMES = {
    "tenant": _("Tenant"),
    "queue": _("Queue"),
    "gpu_model": _("GPU model"),
    "user": _("User"),
}


def window(name: str, now):
    """(since, until) of a named window ending now (last month: the whole month)."""
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if name == "last-month":
        return (month - timedelta(days=1)).replace(day=1), month
    if name == "month":
        return month, now
    days = {"30d": 30, "7d": 7, "24h": 1}[name]
    return now - timedelta(days=days), now


@login_required
def usage(request):
    membership = membership_of(request.user)
    if membership is None and not request.user.is_staff:
        raise PermissionDenied(_("Only tenants' members and operators read usage."))
    name = request.GET.get("window", "month")
    name = name if name in WINDOWS else "month"
    since, until = window(name, timezone.now())
    default = "queue,gpu_model" if membership else "tenant,queue,gpu_model"
    group_by = ",".join(request.GET.getlist("group_by")) or default
    query = UsageQuerySerializer(data={"since": since, "until": until, "group_by": group_by})
    errors = {} if query.is_valid() else query.errors
    keys = query.validated_data["group_by"] if not errors else tuple(default.split(","))
    workloads = Workload.objects.visible_to(request.user)
    step = timedelta(hours=1) if until - since <= timedelta(days=2) else timedelta(days=1)
    rows, chart = usage_report.report_and_series(workloads, since, until, keys, step)
    params = {"format": "csv", "since": since.isoformat(), "until": until.isoformat()}
    return render(
        request,
        "dashboard/usage.html",
        {
            "windows": WINDOWS,
            "chosen": name,
            "since": since,
            "until": until,
            "key_names": KEY_NAMES,
            "keys": keys,
            "columns": [KEY_NAMES[key] for key in keys],
            "rows": [{**row, "values": [row[key] for key in keys]} for row in rows],
            "errors": errors,
            "gpu_hours": sum(row["gpu_hours"] for row in rows),
            "cost": sum(row["cost"] for row in rows),
            "currency": settings.WANKA["CURRENCY"],
            "csv_url": f"{reverse('usage')}?{urlencode({**params, 'group_by': ','.join(keys)})}",
            "chart": {
                "starts": [start.isoformat() for start in chart["starts"]],
                "series": chart["series"],
                "key": KEY_NAMES[keys[0]],
                "hourly": step < timedelta(days=1),
            },
        },
    )


def budget_bars(tenant) -> list:
    """Where each budget of the tenant stands, for the quota page."""
    return standings(tenant.budgets.select_related("tenant", "queue"))


def budget_notes(tenant_id: int, queue_id: int | None = None) -> list[str]:
    """What a tenant's members should hear of its budgets (of those covering `queue_id`, where
    given): each one spent, past its first warning or running out before its window ends, in
    a sentence that says what it means for their jobs."""
    budgets = Budget.objects.filter(tenant_id=tenant_id).select_related("tenant", "queue")
    if queue_id is not None:
        budgets = budgets.filter(Q(queue_id=queue_id) | Q(queue__isnull=True))
    return [_note(s) for s in standings(budgets) if _worth_saying(s)]


def _worth_saying(standing) -> bool:
    first = min(standing.budget.thresholds or [100])
    return standing.left <= 0 or standing.percent >= first or not standing.lasts


def _note(standing) -> str:
    budget = standing.budget
    if budget.queue_id:
        whose = gettext("Budget of queue %(queue)s") % {"queue": budget.queue.name}
    else:
        whose = gettext("Budget of %(tenant)s") % {"tenant": budget.tenant.name}
    if budget.window == BudgetWindow.MONTH:
        window = gettext("this month")
    else:
        window = ngettext(
            "in the last %(days)d day", "in the last %(days)d days", budget.window_days
        ) % {"days": budget.window_days}
    figures = {
        "whose": whose,
        "used": f"{standing.used:,.0f}",
        "hours": f"{budget.gpu_hours:,}",
        "window": window,
        "percent": f"{standing.percent:.0f}",
    }
    if standing.left <= 0:
        said = gettext("%(whose)s spent: %(used)s of %(hours)s GPU-hours %(window)s.") % figures
        if budget.hard:
            return said + " " + gettext("Jobs that would use more wait until it renews.")
        return (
            said
            + " "
            + gettext(
                "Jobs still start, but its queues borrow no more and get a quarter of their fair "
                "share."
            )
        )
    said = gettext("%(whose)s: %(percent)s %% used %(window)s (%(used)s of %(hours)s GPU-hours).")
    said %= figures
    if not standing.lasts:
        said += " " + gettext("At the last day's rate it runs out in %(ahead)s.") % {
            "ahead": timeuntil(standing.runs_out_at, standing.now, depth=1)
        }
    return said
