"""The operators' what-if page: start a simulation, watch its progress, read its report."""

from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import get_language
from django.utils.translation import gettext as _
from django.views.decorators.clickjacking import xframe_options_sameorigin

from portal.core.access import operator_page
from portal.core.models import audit
from portal.core.security import SANDBOXED_REPORT
from portal.whatif.choices import ClusterSource, RunState, TraceSource
from portal.whatif.models import WhatIfRun
from portal.whatif.runs import (
    HISTORY_DAYS,
    MAX_HISTORY_DAYS,
    Mismatch,
    defragmentation,
    inputs,
    take_history,
)
from portal.whatif.tasks import run_whatif
from portal.workloads.phrasebook import translate
from scheduler.sim import report
from scheduler.sim.policies import POLICIES
from scheduler.sim.spec import SpecError
from scheduler.sim.trace import TraceError

MAX_UPLOAD = 20 * 1024 * 1024


@operator_page
def whatif_list(request):
    errors = {}
    if request.method == "POST":
        whatif, errors = _from_form(request)
        if not errors:
            with transaction.atomic():
                whatif.save()
                audit("whatif.started", whatif, actor=request.user)
                transaction.on_commit(lambda: run_whatif.delay(whatif.pk))
            messages.success(request, _("What-if %(id)s started.") % {"id": whatif.pk})
            return redirect("whatif-detail", pk=whatif.pk)
    return render(
        request,
        "whatif/list.html",
        {
            "runs": WhatIfRun.objects.defer("results", "trace_csv", "cluster_json")[:30],
            "traces": TraceSource.choices,
            "clusters": ClusterSource.choices,
            "policies": list(POLICIES),
            # All at first; after an error, what was chosen.
            "chosen": request.POST.getlist("policies") if errors else list(POLICIES),
            "errors": errors,
            "data": request.POST,
            "history_days": (HISTORY_DAYS, MAX_HISTORY_DAYS),
        },
    )


def _from_form(request) -> tuple[WhatIfRun, dict]:
    post, files, errors = request.POST, request.FILES, {}
    policies = [p for p in post.getlist("policies") if p in POLICIES]
    whatif = WhatIfRun(
        created_by=request.user,
        trace=post.get("trace", ""),
        cluster=post.get("cluster", ""),
        policies=policies,
    )
    if whatif.trace not in TraceSource.values:
        errors["trace"] = _("Choose a trace.")
    if whatif.cluster not in ClusterSource.values:
        errors["cluster"] = _("Choose a cluster.")
    if not policies:
        errors["policies"] = _("Choose at least one policy.")
    for field, cast in (("days", float), ("gpus", int), ("seed", int), ("service_percent", float)):
        if post.get(field):
            try:
                value = cast(post[field])
            except ValueError:
                value = 0
            if value > 0:
                setattr(whatif, field, value)
            else:
                errors[field] = _("Must be a positive number.")
    whatif.defrag = post.get("defrag", "").strip()
    if post.get("defrag_moves", "").strip():
        try:
            whatif.defrag_moves = int(post["defrag_moves"])
        except ValueError:
            whatif.defrag_moves = -1
        if not 0 <= whatif.defrag_moves <= 1000:
            errors["defrag_moves"] = _("A whole number of moves from 0 to 1000.")
    try:
        defragmentation(whatif)
    except ValueError:
        errors["defrag"] = _("Say when: scattered, a daily time HH:MM, or both (scattered,02:00).")
    if (whatif.service_percent or 0) >= 100:
        errors["service_percent"] = _("Must be below 100: the service leaves room for training.")
    for field, wanted in (
        ("trace_csv", whatif.trace == TraceSource.CSV),
        ("cluster_json", whatif.cluster == ClusterSource.JSON),
    ):
        upload = files.get(field)
        if wanted and upload is None:
            errors[field] = _("Upload the file.")
        elif wanted and upload.size > MAX_UPLOAD:
            errors[field] = _("At most 20 MB.")
        elif wanted:
            setattr(whatif, field, upload.read().decode("utf-8", errors="replace"))
    if whatif.trace == TraceSource.CSV and whatif.cluster == ClusterSource.TRACE:
        errors["cluster"] = _(
            "An uploaded trace has no cluster of its own: choose this cluster or a spec JSON."
        )
    if whatif.trace == TraceSource.HISTORY and not errors:
        errors |= _history(whatif)
    return whatif, errors or _unfit(whatif)


def _history(whatif: WhatIfRun) -> dict:
    """Export this cluster's last days into the run (see `runs.history`); errors for a window
    too long or empty."""
    if (whatif.days or 0) > MAX_HISTORY_DAYS:
        return {"days": _("At most %(days)s days of history.") % {"days": MAX_HISTORY_DAYS}}
    if not take_history(whatif):
        return {
            "trace": _("No workload was submitted to this cluster in the last %(days)s days.")
            % {"days": f"{whatif.days:g}"}
        }
    return {}


def _unfit(whatif: WhatIfRun) -> dict:
    """Errors for inputs that could not run: a trace that does not read, or asks for queues or
    GPU models the chosen cluster lacks. A trace on its own cluster always fits."""
    if whatif.cluster == ClusterSource.TRACE:
        return {}
    try:
        inputs(whatif)
    except Mismatch as error:
        return {
            "cluster": _("The trace cannot run on the chosen cluster: %(why)s.") % {"why": error}
        }
    except TraceError as error:
        return {"trace_csv": _("The trace cannot be read: %(why)s.") % {"why": error}}
    except SpecError as error:
        return {"cluster_json": _("The cluster spec cannot be read: %(why)s.") % {"why": error}}
    return {}


@operator_page
def whatif_detail(request, pk):
    whatif = get_object_or_404(WhatIfRun.objects.defer("trace_csv", "cluster_json"), pk=pk)
    return render(
        request,
        "whatif/detail.html",
        {"run": whatif, "done": RunState.DONE, "history": TraceSource.HISTORY},
    )


@operator_page
@xframe_options_sameorigin  # the run's page shows the report in an iframe
def whatif_report(request, pk):
    """The run's report, drawn from its results in the reader's language."""
    whatif = get_object_or_404(WhatIfRun.objects.only("pk", "state", "trace", "results"), pk=pk)
    if whatif.state != RunState.DONE:
        raise Http404("No report yet.")
    title = _("What-if %(id)s: %(trace)s") % {"id": pk, "trace": whatif.get_trace_display()}
    page = report.render(whatif.results, title, gettext=_, lang=get_language())
    response = HttpResponse(page, content_type="text/html; charset=utf-8")
    response.headers["Content-Security-Policy"] = SANDBOXED_REPORT
    return response


@operator_page
def whatif_results(request, pk):
    whatif = get_object_or_404(WhatIfRun.objects.only("pk", "state", "results"), pk=pk)
    if whatif.state != RunState.DONE:
        raise Http404("No results yet.")
    response = JsonResponse(whatif.results)
    response["Content-Disposition"] = f'attachment; filename="whatif-{pk}.json"'
    return response


@operator_page
def whatif_status(request, pk):
    """Where the run stands, for a page that opened its live connection after an event."""
    whatif = get_object_or_404(WhatIfRun.objects.only("pk", "state", "progress", "message"), pk=pk)
    return JsonResponse(
        {
            "id": whatif.pk,
            "state": whatif.state,
            "progress": whatif.progress,
            "message": translate(whatif.message),
        }
    )
