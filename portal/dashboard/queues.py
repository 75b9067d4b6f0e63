"""The queues page: per queue and GPU model (and GPU family with a quota of its own) its
guarantee and nominal quota against the GPUs it holds, borrows and lends, the work waiting for it
and the GPU-hours it used this week and this month, as bars; for operators also the cohort tree
with each queue's fair share as the engine counts it (Slurm's `sshare`, for cohorts). A tenant's
members see their own queues, and what they lend as a figure, never to whom. Operators filter the
queues by tenant and read them 50 at a time; the tree shows them all.

A fixed number of queries whatever the fleet's size: the queues, the engine's view of every
queue and cohort, GPUs held and pending work per queue and model, two usage windows.
"""

from collections import Counter, defaultdict
from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Min, Sum
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.dashboard.paging import paged
from portal.quotas import engine
from portal.quotas.models import Cohort, Queue
from portal.tenancy.models import membership_of
from portal.workloads.choices import State
from portal.workloads.models import Allocation, Workload
from portal.workloads.usage import CHARGED, as_gpus, held, usage_windows
from scheduler.engine.model import SLICES
from scheduler.engine.quota import QuotaLedger
from scheduler.mig import profiles


def gpus_held() -> Counter:
    """GPUs held now per (queue id, GPU model), each allocation counted as it is charged (a
    share as its share, a MIG instance as its profile's)."""
    held = (
        Allocation.objects.values_list("workload__queue_id", "workload__gpu_model__name")
        .annotate(n=Sum(CHARGED))
        .order_by()
    )
    return Counter({(queue_id, gpu_model): as_gpus(n) for queue_id, gpu_model, n in held})


class Tree:
    """Every queue and cohort as the engine sees them, with the GPUs held now (`gpus`, per
    queue id and GPU model) charged to the engine's own quota ledger."""

    def __init__(self, gpus: Counter, queues=None, shares: bool = False):
        """`queues`: every Queue, read `engine.with_quotas`, when the caller has them;
        `shares`: the caller shows fair shares, weighed by the GPU models' worth."""
        self.queues = {queue.id: queue for queue in engine.queues(queues)}
        self.cohorts = {cohort.name: cohort for cohort in engine.cohorts()}
        weights = engine.weights() if shares else {}
        worth = engine.worth(weights)
        self.ledger = QuotaLedger(self.queues.values(), self.cohorts.values(), worth)
        # GPU models the ledger counts as the median of those with a worth (none when no model
        # has a worth: then every model counts apart).
        self.without_worth = sorted(n for n, w in weights.items() if not w) if worth else []
        for (queue_id, gpu_model), n in gpus.items():
            self.ledger.charge(queue_id, gpu_model, n)

    def used(self, queue_id: int, gpu_model: str) -> int:
        return self.ledger.usage[queue_id, gpu_model]

    def root(self, cohort: str) -> str:
        """The root of a cohort's tree (a cycle, which the engine cuts, ends where it closes)."""
        seen = {cohort}
        while (parent := self.cohorts[cohort].parent if cohort in self.cohorts else None) and (
            parent not in seen
        ):
            seen.add(parent)
            cohort = parent
        return cohort

    def lent(self) -> dict[tuple[int, str], float]:
        """GPUs of each queue's idle quota that others in its cohort tree use now: what the
        tree's queues borrow, less what its cohorts' own quota covers, split over the queues
        with idle quota in proportion to what each may lend (above its guarantee, within its
        lending limit)."""
        borrowed, idle = defaultdict(int), defaultdict(dict)
        for cohort in self.cohorts.values():
            for quota in cohort.quotas:
                borrowed[self.root(cohort.name), quota.gpu_model] -= quota.nominal
        for queue in self.queues.values():
            if queue.cohort is None:
                continue
            root = self.root(queue.cohort)
            for quota in queue.quotas:
                used = self.used(queue.id, quota.gpu_model)
                borrowed[root, quota.gpu_model] += max(0, used - quota.nominal)
                spare = quota.nominal - max(used, quota.guarantee)
                if quota.lending_limit is not None:
                    spare = min(spare, quota.lending_limit)
                if spare > 0:
                    idle[root, quota.gpu_model][queue.id] = spare
        shares = {}
        for key, lenders in idle.items():
            total = sum(lenders.values())
            for queue_id, spare in lenders.items():
                shares[queue_id, key[1]] = min(spare, max(0, borrowed[key]) * spare / total)
        return shares


QUEUE_KEYS = ("queue_id", "gpu_model")


def queue_rows(queues, tree: Tree, holding=None, now=None) -> list[dict]:
    """One row per queue of `queues` (Queue objects with their quotas) and GPU model of its
    quota: the figures (given `holding`, `usage.held`'s rows by QUEUE_KEYS, also the GPU-hours
    of this week and this month, in the active time zone), and the bar's segments and marks
    in % of its length."""
    now = now or timezone.now()
    local = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    month, week = local.replace(day=1), local - timedelta(days=local.weekday())
    ids = {queue.pk for queue in queues}
    workloads = Workload.objects.filter(queue_id__in=ids)
    windows = {}
    if holding is not None:
        holding = [row for row in holding if row[0][0] in ids]
        windows = usage_windows(workloads, (week, month), now, QUEUE_KEYS, now, holding)
    used_since = {
        since: {(row["queue_id"], row["gpu_model"]): row["gpu_hours"] for row in rows}
        for since, rows in windows.items()
    }
    # Waiting work per queue and the model it was submitted for; and per queue, (that model,
    # the models it accepts, GPUs, jobs) of the work that accepts several, named as also
    # fitting the rows of the others.
    waiting: dict[tuple, dict] = {}
    several = defaultdict(list)
    for row in (
        workloads.filter(state=State.PENDING)
        .values("queue_id", "gpu_model__name", "gpu_model__memory_gb", "accepts", "slices", "mig")
        .annotate(gpus=Sum("gpus"), jobs=Count("id"), oldest=Min("submitted_at"))
        .order_by()
    ):
        row["gpus"] = _asked(row)
        key = (row["queue_id"], row["gpu_model__name"])
        if key in waiting:
            sums = waiting[key]
            sums["gpus"] += row["gpus"]
            sums["jobs"] += row["jobs"]
            sums["oldest"] = min(sums["oldest"], row["oldest"])
        else:
            waiting[key] = row
        if len(row["accepts"]) > 1:
            several[key[0]].append((key[1], set(row["accepts"]), row["gpus"], row["jobs"]))
    lent = tree.lent()
    families = engine.family_models(queues)
    for sums in waiting.values():
        sums["gpus"] = as_gpus(sums["gpus"])

    def row(queue, name, quota, keys, lends=0, **extra):
        used = sum(tree.used(*key) for key in keys)
        pending = [waiting[key] for key in keys if key in waiting]
        demand = sum(p["gpus"] or 0 for p in pending)
        models = {model for _, model in keys}
        also = [
            (g, n) for m, accepts, g, n in several[queue.pk] if m not in models and accepts & models
        ]
        guarantee = getattr(quota, "guarantee", 0)
        scale = max(used + lends + demand, quota.nominal, 1) * 1.1
        guaranteed = min(used, guarantee)
        segments = (
            ("g", guaranteed),
            ("n", min(used, quota.nominal) - guaranteed),
            ("b", max(0, used - quota.nominal)),
            ("l", lends),
            ("p", demand),
        )
        return {
            "queue": queue,
            "gpu_model": name,
            "quota": quota,
            "guarantee": guarantee,
            "used": used,
            "borrowed": max(0, used - quota.nominal),
            "lent": lends,
            "pending_gpus": demand,
            "pending_jobs": sum(p["jobs"] for p in pending),
            "oldest": min((p["oldest"] for p in pending), default=None),
            "also_jobs": sum(n for _, n in also),
            "also_gpus": as_gpus(sum(g for g, _ in also)),
            "week_hours": sum(used_since.get(week, {}).get(key, 0.0) for key in keys),
            "month_hours": sum(used_since.get(month, {}).get(key, 0.0) for key in keys),
            "segments": [(kind, 100 * n / scale) for kind, n in segments if n],
            "marks": [100 * guarantee / scale, 100 * quota.nominal / scale],
            **extra,
        }

    rows = []
    for queue in queues:
        for quota in queue.quotas.all():
            key = (queue.pk, quota.gpu_model.name)
            rows.append(row(queue, key[1], quota, [key], round(lent.get(key, 0))))
        own = {quota.gpu_model.name for quota in queue.quotas.all()}
        for quota in queue.family_quotas.all():
            models = families.get(quota.family, ())
            keys = [(queue.pk, model) for model in models]
            family = row(queue, quota.family, quota, keys, family=models)
            # The cohort tree counts each GPU once: here those of its models without a row.
            alone = row(queue, quota.family, quota, [k for k in keys if k[1] not in own])
            borrowed_there = sum(
                r["borrowed"] for r in rows if r["queue"] is queue and r["gpu_model"] in models
            )
            family["tree"] = {**alone, "borrowed": max(0, family["borrowed"] - borrowed_there)}
            rows.append(family)
    return rows


def _asked(row: dict) -> float:
    """The GPUs a group of waiting jobs asks for, as quota charges them: a share its eighths,
    a MIG job its profile's charge (`scheduler.mig.Profile.charge`), else its whole GPUs."""
    if row["mig"]:
        found = profiles(row["gpu_model__name"], row["gpu_model__memory_gb"]).get(row["mig"])
        return row["jobs"] * (found.charge if found else 1.0)
    if row["slices"]:
        return row["jobs"] * row["slices"] / SLICES
    return row["gpus"]


def cohort_tree(tree: Tree, rows: list[dict]) -> list[dict]:
    """The cohort tree as rows in depth-first order, each cohort followed by its child
    cohorts and queues: `sshare`'s columns for cohorts (weight, its share of the siblings'
    weights, GPUs held, GPU-hours this month and their share among the siblings) and the
    engine's fair share of each queue: its weighted dominant share of borrowed capacity, the
    lower of which borrows first. Queues in no cohort come last, at the top."""
    by_queue = defaultdict(lambda: {"used": 0, "borrowed": 0, "pending": 0, "hours": 0.0})
    for row in rows:
        figures = by_queue[row["queue"].pk]
        row = row.get("tree", row)  # a family's row: only what its models' rows leave out
        figures["used"] += row["used"]
        figures["borrowed"] += row["borrowed"]
        figures["pending"] += row["pending_gpus"]
        figures["hours"] += row["month_hours"]
    children = defaultdict(list)
    for cohort in sorted(tree.cohorts.values(), key=lambda c: c.name):
        top = tree.root(cohort.name) == cohort.name
        children[None if top else cohort.parent].append(cohort.name)
    members = defaultdict(list)
    for queue in sorted(tree.queues.values(), key=lambda q: q.name):
        members[queue.cohort].append(queue)

    def totals(cohort: str) -> dict:
        sums = {"used": 0, "borrowed": 0, "pending": 0, "hours": 0.0}
        for queue in members[cohort]:
            for key in sums:
                sums[key] += by_queue[queue.id][key]
        for child in children[cohort]:
            for key, value in totals(child).items():
                sums[key] += value
        return sums

    out = []

    def walk(cohort: str | None, depth: int) -> None:
        entries = [("cohort", name, None, totals(name)) for name in children[cohort]]
        entries += [("queue", q, q.weight, by_queue[q.id]) for q in members[cohort]]
        weights = sum(weight or 0 for _, _, weight, _ in entries) or 1.0
        hours = sum(figures["hours"] for *_, figures in entries) or 1.0
        for kind, item, weight, figures in entries:
            row = {"kind": kind, "depth": depth, "usage_share": figures["hours"] / hours, **figures}
            if kind == "cohort":
                out.append({**row, "name": item})
                walk(item, depth + 1)
            else:
                share = tree.ledger.share(item)
                out.append(
                    {
                        **row,
                        "name": item.name,
                        "pk": item.id,
                        "weight": weight,
                        "norm_share": weight / weights,
                        "fair_share": share,
                    }
                )

    walk(None, 0)
    return out


@login_required
def queues_page(request):
    membership = membership_of(request.user)
    if membership is None and not request.user.is_staff:
        raise PermissionDenied(_("Only tenants' members and operators see queues."))
    now = timezone.now()
    # Every queue and every queue's GPUs held now, read once: the tree's ledger counts them,
    # the rows show the visible queues and take their GPU-hours from them.
    queues = list(engine.with_quotas(Queue.objects.order_by("tenant__name", "name")))
    holding = list(held(Allocation.objects.all(), QUEUE_KEYS, now))
    gpus = Counter()
    for key, _start, _end, _hours, n in holding:
        gpus[key] += n
    tree = Tree(gpus, queues, shares=True)
    tenants = sorted({queue.tenant.slug: queue.tenant for queue in queues}.items())
    tenant = request.GET.get("tenant", "") if membership is None else ""
    if membership is not None or tenant:
        mine = membership.tenant.slug if membership else tenant
        queues = [queue for queue in queues if queue.tenant.slug == mine]
    page, query = paged(request, queues)
    rows = queue_rows(list(page), tree, holding, now)
    context = {
        "rows": rows,
        "page": page,
        "query": query,
        "tenants": tenants,
        "tenant": tenant,
        "now": now,
        "operator": membership is None,
    }
    if membership is None:
        context["tree"] = cohort_tree(tree, rows)
        context["without_worth"] = ", ".join(tree.without_worth)
        cohort_ids = dict(Cohort.objects.values_list("name", "pk"))  # for the links to edit them
        for row in context["tree"]:
            row.setdefault("pk", cohort_ids.get(row["name"]))
    return render(request, "dashboard/queues.html", context)
