"""Operators move a node along its lifecycle from its page: cordon, drain, down, repair, back to
ready. Each move has a confirmation that says what it does to the jobs on the node, naming
each with its tenant and what it would lose, and asks why (audited with the move, shown in
the node's lifecycle); `cluster.checks.move` makes it, as the API's does."""

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.db.models import Sum
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from portal.cluster import checks
from portal.cluster.choices import HEALTH_MOVES, Health
from portal.cluster.models import Node
from portal.cluster.summary import from_eighths, held_eighths
from portal.core.access import operator_page
from portal.core.errors import Conflict
from portal.workloads.checkpoints import work_lost
from portal.workloads.choices import CheckpointPolicy
from portal.workloads.models import Workload
from portal.workloads.recovery import RECOVERABLE

MOVES = {
    "cordon": (Health.CORDONED, gettext_lazy("Cordon")),
    "drain": (Health.DRAINING, gettext_lazy("Drain")),
    "down": (Health.DOWN, gettext_lazy("Take down")),
    "repair": (Health.REPAIRING, gettext_lazy("Send for repair")),
    "ready": (Health.READY, gettext_lazy("Return to service")),
}


def allowed(node: Node) -> list[tuple[str, str]]:
    """The moves the node's lifecycle allows now, as (move, its name)."""
    possible = HEALTH_MOVES[Health(node.health)]
    return [(move, name) for move, (to, name) in MOVES.items() if to in possible]


def jobs_here(node: Node) -> list[Workload]:
    """The jobs holding GPUs on the node, each with how many (`here`: a share as its part of a
    GPU) and its tenant."""
    jobs = list(
        Workload.objects.filter(allocations__node=node)
        .annotate(eighths=Sum(held_eighths("allocations__")))
        .select_related("tenant", "queue")
        .order_by("tenant__name", "name", "pk")
    )
    for job in jobs:
        job.here = from_eighths(job.eighths)
    return jobs


def impact(node: Node, move: str, now=None) -> tuple[str, list[str]]:
    """What the move does, in a sentence, and for each job it interrupts what it loses."""
    now = now or timezone.now()
    jobs = [job for job in jobs_here(node) if job.state in RECOVERABLE]
    tenants = len({job.tenant_id for job in jobs})
    hit = ngettext(
        "%(jobs)d job of %(tenants)d tenant(s) holds GPUs here.",
        "%(jobs)d jobs of %(tenants)d tenant(s) hold GPUs here.",
        len(jobs),
    ) % {"jobs": len(jobs), "tenants": tenants}
    if move == "cordon":
        return _("No new work is placed here; the jobs here run on.") + " " + hit, []
    if move == "ready":
        if node.health == Health.REPAIRING:
            return _(
                "Its agent is sent a health check; the node returns to service once it passes "
                "(its GPUs answer and compute, and nothing else holds them)."
            ), []
        return _("New work is placed here again."), []
    if move == "repair":
        return _(
            "It stays out of service while it is repaired, and returns only once its agent "
            "passes a health check."
        ), []
    if move == "drain":
        deadline = round(settings.WANKA["DRAIN_DEADLINE_S"] / 60)
        said = _(
            "No new work is placed here. Its jobs move to hot spares one by one, saving first "
            "where they save; those still here after %(minutes)d min are moved then, losing the "
            "work since their newest save. Empty, the node goes down."
        ) % {"minutes": deadline}
        return f"{said} {hit}", [_job_line(job, now, saves_first=True) for job in jobs]
    said = _(
        "Its jobs are interrupted now and restart elsewhere from their newest save; the node "
        "takes no work until it is repaired."
    )
    return f"{said} {hit}", [_job_line(job, now, saves_first=False) for job in jobs]


def _job_line(job: Workload, now, saves_first: bool) -> str:
    where = _("%(job)s of %(tenant)s, %(gpus)s GPU(s) here") % {
        "job": job.name,
        "tenant": job.tenant.name,
        "gpus": job.here,
    }
    if saves_first and job.checkpoint_policy != CheckpointPolicy.NONE:
        return _("%(where)s: saves before it moves") % {"where": where}
    minutes = round(work_lost(job, now) / 60)
    return _("%(where)s: loses about %(minutes)d min of work") % {
        "where": where,
        "minutes": minutes,
    }


@operator_page
def node_move(request, pk, move):
    node = get_object_or_404(Node.objects.select_related("leaf__pod__datacenter"), pk=pk)
    if move not in MOVES:
        return redirect("node-page", pk=pk)
    to, name = MOVES[move]
    errors = {}
    if request.method == "POST":
        reason = request.POST.get("reason", "").strip()
        if not reason:
            errors["reason"] = [_("Say why: it is kept in the node's lifecycle.")]
        else:
            try:
                with transaction.atomic():
                    locked = Node.objects.select_for_update().get(pk=pk)
                    checks.move(locked, to, reason[:200], request.user)
            except Conflict as refused:
                messages.error(request, str(refused))
            else:
                messages.success(
                    request, _("%(move)s: done for %(node)s.") % {"move": name, "node": node.name}
                )
            return redirect("node-page", pk=pk)
    said, lines = impact(node, move)
    return render(
        request,
        "dashboard/node_move.html",
        {
            "node": node,
            "move": move,
            "move_name": name,
            "allowed": move in dict(allowed(node)),
            "impact": said,
            "jobs": lines,
            "errors": errors,
            "data": request.POST,
        },
    )
