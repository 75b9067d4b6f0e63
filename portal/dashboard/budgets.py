"""The operators' budgets and prices, out of Django's admin: every budget with where it stands,
a form for a new one, a page to change each, and each GPU model's weight and price. Budgets go
through the API's serializer (the same checks, the same errors) and every change is audited
with its reason."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _

from portal.cluster.models import GpuModel
from portal.core.access import operator_page
from portal.core.models import audit
from portal.quotas.choices import BudgetWindow
from portal.quotas.models import Budget, GpuRate
from portal.tenancy.models import Tenant
from portal.workloads.api.budgets import BudgetSerializer
from portal.workloads.budgets import standings

FIELDS = ["gpu_hours", "window", "window_days", "hard", "thresholds"]
THRESHOLDS = "80, 100"


def _posted(post, fields) -> tuple[dict, dict]:
    """The form's fields as the serializer takes them, and errors of its own: thresholds are
    typed as "80, 100", the box `hard` is absent when not ticked."""
    data = {key: post[key] for key in fields if post.get(key, "") != ""}
    data["hard"] = "hard" in post
    errors = {}
    if "thresholds" in data:
        try:
            data["thresholds"] = [int(t) for t in data["thresholds"].replace(" ", "").split(",")]
        except ValueError:
            errors["thresholds"] = [_("Whole percentages separated by commas, e.g. 80, 100.")]
    if not post.get("reason", "").strip():
        errors["reason"] = [_("Say why: it is kept in the audit log.")]
    return data, errors


@operator_page
def budgets(request):
    """GET: every budget, a new one's form and the GPU rates; POST: a new budget."""
    data, errors = {"window": BudgetWindow.MONTH, "thresholds": THRESHOLDS}, {}
    if request.method == "POST":
        data = request.POST
        posted, errors = _posted(request.POST, ["tenant", "queue", *FIELDS])
        serializer = BudgetSerializer(data=posted)
        if serializer.is_valid() and not errors:
            with transaction.atomic():
                budget = serializer.save()
                budget.record(request.user, reason=request.POST["reason"].strip()[:200])
            messages.success(request, _("Budget saved: %(budget)s.") % {"budget": budget})
            return redirect("ops-budgets")
        errors = {**serializer.errors, **errors}
    rows = Budget.objects.select_related("tenant", "queue")
    rates = {rate.gpu_model_id: rate for rate in GpuRate.objects.all()}
    models = list(GpuModel.objects.order_by("name"))
    for model in models:
        model.counted = rates.get(model.pk) or GpuRate(gpu_model=model)
    return render(
        request,
        "dashboard/ops_budgets.html",
        {
            "standings": standings(rows),
            "tenants": Tenant.objects.order_by("name"),
            "windows": BudgetWindow.choices,
            "models": models,
            "data": data,
            "errors": errors,
        },
    )


@operator_page
def budget_edit(request, pk):
    """GET: the budget's form; POST: what changed, with a reason."""
    budget = get_object_or_404(Budget.objects.select_related("tenant", "queue"), pk=pk)
    data = {**budget.facts(), "thresholds": ", ".join(map(str, budget.thresholds))}
    errors = {}
    if request.method == "POST":
        data = request.POST
        posted, errors = _posted(request.POST, FIELDS)
        serializer = BudgetSerializer(budget, data=posted, partial=True)
        if serializer.is_valid() and not errors:
            before = budget.facts()
            with transaction.atomic():
                serializer.save().record(request.user, before, request.POST["reason"].strip()[:200])
            messages.success(request, _("Budget saved: %(budget)s.") % {"budget": budget})
            return redirect("ops-budgets")
        errors = {**serializer.errors, **errors}
    [standing] = standings([budget])
    return render(
        request,
        "dashboard/ops_budget_edit.html",
        {
            "budget": budget,
            "standing": standing,
            "windows": BudgetWindow.choices,
            "data": data,
            "errors": errors,
        },
    )


@operator_page
def rate(request, pk):
    """POST: a GPU model's weight against budgets and its price per GPU-hour, audited."""
    model = get_object_or_404(GpuModel, pk=pk)
    if request.method != "POST":
        return redirect("ops-budgets")
    counted = GpuRate.objects.filter(gpu_model=model).first() or GpuRate(gpu_model=model)
    before = {"weight": counted.weight, "price": str(counted.price)}
    counted.weight, counted.price = request.POST.get("weight"), request.POST.get("price")
    reason = request.POST.get("reason", "").strip()
    try:
        if not reason:
            raise ValueError(_("Say why: it is kept in the audit log."))
        counted.full_clean()
    except (ValidationError, ValueError) as refused:  # the field's error, or the reason's
        said = getattr(refused, "message_dict", None) or {"reason": [str(refused)]}
        for field, why in said.items():
            messages.error(request, f"{model}, {field}: {' '.join(why)}")
        return redirect("ops-budgets")
    with transaction.atomic():
        counted.save()
        after = {"weight": counted.weight, "price": str(counted.price)}
        audit("gpu_rate.changed", counted, actor=request.user, before=before, after=after,
              reason=reason[:200])  # fmt: skip
    messages.success(request, _("%(model)s: weight and price saved.") % {"model": model})
    return redirect("ops-budgets")
