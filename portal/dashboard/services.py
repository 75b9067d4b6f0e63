"""The inference service pages: the tenant's services with a form for a new one, and each
service's page (its replicas against its load, live from the samples endpoint; stop it)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.core.api import form_fields
from portal.core.models import audit
from portal.dashboard.choices import queue_choices, with_defaults
from portal.services import autoscaling
from portal.services.api.serializers import ServiceSerializer
from portal.services.models import Service, with_live_replicas
from portal.tenancy.models import membership_allowing
from portal.workloads.choices import TERMINAL, PriorityClass
from portal.workloads.models import WorkloadEvent

DEFAULTS = {
    "gpus_per_replica": 8,
    "min_replicas": 1,
    "max_replicas": 10,
    "target_concurrency": 8,
    "stable_window_s": 60,
    "priority": PriorityClass.HIGH,
    "port": 8000,
}
# A service's page lists its live replicas and the newest ones that ended, each with the reason
# it ended ("scaled down, drained"), so a scale-down reads as one.
ENDED_SHOWN = 5
_last_reason = (
    WorkloadEvent.objects.filter(workload=OuterRef("workload")).order_by("-pk").values("reason")[:1]
)


@login_required
def service_list(request):
    membership = membership_allowing(request.user, "read")
    serializer = None
    if request.method == "POST":
        membership = membership_allowing(request.user, "write")
        data = {k: v for k, v in request.POST.items() if v != ""}
        data["scale_to_zero"] = "scale_to_zero" in request.POST
        serializer = ServiceSerializer(
            data=form_fields(ServiceSerializer, data), context={"request": request}
        )
        if serializer.is_valid():
            with transaction.atomic():
                service = serializer.save(tenant=membership.tenant, created_by=request.user)
                audit("service.created", service, actor=request.user, tenant=service.tenant)
            messages.success(
                request,
                _("%(service)s created; its first replicas are on the way.") % {"service": service},
            )
            return redirect("service-detail", pk=service.pk)
    services = with_live_replicas(
        Service.objects.visible_to(request.user).select_related("queue", "gpu_model")
    )
    queues = (
        membership.tenant.queues.order_by("name")
        .select_related("region")
        .prefetch_related("quotas__gpu_model", "family_quotas")
    )
    choices = queue_choices(queues)
    data, offered = with_defaults(request.POST if serializer else DEFAULTS, choices, not serializer)
    return render(
        request,
        "dashboard/services.html",
        {
            "services": services,
            "data": data,
            "errors": serializer.errors if serializer else {},
            "queues": queues,
            "choices": choices,
            "gpu_choices": offered,
            "priorities": PriorityClass.choices,
        },
    )


@login_required
def service_detail(request, pk):
    membership_allowing(request.user, "read")
    service = get_object_or_404(
        Service.objects.visible_to(request.user).select_related("queue", "gpu_model"), pk=pk
    )
    replicas = service.replicas.select_related("workload")
    live = replicas.exclude(workload__state__in=TERMINAL).order_by("workload_id")
    ended = (
        replicas.filter(workload__state__in=TERMINAL)
        .annotate(end=Subquery(_last_reason))
        .order_by("-workload__finished_at", "-workload_id")[:ENDED_SHOWN]
    )
    return render(
        request,
        "dashboard/service_detail.html",
        {"service": service, "replicas": live, "ended": ended},
    )


@login_required
@require_POST
def service_stop(request, pk):
    membership_allowing(request.user, "write")
    service = get_object_or_404(Service.objects.visible_to(request.user), pk=pk)
    autoscaling.stop(service, actor=request.user)
    audit("service.stopped", service, actor=request.user, tenant=service.tenant)
    messages.success(
        request, _("%(service)s stopped; its replicas are stopped.") % {"service": service}
    )
    return redirect("service-detail", pk=service.pk)
