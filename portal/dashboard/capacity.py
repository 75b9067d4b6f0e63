"""The operators' pages that shape queues and cohorts: a queue's settings (the fields the API lets
operators change: cohort, priority, weight, strategy, preemption policy, grace, reclaim deadline)
and a cohort's parent, each with its quotas per GPU model, and a queue's per GPU family. The model
checks them (`Queue.clean`, `Cohort.clean`, the quotas' constraints); a preview says what the new
quotas do to the GPUs the queue holds now; a save needs a reason, is whole or nothing, is audited
with the before and after of what changed, and is handed to the next scheduling cycle."""

from django import forms
from django.contrib import messages
from django.db import models, transaction
from django.db.models import Sum
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal.cluster.models import GpuModel
from portal.core.access import operator_page
from portal.core.models import audit
from portal.core.triggers import trigger_cycle
from portal.quotas.api.serializers import QUEUE_CHANGES
from portal.quotas.models import Cohort, CohortQuota, FamilyQuota, Queue, QueueQuota
from portal.workloads.models import Allocation
from portal.workloads.usage import CHARGED, as_gpus

# A tuple: an inline formset adds its foreign key to a list of fields in place.
QUOTA_FIELDS = ("gpu_model", "guarantee", "nominal", "borrowing_limit", "lending_limit")


class ReasonForm(forms.Form):
    """Why: every change an operator makes on these pages is kept in the audit log with it."""

    reason = forms.CharField(
        max_length=200,
        label=gettext_lazy("Reason (kept in the audit log)"),
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": gettext_lazy("Say why: it is kept in the audit log.")},
    )


class QueueForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = QUEUE_CHANGES  # what operators may change, here as through the API
        labels = {
            "cohort": gettext_lazy("Cohort"),
            "priority": gettext_lazy("Priority"),
            "weight": gettext_lazy("Weight"),
            "strategy": gettext_lazy("Strategy"),
            "reclaim_within_cohort": gettext_lazy("Reclaim within the cohort"),
            "within_cluster_queue": gettext_lazy("Preempt within the queue"),
            "borrow_within_cohort": gettext_lazy("Preempt while borrowing"),
            "max_priority_threshold": gettext_lazy("Highest priority preempted while borrowing"),
            "fair_sharing": gettext_lazy("Fair sharing"),
            "preempt_by_fair_share": gettext_lazy("Preempt by fair share"),
            "preemption_grace_s": gettext_lazy("Grace to save when preempted (s)"),
            "reclaim_deadline_s": gettext_lazy("Reclaim deadline (s)"),
            "straggler_policy": gettext_lazy("A straggler brings"),
            "spans_datacenters": gettext_lazy("Jobs may span data centers"),
        }
        # The model's words for these name other fields by their names in code.
        help_texts = {
            "max_priority_threshold": gettext_lazy(
                "When preempting while borrowing, evict only work of at most this priority "
                "(empty: any of lower priority)"
            ),
            "fair_sharing": gettext_lazy(
                "How preempting while borrowing weighs the two queues' shares: Off (this queue's "
                "share no larger than the other's before), LessThanOrEqualToFinalShare (no "
                "larger than the other's after), LessThanInitialShare (smaller than the other's "
                "before), or the first and, where it finds no room, the second"
            ),
            "preempt_by_fair_share": gettext_lazy(
                "While borrowing, also evict other queues' borrowed work of this queue's "
                "priority or above, as reclaiming within the cohort allows, when fair sharing "
                "lets the shares go"
            ),
        }


class CohortForm(forms.ModelForm):
    class Meta:
        model = Cohort
        fields = ["parent"]
        labels = {"parent": gettext_lazy("Parent cohort")}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["parent"].queryset = Cohort.objects.exclude(pk=self.instance.pk)


class QuotaForm(forms.ModelForm):
    """One GPU model's quota; a quota's model stays what it is, a new row names one."""

    class Meta:
        labels = {
            "gpu_model": gettext_lazy("GPU model"),
            "guarantee": gettext_lazy("Guarantee"),
            "nominal": gettext_lazy("Nominal quota"),
            "borrowing_limit": gettext_lazy("Borrowing limit"),
            "lending_limit": gettext_lazy("Lending limit"),
        }
        help_texts = {
            "borrowing_limit": gettext_lazy("Empty: no limit"),
            "lending_limit": gettext_lazy("Empty: no limit"),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["gpu_model"].disabled = self.instance.pk is not None


def _quotas(model, quota):
    return forms.inlineformset_factory(
        model, quota, form=QuotaForm, fields=QUOTA_FIELDS, extra=1, can_delete=False
    )


QueueQuotas, CohortQuotas = _quotas(Queue, QueueQuota), _quotas(Cohort, CohortQuota)
FAMILY_FIELDS = ("family", "nominal", "borrowing_limit")


class FamilyQuotaForm(forms.ModelForm):
    """One GPU family's quota, above its models'; a quota's family stays what it is, a new row
    names one of the families the GPU models have. Deleting it leaves the models' quotas."""

    class Meta:
        help_texts = {
            "nominal": gettext_lazy("GPUs of the family's models in all, any mix"),
            "borrowing_limit": gettext_lazy("Empty: no limit"),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        families = GpuModel.objects.exclude(family="").order_by("family")
        names = families.values_list("family", flat=True).distinct()
        self.fields["family"] = forms.ChoiceField(
            label=gettext_lazy("GPU family"),
            choices=[("", "---------"), *((name, name) for name in names)],
            disabled=self.instance.pk is not None,
        )


FamilyQuotas = forms.inlineformset_factory(
    Queue, FamilyQuota, form=FamilyQuotaForm, fields=FAMILY_FIELDS, extra=1, can_delete=True
)


def _facts(owner, fields) -> dict:
    """The owner's settings and quotas as the audit keeps them: related objects by name, each
    quota's figures as "H800.nominal"; read from the database."""
    owner = type(owner).objects.get(pk=owner.pk)
    facts = {}
    for name in fields:
        value = getattr(owner, name)
        facts[name] = str(value) if isinstance(value, models.Model) else value
    for quota in owner.quotas.select_related("gpu_model"):
        for name in QUOTA_FIELDS[1:]:
            facts[f"{quota.gpu_model.name}.{name}"] = getattr(quota, name)
    for quota in getattr(owner, "family_quotas", FamilyQuota.objects.none()).all():
        for name in FAMILY_FIELDS[1:]:
            facts[f"{quota.family}.{name}"] = getattr(quota, name)
    return facts


def _held(queue) -> dict[str, float]:
    """GPUs the queue's jobs hold now, per GPU model, as quota counts them (`CHARGED`)."""
    return {
        model: as_gpus(n)
        for model, n in Allocation.objects.filter(workload__queue=queue)
        .values_list("workload__gpu_model__name")
        .annotate(n=Sum(CHARGED))
        .order_by()
    }


def _over_nominal(quotas, held: dict[str, int]) -> list[str]:
    """For each valid quota row whose nominal quota falls below what the queue holds: by how
    much, and what follows."""
    lines = []
    for form in quotas.forms:
        model, nominal = form.cleaned_data.get("gpu_model"), form.cleaned_data.get("nominal")
        over = held.get(model.name, 0) - nominal if model and nominal is not None else 0
        if over > 0:
            lines.append(
                _(
                    "%(model)s: the queue holds %(held)s GPUs now, %(over)s over the new nominal "
                    "quota of %(nominal)s. They count as borrowed from then on: nothing more "
                    "starts there unless it can borrow, and the queues that lent the quota may "
                    "take them back by preemption."
                )
                % {"model": model.name, "held": held[model.name], "over": over, "nominal": nominal}
            )
    return lines


def _edit(request, owner, form_class, formset_class, context, families_class=None):
    """GET: the forms. POST: all of them checked; with `preview`, what the change would do;
    else saved in one transaction with its audit entry and a scheduling cycle after it."""
    data = request.POST if request.method == "POST" else None
    previewing = data is not None and "preview" in data
    before = _facts(owner, form_class._meta.fields)
    form = form_class(data, instance=owner)
    rows = owner.quotas.select_related("gpu_model").order_by("gpu_model__name")
    quotas = formset_class(data, instance=owner, prefix="quotas", queryset=rows)
    # A preview asks for no reason yet: the form keeps what was typed, unchecked.
    reason = ReasonForm(None, initial=data) if previewing else ReasonForm(data)
    held = _held(owner) if isinstance(owner, Queue) else {}
    for quota in quotas.forms:
        quota.held = held.get(quota.instance.gpu_model.name, 0) if quota.instance.pk else None
    families = None
    if families_class is not None:
        families = families_class(data, instance=owner, prefix="families")
        members = GpuModel.objects.values_list("name", "family")
        for quota in families.forms:
            family = quota.instance.family
            quota.held = sum(held.get(m, 0) for m, f in members if f == family) if family else None
    impact = []
    formsets = [quotas] if families is None else [quotas, families]
    if data is not None and all([form.is_valid(), *(f.is_valid() for f in formsets)]):
        impact = _over_nominal(quotas, held)
        if not previewing and reason.is_valid():
            with transaction.atomic():
                form.save()
                for formset in formsets:
                    formset.save()
                changed = _changed(before, _facts(owner, form_class._meta.fields))
                if changed:
                    action = f"{owner._meta.model_name}.changed"
                    tenant = getattr(owner, "tenant", None)
                    why = reason.cleaned_data["reason"]
                    audit(
                        action,
                        owner,
                        actor=request.user,
                        tenant=tenant,
                        changed=changed,
                        reason=why,
                    )
                    trigger_cycle()
            _saved(request, owner, changed, impact)
            return redirect("queues")
    return render(
        request,
        "dashboard/ops_capacity_edit.html",
        {
            **context,
            "form": form,
            "quotas": quotas,
            "families": families,
            "reason": reason,
            "impact": impact,
            "previewed": previewing,
            "history": {"object_type": owner._meta.label_lower, "object_id": owner.pk},
        },
    )


def _changed(before: dict, after: dict) -> dict:
    return {
        key: [before.get(key), after.get(key)]
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    }


def _saved(request, owner, changed: dict, impact: list[str]) -> None:
    if not changed:
        messages.info(request, _("%(owner)s: nothing changed.") % {"owner": owner})
        return
    messages.success(
        request,
        _("%(owner)s saved (%(fields)s); the next scheduling cycle works with it.")
        % {"owner": owner, "fields": ", ".join(changed)},
    )
    for line in impact:
        messages.warning(request, line)


@operator_page
def queue_edit(request, pk):
    queue = get_object_or_404(Queue.objects.select_related("tenant", "region"), pk=pk)
    return _edit(request, queue, QueueForm, QueueQuotas, {"queue": queue}, FamilyQuotas)


@operator_page
def cohort_edit(request, pk):
    cohort = get_object_or_404(Cohort.objects.select_related("parent"), pk=pk)
    context = {
        "cohort": cohort,
        "members": cohort.queues.select_related("tenant").order_by("tenant__slug", "name"),
        "children": cohort.children.order_by("name"),
    }
    return _edit(request, cohort, CohortForm, CohortQuotas, context)
