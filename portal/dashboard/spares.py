"""The operators' page of hot spares: per pod its target (`Pod.hot_spares`) against the spare
nodes it has now, ready for a recovery (ready, connected, idle), holding GPUs, or unhealthy or
offline, with a warning where fewer are ready than the target; and the spare nodes themselves.
Operators change a pod's target, and keep a node as a spare or give it back to ordinary work
(`Node.set_spare`), each with a reason, audited. Three queries whatever the number of pods."""

from collections import defaultdict
from datetime import time

from django import forms
from django.contrib import messages
from django.db import transaction
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_GET

from portal.cluster.models import USABLE, Node, Pod
from portal.core.access import operator_page
from portal.core.errors import Conflict
from portal.core.models import audit
from portal.core.triggers import trigger_cycle
from portal.dashboard.capacity import ReasonForm

NO_NODES = {"ready": 0, "busy_spares": 0, "unhealthy": 0, "candidates": 0}


def pool_counts() -> dict[int, dict]:
    """Per pod id: its spare nodes ready for a recovery, holding GPUs, and unhealthy or
    offline, and the ordinary nodes that could join (usable, not spare); one query."""
    spare = Q(spare=True)
    rows = (
        Node.objects.with_busy()
        .values("leaf__pod")
        .annotate(
            ready=Count("pk", filter=spare & USABLE),
            busy_spares=Count("pk", filter=spare & Q(busy=True)),
            unhealthy=Count("pk", filter=spare & Q(busy=False) & ~USABLE),
            candidates=Count("pk", filter=~spare & USABLE),
        )
        .order_by()
    )
    counts = defaultdict(lambda: NO_NODES)
    counts.update((row.pop("leaf__pod"), row) for row in rows)
    return counts


@operator_page
@require_GET
def spare_pools(request):
    counts = pool_counts()
    pods = list(Pod.objects.select_related("datacenter").order_by("datacenter__name", "name"))
    for pod in pods:
        pod.counts = counts[pod.pk]
        pod.short = max(0, pod.hot_spares - pod.counts["ready"])
        pod.defrag_when = defrag_when(pod)
    spares = (
        Node.objects.filter(spare=True)
        .select_related("leaf__pod__datacenter")
        .annotate(gpus_held=Count("allocations"))
        .order_by("leaf__pod__datacenter__name", "leaf__pod__name", "name")
    )
    return render(
        request,
        "dashboard/ops_spares.html",
        {"pods": pods, "spares": spares, "node_form": NodeSpareForm()},
    )


class PodTargetForm(forms.ModelForm):
    class Meta:
        model = Pod
        fields = ["hot_spares", "defrag", "defrag_at", "defrag_when_scattered", "defrag_moves"]
        labels = {"hot_spares": gettext_lazy("Target: hot spares kept")}
        widgets = {"defrag_at": forms.TimeInput(attrs={"type": "time"}, format="%H:%M")}


@operator_page
def pod_target(request, pk):
    """GET: the pod's pool, its target and its defragmentation; POST: new settings, with a
    reason, audited."""
    pod = get_object_or_404(Pod.objects.select_related("datacenter"), pk=pk)
    before = {name: getattr(pod, name) for name in PodTargetForm.Meta.fields}
    when = defrag_when(pod)  # as saved: the form's checks change the instance
    data = request.POST if request.method == "POST" else None
    form, reason = PodTargetForm(data, instance=pod), ReasonForm(data)
    if data is not None and all([form.is_valid(), reason.is_valid()]):
        changed = {
            name: [_plain(was), _plain(getattr(pod, name))]
            for name, was in before.items()
            if getattr(pod, name) != was
        }
        if not changed:
            messages.info(request, _("%(pod)s: nothing changed.") % {"pod": pod})
            return redirect("ops-spares")
        with transaction.atomic():
            form.save()
            why = reason.cleaned_data["reason"]
            audit("pod.changed", pod, actor=request.user, changed=changed, reason=why)
        messages.success(request, _pod_words(pod, before["hot_spares"]))
        if "defrag" in changed or pod.defrag:
            trigger_cycle()  # the next cycle defragments by the new settings
        return redirect("ops-spares")
    counts = pool_counts()[pod.pk]
    return render(
        request,
        "dashboard/ops_spare_change.html",
        {"pod": pod, "counts": counts, "forms": [form, reason], "defrag_when": when},
    )


def _plain(value):
    """A setting as the audit log keeps it (JSON): a time of day as "02:00"."""
    return value.strftime("%H:%M") if isinstance(value, time) else value


def _pod_words(pod: Pod, spares_before: int) -> str:
    said = _("%(pod)s now keeps %(after)s hot spares (it kept %(before)s).") % {
        "pod": pod,
        "after": pod.hot_spares,
        "before": spares_before,
    }
    if not pod.defrag:
        return said
    return " ".join([said, _("Defragmentation: %(when)s.") % {"when": defrag_when(pod)}])


def defrag_when(pod: Pod) -> str:
    """When the pod is defragmented and how much, in words ("" when it is not)."""
    if not pod.defrag:
        return ""
    when = []
    if pod.defrag_at:
        when.append(_("daily from %(at)s for an hour") % {"at": pod.defrag_at.strftime("%H:%M")})
    if pod.defrag_when_scattered:
        when.append(_("whenever free GPUs are scattered"))
    moves = ngettext(
        "at most %(moves)s move an hour", "at most %(moves)s moves an hour", pod.defrag_moves
    ) % {"moves": pod.defrag_moves}
    if len(when) == 2:
        when = [_("%(first)s, and %(second)s") % {"first": when[0], "second": when[1]}]
    return _("%(when)s; %(moves)s") % {"when": when[0], "moves": moves}


class NodeSpareForm(ReasonForm):
    node = forms.CharField(max_length=64, label=gettext_lazy("Node name"))
    spare = forms.TypedChoiceField(
        label=gettext_lazy("Change"),
        choices=[
            ("yes", gettext_lazy("Keep it as a hot spare (fault recovery only)")),
            ("no", gettext_lazy("Give it back to ordinary work")),
        ],
        coerce=lambda value: value == "yes",
    )
    field_order = ["node", "spare", "reason"]

    def clean_node(self):
        name = self.cleaned_data["node"].strip()
        self.found = Node.objects.select_related("leaf__pod").filter(name=name).first()
        if self.found is None:
            raise forms.ValidationError(_("No node is called %(name)s.") % {"name": name})
        return name


@operator_page
def node_spare(request):
    """GET: the form, filled from the query (a spare's row links here); POST: the change, or
    the reason it cannot be made."""
    if request.method != "POST":
        form = NodeSpareForm(initial=request.GET.dict())
        return render(request, "dashboard/ops_spare_change.html", {"forms": [form]})
    form = NodeSpareForm(request.POST)
    if form.is_valid():
        node, spare = form.found, form.cleaned_data["spare"]
        try:
            with transaction.atomic():
                changed = node.set_spare(spare, request.user, form.cleaned_data["reason"])
                if changed and not spare:
                    trigger_cycle()  # its GPUs are for ordinary work again
        except Conflict:
            form.add_error(
                "node",
                _(
                    "%(node)s holds GPUs of a job, and a spare must be free for a recovery: "
                    "drain it first, or choose an idle node."
                )
                % {"node": node},
            )
        else:
            messages.success(request, _spare_words(node, spare, changed))
            return redirect("ops-spares")
    return render(request, "dashboard/ops_spare_change.html", {"forms": [form]})


def _spare_words(node, spare: bool, changed: bool) -> str:
    facts = {"node": node, "pod": node.leaf.pod}
    if not changed:
        return _("%(node)s: nothing changed.") % facts
    if spare:
        return _("%(node)s is now a hot spare of %(pod)s.") % facts
    return _("%(node)s is back in ordinary work; it left the spares of %(pod)s.") % facts
