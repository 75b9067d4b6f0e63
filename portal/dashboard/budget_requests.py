"""Asking for a larger budget: a tenant admin asks from the quota page (which budget, how many
GPU-hours, why); operators decide beside the quota requests (`dashboard.approvals`)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from portal.core.models import audit
from portal.quotas.models import Budget, BudgetRequest
from portal.tenancy.models import membership_allowing


class AskForm(forms.Form):
    budget = forms.ModelChoiceField(queryset=Budget.objects.none(), label=gettext_lazy("Budget"))
    gpu_hours = forms.IntegerField(
        min_value=1, max_value=2**31 - 1, label=gettext_lazy("GPU-hours asked for")
    )
    reason = forms.CharField(max_length=2000, label=gettext_lazy("Reason"))

    def __init__(self, tenant, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["budget"].queryset = tenant.budgets.select_related("tenant", "queue")

    def clean(self):
        data = super().clean()
        budget, hours = data.get("budget"), data.get("gpu_hours")
        if budget and hours is not None and hours <= budget.gpu_hours:
            self.add_error(
                "gpu_hours",
                _("Ask for more than the %(hours)d GPU-hours it has now.")
                % {"hours": budget.gpu_hours},
            )
        return data


@login_required
@require_POST
def ask(request):
    """A tenant admin asks for a larger budget; every refusal names its field."""
    membership = membership_allowing(request.user, "admin")
    form = AskForm(membership.tenant, request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            name = form.fields[field].label if field in form.fields else ""
            messages.error(request, f"{name}: {' '.join(errors)}" if name else " ".join(errors))
        return redirect("quota")
    asked = BudgetRequest.objects.create(
        tenant=membership.tenant, requested_by=request.user, **form.cleaned_data
    )
    audit(
        "budget_request.created",
        asked,
        actor=request.user,
        tenant=membership.tenant,
        budget=asked.budget.facts()["owner"],
        asked=asked.gpu_hours,
    )
    messages.success(request, _("Budget request sent to the operators."))
    return redirect("quota")
