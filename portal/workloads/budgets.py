"""Budgets at work: what each has used of its window (weighted per GPU model), what it leaves
the engine, its burn over the last day and when it runs out at that burn, and the warnings as
its use crosses its thresholds."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from portal.core.live import publish_tenant
from portal.quotas.choices import BudgetWindow
from portal.quotas.models import Budget, BudgetAlert, GpuRate, Queue
from portal.workloads.models import Workload
from portal.workloads.usage import usage_rows
from scheduler import engine
from scheduler.sim.budgets import BudgetSpec
from scheduler.words import phrase

OF_QUEUE, OF_TENANT = phrase("queue {queue}"), phrase("tenant {tenant}")  # whose budget
BURN_OVER = timedelta(hours=24)  # the burn rate is that of the last day
KEYS = ("tenant_id", "queue_id", "gpu_model")
MONTH_S = 30.44 * 86400  # a month of the simulated clock


@dataclass(frozen=True)
class Standing:
    """Where one budget stands at `now`, in weighted GPU-hours."""

    budget: Budget
    now: datetime
    since: datetime
    until: datetime
    used: float
    burn: float | None  # an hour, over the last day; None when not asked for

    @property
    def left(self) -> float:
        return self.budget.gpu_hours - self.used

    @property
    def percent(self) -> float:
        if self.budget.gpu_hours <= 0:
            return 100.0 if self.used > 0 else 0.0
        return 100 * self.used / self.budget.gpu_hours

    @property
    def runs_out_at(self) -> datetime | None:
        """When the budget is spent at the current burn: now if it is; None at no burn, or at
        one so small that it never is (past any date: a few stray GPU-seconds an hour)."""
        if self.left <= 0:
            return self.now
        if not self.burn or self.burn < 0:
            return None
        try:
            return self.now + timedelta(hours=self.left / self.burn)
        except OverflowError:
            return None

    @property
    def lasts(self) -> bool:
        """Whether it holds at the current burn: a calendar month until it ends; a rolling
        window (which always ends now) while a window's worth of that burn fits in it."""
        if self.budget.window == BudgetWindow.ROLLING:
            hours = self.budget.window_days * 24
            return not self.burn or self.burn * hours <= self.budget.gpu_hours
        out = self.runs_out_at
        return out is None or (self.until > self.now and out >= self.until)


def weights() -> dict[str, float]:
    """What a GPU-hour of each GPU model counts against budgets; 1 where no rate is set."""
    return dict(GpuRate.objects.values_list("gpu_model__name", "weight"))


def _weighted(rows, budget: Budget, weight: dict[str, float]) -> float:
    return sum(
        row["gpu_hours"] * weight.get(row["gpu_model"], 1.0)
        for row in rows
        if row["tenant_id"] == budget.tenant_id
        and (budget.queue_id is None or row["queue_id"] == budget.queue_id)
    )


def standings(budgets, now: datetime | None = None, burn: bool = True) -> list[Standing]:
    """Where each of `budgets` stands: one usage pass per distinct window start, and one
    more for the burn of the last day."""
    now = now or timezone.now()
    budgets = list(budgets)
    if not budgets:
        return []
    weight = weights()
    windows = {budget.pk: budget.window_at(now) for budget in budgets}
    used: dict[int, float] = {}
    for since in {since for since, _ in windows.values()}:
        covered = [b for b in budgets if windows[b.pk][0] == since]
        rows = _rows({b.tenant_id for b in covered}, since, now)
        used.update({b.pk: _weighted(rows, b, weight) for b in covered})
    burns: dict[int, float] = {}
    if burn:
        rows = _rows({b.tenant_id for b in budgets}, now - BURN_OVER, now)
        hours = BURN_OVER.total_seconds() / 3600
        burns = {b.pk: _weighted(rows, b, weight) / hours for b in budgets}
    return [Standing(b, now, *windows[b.pk], used[b.pk], burns.get(b.pk)) for b in budgets]


def _rows(tenant_ids: set[int], since: datetime, now: datetime) -> list[dict]:
    return usage_rows(Workload.objects.filter(tenant_id__in=tenant_ids), since, now, KEYS, now)


def engine_budgets(now: datetime) -> tuple[engine.Budget, ...]:
    """Every budget as the engine sees it, named as reasons name queues (`tenant/queue`);
    a query when there is none."""
    return tuple(seen for _, seen in _as_engine(now))


def replayed(now: datetime) -> tuple[BudgetSpec, ...]:
    """Every budget as the simulator replays it from `now` (a what-if on this cluster): what
    its window has used so far and, for a calendar month, how long until it ends; the months
    after that are taken as 30.44 days each (the simulated clock has no calendar)."""
    found = []
    for budget, seen in _as_engine(now):
        if budget.window == BudgetWindow.ROLLING:
            found.append(BudgetSpec(seen, budget.window_days * 86400.0, rolling=True))
        else:
            ends_in = (budget.window_at(now)[1] - now).total_seconds()
            found.append(BudgetSpec(seen, MONTH_S, first_ends_in_s=ends_in))
    return tuple(found)


def _as_engine(now: datetime) -> list[tuple[Budget, engine.Budget]]:
    """Each budget with the engine's view of it."""
    budgets = list(Budget.objects.select_related("tenant", "queue"))
    if not budgets:
        return []
    queues: dict[int, list[int]] = {}
    for tenant_id, queue_id in Queue.objects.filter(
        tenant_id__in={b.tenant_id for b in budgets}
    ).values_list("tenant_id", "id"):
        queues.setdefault(tenant_id, []).append(queue_id)
    weight = tuple(sorted(weights().items()))
    found = []
    for standing in standings(budgets, now, burn=False):
        budget = standing.budget
        if budget.queue_id:
            name = OF_QUEUE.format(queue=f"{budget.tenant.slug}/{budget.queue.name}")
            ids = (budget.queue_id,)
        else:
            name = OF_TENANT.format(tenant=budget.tenant.slug)
            ids = tuple(queues.get(budget.tenant_id, ()))
        month = budget.window == BudgetWindow.MONTH
        seen = engine.Budget(
            name,
            ids,
            float(budget.gpu_hours),
            standing.used,
            hard=budget.hard,
            window=budget.window_words,
            weights=weight,
            ends_at=standing.until.timestamp() if month else None,
        )
        found.append((budget, seen))
    return found


def warn(now: datetime | None = None) -> list[BudgetAlert]:
    """Record each threshold a budget's use has crossed in its window, once per window, and
    tell the tenant of the highest one (`budget.threshold`, the `budget` notification topic)
    with the date the budget runs out at the current burn."""
    alerts = []
    budgets = Budget.objects.exclude(thresholds=[]).select_related("tenant", "queue")
    for standing in standings(budgets, now):
        crossed = [t for t in standing.budget.thresholds if standing.percent >= t]
        if crossed:
            alerts += _alert(standing, crossed)
    return alerts


def _alert(standing: Standing, crossed: list[int]) -> list[BudgetAlert]:
    budget = standing.budget
    with transaction.atomic():
        # One worker at a time per budget, so that a threshold is told once.
        Budget.objects.select_for_update().filter(pk=budget.pk).exists()
        told = set(budget.alerts.filter(at__gte=standing.since).values_list("threshold", flat=True))
        new = [
            BudgetAlert.objects.create(
                budget=budget, threshold=t, window_start=standing.since, used=standing.used
            )
            for t in sorted(set(crossed) - told)
        ]
        if new:
            publish_tenant(budget.tenant_id, "budget.threshold", payload(standing, new[-1]))
    return new


def payload(standing: Standing, alert: BudgetAlert) -> dict:
    """What members and webhooks are told of a threshold crossed."""
    budget = standing.budget
    out = standing.runs_out_at
    return {
        "budget": budget.pk,
        "scope": budget.scope,
        "threshold": alert.threshold,
        "percent": round(standing.percent, 1),
        "used": round(standing.used, 1),
        "gpu_hours": budget.gpu_hours,
        "window": budget.window_words,
        "hard": budget.hard,
        "runs_out_at": out.isoformat() if out else None,
    }
