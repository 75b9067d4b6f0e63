"""The usage page (GPU-hours and cost over a window, grouped, charted per day, downloadable as
the API's CSV; a tenant's members see their own, operators every tenant's) and the budgets of
the quota page."""

from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

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
