"""What the forms offer, driven by the queue: for each of a tenant's queues its region and the
GPU models it can ask for, each with how much of its quota is left and how many GPUs are free
now, so that a form's defaults are always ones its queue can take (the page's script swaps the
models when another queue is chosen, `static/js/queue_choices.js`)."""

from collections import Counter, defaultdict

from django.db.models import CharField, Count, Q, Sum, Value
from django.db.models.functions import Concat
from django.template.defaultfilters import floatformat
from django.utils.translation import gettext as _

from portal.cluster.choices import Health
from portal.cluster.models import GpuModel, Node
from portal.dashboard.queues import gpus_held
from portal.quotas.engine import family_models
from portal.workloads.models import Allocation

REGION = "leaf__pod__datacenter__region_id"


def _gpus(nodes) -> Counter:
    rows = nodes.values_list(REGION, "gpu_model__name").annotate(n=Sum("gpu_count")).order_by()
    return Counter({(region, model): n for region, model, n in rows})


def free_now() -> Counter:
    """Whole GPUs free now per (region id, GPU model): on ready nodes kept for ordinary work."""
    nodes = Node.objects.filter(health=Health.READY, spare=False)
    free = _gpus(nodes)
    # A GPU that shares or MIG instances hold is not free, however many of them it holds.
    gpu = Concat("node_id", Value(":"), "gpu_index", output_field=CharField())
    held = (
        Allocation.objects.filter(node__in=nodes)
        .values_list(f"node__{REGION}", "node__gpu_model__name")
        .annotate(
            whole=Count("id", filter=Q(slices=0)),
            shared=Count(gpu, filter=Q(slices__gt=0), distinct=True),
        )
        .order_by()
    )
    free.subtract({(region, model): whole + shared for region, model, whole, shared in held})
    return free


def queue_choices(queues, quota_request: bool = False, families: bool = False) -> dict:
    """Per queue name: its region and its GPU models as (name, label) pairs, the default first.
    A job or a service asks for a model of the queue's quota (left of it, free now); a quota
    request for any model its region has, or any family of them (the quota now, the region's
    GPUs). With `families`, also the families a job may accept (`_families`)."""
    free, held = free_now(), gpus_held()
    region_gpus = _gpus(Node.objects.exclude(health=Health.DOWN)) if quota_request else None
    named = quota_request or families
    family_of = dict(GpuModel.objects.values_list("name", "family")) if named else {}
    queues = list(queues)
    families, found = family_models(queues), {}
    for queue in queues:
        quotas = {quota.gpu_model.name: quota.nominal for quota in queue.quotas.all()}
        for family in queue.family_quotas.all():
            for model in families.get(family.family, ()):
                quotas.setdefault(model, family.nominal)
        if quota_request:
            models = sorted(
                (model for (region, model), n in region_gpus.items() if region == queue.region_id),
                key=lambda model: (model not in quotas, model),
            )
            labels = [
                _("%(model)s: quota %(quota)d, %(gpus)d in the region")
                % {
                    "model": model,
                    "quota": quotas.get(model, 0),
                    "gpus": region_gpus[queue.region_id, model],
                }
                for model in models
            ]
            of_family = defaultdict(list)
            for model in models:
                if family_of.get(model):
                    of_family[family_of[model]].append(model)
            held_quota = {f.family: f.nominal for f in queue.family_quotas.all()}
            for family, members in sorted(of_family.items()):
                models.append(family)
                labels.append(
                    _("%(family)s family (%(models)s): quota %(quota)d, %(gpus)d in the region")
                    % {
                        "family": family,
                        "models": ", ".join(members),
                        "quota": held_quota.get(family, 0),
                        "gpus": sum(region_gpus[queue.region_id, m] for m in members),
                    }
                )
        else:
            models = sorted(quotas, key=lambda model: (-quotas[model], model))
            labels = [
                _("%(model)s: %(left)s of %(quota)d left in quota, %(free)d free now")
                % {
                    "model": model,
                    "left": floatformat(max(0, quotas[model] - held[queue.pk, model]), "-2"),
                    "quota": quotas[model],
                    "free": max(0, free[queue.region_id, model]),
                }
                for model in models
            ]
        found[queue.name] = {
            "region": queue.region.name,
            "spans": queue.spans_datacenters,
            "models": list(zip(models, labels, strict=True)),
            "families": [] if quota_request else _families(models, family_of),
        }
    return found


def _families(models: list[str], family_of: dict[str, str]) -> list[tuple[str, str]]:
    """The GPU families of which a queue offers two models or more, as (name, label) pairs:
    a job may accept a family (`gpu_models: ["hopper"]`), its models the fastest first."""
    members = defaultdict(list)
    for model in models:
        if family_of.get(model):
            members[family_of[model]].append(model)
    return [
        (family, _("%(family)s family (%(models)s)") % {"family": family, "models": ", ".join(of)})
        for family, of in sorted(members.items())
        if len(of) > 1
    ]


def with_defaults(data, choices: dict, fill: bool = True) -> tuple[dict, list]:
    """The models to offer for the queue `data` names; with `fill` (a form not yet posted),
    `data` with a queue, a GPU model the queue can take and its region where it names none
    that fits, so that the form's defaults are accepted as they are."""
    data = dict(data.items())
    if fill and data.get("queue") not in choices:
        data["queue"] = next(iter(choices), "")
    chosen = choices.get(data.get("queue"), {"region": "", "models": []})
    if fill and data.get("gpu_model") not in {name for name, _label in chosen["models"]}:
        data["gpu_model"] = chosen["models"][0][0] if chosen["models"] else ""
    if fill:
        data["region"] = chosen["region"]
    return data, chosen["models"]
