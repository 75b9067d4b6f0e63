"""Server-rendered pages. Forms validate through the API's serializers, so the browser and the
REST API accept and refuse exactly the same things."""

import csv
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.cluster.commands import send_command
from portal.cluster.models import FaultEvent, Node, NodeCommand
from portal.cluster.summary import (
    RANGES,
    cluster_summary,
    heartbeats,
    history,
    reported_share,
    reported_steps,
)
from portal.core.access import operator_page
from portal.core.api import form_fields
from portal.core.models import audit
from portal.dashboard.attention import attention
from portal.dashboard.choices import queue_choices, with_defaults
from portal.dashboard.queues import Tree, gpus_held, queue_rows
from portal.dashboard.usage import budget_bars, budget_notes
from portal.quotas.api.serializers import QuotaRequestSerializer
from portal.quotas.models import QuotaRequest
from portal.tenancy.models import ApiToken, membership_allowing, membership_of
from portal.workloads import actions, cycle, eta, lifecycle, logs
from portal.workloads.advice import advice_report
from portal.workloads.api.serializers import WorkloadSerializer
from portal.workloads.charts import SPAN_NAMES, SPANS, day_charts
from portal.workloads.choices import (
    HOLDING,
    CheckpointPolicy,
    Kind,
    PriorityClass,
    State,
    Topology,
)
from portal.workloads.ettr import job_report
from portal.workloads.filtersets import SortedWorkloadFilterSet
from portal.workloads.models import (
    Allocation,
    IllegalTransition,
    Recovery,
    Workload,
    with_version,
)
from portal.workloads.usage import booked, gpu_hours, held_now
from scheduler import faults, parallelism


def _membership(request, needs: str = "read"):
    return membership_allowing(request.user, needs)


def _tenant_workloads(request):
    _membership(request)
    return Workload.objects.visible_to(request.user).select_related("queue", "gpu_model")


@login_required
def dashboard(request):
    membership = membership_of(request.user)
    workloads = Workload.objects.visible_to(request.user)
    span = request.GET.get("range", "30m")
    span = span if span in RANGES else "30m"
    context = {
        "summary": cluster_summary(),
        "history": history(span),
        "span": span,
        "ranges": RANGE_NAMES,
    }
    if membership:
        context["workloads"] = with_version(workloads.select_related("queue", "gpu_model"))[:15]
        context.update(live_query="", live_limit=15)
        holding = workloads.filter(state__in=HOLDING)
        context["active_gpus"], running = held_now(holding)
        context["gpu_hours"] = booked(membership.tenant.usage) + running
        context["budget_notes"] = budget_notes(membership.tenant_id)
    elif request.user.is_staff:
        context["attention"] = attention()
    context["faults"] = FaultEvent.objects.visible_to(request.user).select_related("node")[:10]
    context["ettr_scope"] = membership.tenant.name if membership else _("the cluster")
    scope = membership.tenant_id if membership else ("all" if request.user.is_staff else None)
    days = request.GET.get("days", "24h")
    days = days if days in SPANS else "24h"
    context.update(day_charts(workloads, scope, days), days=days, day_spans=SPAN_NAMES)
    context["days_name"] = SPAN_NAMES[days]
    return render(request, "dashboard/index.html", context)


RANGE_NAMES = {
    "30m": gettext_lazy("30 min, live"), "1h": gettext_lazy("1 h"), "6h": gettext_lazy("6 h"),
    "24h": gettext_lazy("24 h"), "7d": gettext_lazy("7 days"), "30d": gettext_lazy("30 days"),
}  # fmt: skip


@login_required
def utilization_csv(request):
    """The utilization chart's points of one range (`?range=`, as the dashboard offers) as CSV:
    time (UTC), GPUs, allocated, busy."""
    span = request.GET.get("range", "30m")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="utilization-{span}.csv"'
    writer = csv.writer(response)
    writer.writerow(["time", "gpus", "allocated", "busy"])
    for p in history(span if span in RANGES else "30m"):
        at = datetime.fromtimestamp(p["ts"], UTC).isoformat(timespec="seconds")
        writer.writerow([at, p["gpus"], round(p["allocated"], 1), round(p["busy"], 1)])
    return response


@login_required
def workload_list(request):
    """The tenant's workloads, newest first, filtered; a filter that is not valid shows its
    errors and no rows, and a list longer than a page says how much longer."""
    filterset = SortedWorkloadFilterSet(
        request.GET, queryset=with_version(_tenant_workloads(request))
    )
    found = filterset.qs if filterset.is_valid() else Workload.objects.none()
    return render(
        request,
        "dashboard/workload_list.html",
        {
            "filter": filterset,
            "workloads": found[:LIST_ROWS],
            "total": found.count(),
            # The list follows live with the same filter, through the API.
            "live_query": request.GET.urlencode() if filterset.is_valid() else None,
            "live_limit": LIST_ROWS,
        },
    )


LIST_ROWS = 200  # the rows the workload list shows; the API pages through all of them


@login_required
def workload_detail(request, pk):
    workload = get_object_or_404(_tenant_workloads(request), pk=pk)
    return render(request, "dashboard/workload_detail.html", workload_context(workload))


def workload_context(workload: Workload) -> dict:
    """A job's page: its facts, history, ETTR, plans, saves, recoveries and the advisor's
    table; for its tenant's members and, with the actions, for operators."""
    events = list(workload.events.all())
    report = job_report(workload)
    allocations = list(workload.allocations.select_related("node"))
    steps, share = {}, None
    if workload.state == State.RUNNING:
        samples = heartbeats({a.node_id for a in allocations})
        steps = reported_steps(samples, workload.pk, workload.attempt)
        share = reported_share(samples, workload.pk, workload.attempt)
    return {
        "share": share and {**share, "memory_gb": f"{share['memory_mb'] / 1024:.3g}"},
        "workload": workload,
        "events": events,
        "parallel_plans": list(workload.parallel_plans.all()),
        "speeds": _speeds(workload) if len(workload.accepts) > 1 else None,
        "nodes": sorted({a.node.name for a in allocations}),
        "held": len(allocations),
        "progress": max(steps.values(), default=None),
        "gpu_hours": gpu_hours(workload.usage, [workload]),
        "ettr": report,
        "phases": [
            (phase.value, PHASE_NAMES[phase.value], seconds)
            for phase, seconds in report["seconds"].items()
        ],
        "cancel_impact": [] if workload.is_finished else actions.impact(workload, "cancel"),
        "checkpoints": workload.checkpoints.all()[:20],
        "recoveries": workload.recoveries.select_related("fault__node")[:20],
        "advice": advice_report(workload.gpus),
        "log_days": f"{settings.WANKA['LOG_RETENTION_DAYS']:g}",
    }


def _speeds(workload: Workload) -> dict | None:
    """How much faster the job runs per GPU on each model it accepts than on the slowest known
    (None: unknown), and how many of its runs measured that (0: the planner's); None when no
    speed is known."""
    speeds, runs = cycle.speeds_of(workload)
    if not speeds:
        return None
    known, slowest = dict(speeds), min(rate for _, rate in speeds)
    times = {model: f"{known[model] / slowest:.1f}" for model in known}
    return {"models": [(model, times.get(model)) for model in workload.accepts], "runs": runs}


def _preview(draft: Workload, user) -> dict:
    """`eta.preview` of a job not yet submitted, its reason read by the page (`readable`),
    with its speed on each GPU model it accepts."""
    preview = eta.preview(draft, user.pk, None)
    speeds = _speeds(draft) if preview["models"] else None
    times = dict(speeds["models"]) if speeds else {}
    for start in preview["models"]:
        start["times"] = times.get(start["gpu_model"])
    preview["speeds"] = speeds
    return preview


@login_required
def workload_log_text(request, pk):
    """The whole output kept of a workload, of one attempt and node when asked, as text."""
    workload = get_object_or_404(_tenant_workloads(request), pk=pk)
    attempt, node = request.GET.get("attempt"), request.GET.get("node") or None
    query = {"attempt": int(attempt) if attempt and attempt.isdigit() else None, "node": node}
    every = query["attempt"] is None and node is None

    async def lines():  # async: under ASGI a sync iterator would be read whole into memory
        since, read = 0, sync_to_async(logs.read)
        while chunks := await read(workload, since=since, **query):
            for chunk in chunks:
                prefix = f"[{chunk.attempt} {chunk.node.name}] " if every else ""
                yield "".join(f"{prefix}{line}\n" for line in chunk.text.split("\n"))
            since = chunks[-1].id

    response = StreamingHttpResponse(lines(), content_type="text/plain; charset=utf-8")
    name = workload.name + ("" if every else f"-attempt{query['attempt']}-{node}")
    safe = re.sub(r"[^\w.-]", "_", name)
    response["Content-Disposition"] = f'attachment; filename="{safe}.log"'
    return response


@login_required
@require_POST
def workload_cancel(request, pk):
    _membership(request, "write")
    workload = get_object_or_404(_tenant_workloads(request), pk=pk)
    try:
        lifecycle.cancel(workload, actor=request.user)
        messages.success(request, _("%(workload)s cancelled.") % {"workload": workload})
    except IllegalTransition:
        messages.error(request, _("%(workload)s has already finished.") % {"workload": workload})
    return redirect("workload-detail", pk=pk)


def _form_context(membership, data, serializer=None, quota_request=False, families=False):
    """A form whose queue drives the GPU model and the region (`dashboard.choices`)."""
    queues = list(
        membership.tenant.queues.select_related("region", "cohort")
        .prefetch_related("quotas__gpu_model", "family_quotas")
        .order_by("name")
    )
    choices = queue_choices(queues, quota_request, families)
    data, offered = with_defaults(data, choices, fill=serializer is None)
    return {
        "data": data,
        "errors": serializer.errors if serializer else {},
        "queues": queues,
        "choices": choices,
        "gpu_choices": offered,
    }


@login_required
def workload_new(request):
    membership = _membership(request, "write")
    if request.method == "POST":
        data = request.POST
    elif "from" in request.GET:  # clone and resubmit: the form filled from one of the tenant's jobs
        data = _as_form(get_object_or_404(membership.tenant.workloads, pk=request.GET["from"]))
    else:
        data = {
            "gpus": 16,
            "kind": Kind.TRAINING,
            "priority": PriorityClass.NORMAL,
            "checkpoint_policy": CheckpointPolicy.ASYNC,
        }
    serializer = preview = None
    also = request.POST.getlist("also") if request.method == "POST" else data.pop("also", [])
    if request.method == "POST":
        posted = form_fields(WorkloadSerializer, _blank_to_none(request.POST))
        if also:  # the model chosen first, then the others it may also run on
            first = posted.get("gpu_model")
            posted["gpu_models"] = [first, *(name for name in also if name != first)]
        serializer = WorkloadSerializer(data=posted, context={"request": request})
        if serializer.is_valid() and "preview" in request.POST:
            draft = Workload(tenant=membership.tenant, **serializer.validated_data)
            preview = _preview(draft, request.user)
            preview["budgets"] = budget_notes(membership.tenant_id, draft.queue_id)
        elif serializer.is_valid():
            workload = lifecycle.submit(serializer, request.user)
            messages.success(request, _("%(workload)s submitted.") % {"workload": workload})
            return redirect("workload-detail", pk=workload.pk)
    context = _form_context(membership, data, serializer, families=True)
    context["also"] = also
    chosen = context["choices"].get(context["data"].get("queue"), {})
    context["also_choices"] = [*context["gpu_choices"], *chosen.get("families", ())]
    context["preview"] = preview
    context["budget_notes"] = [] if preview else budget_notes(membership.tenant_id)
    context.update(
        kinds=Kind.choices,
        priorities=PriorityClass.choices,
        topologies=Topology.choices,
        policies=CheckpointPolicy.choices,
        models=list(parallelism.MODELS),
    )
    return render(request, "dashboard/workload_new.html", context)


@login_required
def quota(request):
    membership = _membership(request)
    serializer = None
    data = request.POST if request.method == "POST" else {}
    if request.method == "POST":
        _membership(request, "admin")
        posted = form_fields(QuotaRequestSerializer, request.POST)
        serializer = QuotaRequestSerializer(data=posted, context={"request": request})
        if serializer.is_valid():
            QuotaRequest.file(serializer, request.user)
            messages.success(request, _("Quota request sent to the operators."))
            return redirect("quota")
    context = _form_context(membership, data, serializer, quota_request=True)
    context["requests"] = membership.tenant.quota_requests.select_related(
        "queue", "gpu_model", "region"
    )[:50]
    asked = membership.tenant.budget_requests.select_related("tenant", "budget__queue")
    context.update(
        bars=queue_rows(context["queues"], Tree(gpus_held())),
        budgets=budget_bars(membership.tenant),
        budget_requests=asked[:20],
    )
    return render(request, "dashboard/quota.html", context)


def _blank_to_none(post):
    """HTML forms send '' for an empty number; the serializer wants it absent. The environment
    comes as NAME=value lines; a line without '=' is left for the serializer to refuse."""
    data = {key: value for key, value in post.items() if value != ""}
    data["topology_required"] = "topology_required" in post
    data["movable"] = "pinned" not in post
    lines = [line.strip() for line in data.pop("env", "").splitlines() if line.strip()]
    if lines:
        pairs = [line.partition("=") for line in lines]
        whole = all(eq for _, eq, _ in pairs)
        data["env"] = {name.strip(): value for name, _, value in pairs} if whole else lines
    return data


def _as_form(workload):
    """What the submit form shows to resubmit `workload`: its request, not its run."""
    fields = WorkloadSerializer(workload).data
    data = {name: fields[name] for name in CLONED if fields[name] is not None}
    data["queue"], data["gpu_model"] = workload.queue.name, workload.gpu_model.name
    if workload.accepts:  # its first choice again, and the others
        data["gpu_model"], data["also"] = workload.accepts[0], workload.accepts[1:]
    data["env"] = "\n".join(f"{name}={value}" for name, value in workload.env.items())
    return data


# The request's fields a clone keeps (its queue and GPU model by name, its env as lines).
CLONED = [
    "name", "kind", "gpus", "mig", "min_gpus", "max_gpus", "priority", "topology",
    "topology_required", "checkpoint_policy", "checkpoint_interval_s", "movable", "command",
    "time_limit_s",
    "preemption_grace_s", "simulated_duration_s", "model", "global_batch",
]  # fmt: skip


@never_cache  # it shows a new key: no cache, and no back button, may keep it
@login_required
def tokens(request):
    """The caller's own API tokens (a member's or an operator's): issue one (its key shown this
    once), list, revoke. An issue redirects to the list, which shows the new key once from the
    session, so reloading the page never issues another."""
    membership = _token_holder(request)
    tenant = membership.tenant if membership else None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        scope = request.POST.get("scope", "write")
        days = request.POST.get("expires_in_days", "30")
        if not name:
            messages.error(request, _("Give the token a name."))
        elif scope not in ApiToken.SCOPES or days not in TOKEN_LIFETIMES:
            messages.error(request, _("Choose a scope and a lifetime from the lists."))
        elif scope == "write" and membership and not membership.may("write"):
            messages.error(request, _("A viewer's tokens can only read."))
        else:
            expires = timezone.now() + timedelta(days=int(days)) if days != "never" else None
            token, request.session[NEW_KEY] = ApiToken.issue(
                request.user, name[:100], scope, expires
            )
            audit(
                "api_token.issued",
                token,
                actor=request.user,
                tenant=tenant,
                scope=scope,
                expires_at=expires.isoformat() if expires else None,
            )
        return redirect("tokens")
    return render(
        request,
        "dashboard/tokens.html",
        {
            "tokens": request.user.api_tokens.order_by("-created_at", "-id"),
            "new_key": request.session.pop(NEW_KEY, None),
            "scopes": ApiToken.SCOPES,
            "lifetimes": TOKEN_LIFETIMES,
            "now": timezone.now(),
        },
    )


NEW_KEY = "wanka_new_api_key"  # in the session between the issue and the page that shows it
TOKEN_LIFETIMES = {
    "7": gettext_lazy("7 days"),
    "30": gettext_lazy("30 days"),
    "90": gettext_lazy("90 days"),
    "365": gettext_lazy("a year"),
    "never": gettext_lazy("never"),
}
# The phases of a job's time (`ettr.Phase`), as the job page names them.
PHASE_NAMES = {
    "queued": gettext_lazy("queued"),
    "starting": gettext_lazy("starting"),
    "productive": gettext_lazy("productive"),
    "checkpoint_stall": gettext_lazy("checkpoint stall"),
    "lost": gettext_lazy("lost"),
    "recovering": gettext_lazy("recovering"),
}


def _token_holder(request):
    """The caller's membership (None for an operator); anyone else may hold no token."""
    membership = membership_of(request.user)
    if membership is None and not request.user.is_staff:
        raise PermissionDenied(_("Only tenants' members and operators hold API tokens."))
    return membership


@login_required
@require_POST
def token_revoke(request, pk):
    membership = _token_holder(request)
    token = get_object_or_404(request.user.api_tokens, pk=pk)
    token.revoked = True
    token.save(update_fields=["revoked"])
    audit("api_token.revoked", token, actor=request.user, tenant=membership and membership.tenant)
    messages.success(request, _("Token %(token)s revoked.") % {"token": token})
    return redirect("tokens")


def _say_drill_impact(nodes: list[Node]) -> None:
    """Each node's `impact`: the jobs a drill there would hit, with their tenants."""
    jobs = defaultdict(list)
    held = (
        Allocation.objects.filter(node__in=nodes)
        .values("node_id", "workload__name", "workload__tenant__name")
        .annotate(gpus=Count("id"))
        .order_by("node_id", "workload__name")
    )
    for row in held:
        jobs[row["node_id"]].append(
            _("%(job)s of %(tenant)s (%(gpus)d GPUs)")
            % {
                "job": row["workload__name"],
                "tenant": row["workload__tenant__name"],
                "gpus": row["gpus"],
            }
        )
    for node in nodes:
        node.impact = (
            _("It hits the jobs there: %(jobs)s. A fault that takes out a GPU or the node "
              "restarts them from their newest save.") % {"jobs": ", ".join(jobs[node.pk])}
            if jobs[node.pk]
            else _("No job runs there.")
        )  # fmt: skip


@operator_page
def fault_drill(request):
    """Operators inject a chosen fault on a simulated node and watch the recovery live."""
    if request.method == "POST":
        node = get_object_or_404(Node, pk=request.POST.get("node"), connected=True)
        code = request.POST.get("code", "")
        if code not in faults.CATALOGUE or code in faults.OPERATOR_KINDS:
            messages.error(request, _("Unknown fault %(code)r.") % {"code": code})
            return redirect("fault-drill")
        with transaction.atomic():
            send_command(
                node.pk,
                "inject_fault",
                code=code,
                gpu_index=int(request.POST.get("gpu_index") or 0),
            )
            audit("node.fault_drill", node, actor=request.user, code=code)
        messages.success(
            request, _("%(code)s sent to %(node)s; watch below.") % {"code": code, "node": node}
        )
        return redirect("fault-drill")
    nodes = list(
        Node.objects.filter(connected=True)
        .annotate(busy=Count("allocations"))
        .order_by("-busy", "name")[:200]
    )
    _say_drill_impact(nodes)
    return render(
        request,
        "dashboard/fault_drill.html",
        {
            "nodes": nodes,
            "kinds": sorted(
                (k for k in faults.CATALOGUE.values() if k.code not in faults.OPERATOR_KINDS),
                key=lambda k: (k.xid is None, k.xid, k.code),
            ),
            "drills": NodeCommand.objects.filter(action="inject_fault")
            .select_related("node")
            .order_by("-created_at", "-id")[:10],
            "recoveries": Recovery.objects.select_related("workload", "fault__node")[:20],
        },
    )
