"""Budgets in one cycle: what each budget of the snapshot has left, debited as the cycle admits
work, and the check that keeps out what a budget does not allow (`model.Budget`).

A hard budget counts, besides what its window has used, what its running work may still use
up to its time limits (Slurm's `AccountingStorageEnforce=safe`): a job starts only if it can
run to its own time limit within what is left, so no budget ever has to stop a job. Running
work without a time limit counts only what it has used. Near the end of a calendar window only
the time left in it counts: the rest falls in the next window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from scheduler.engine.errors import Inadmissible
from scheduler.engine.explain import budget_reason, soft_budget_reason, untimed_reason
from scheduler.engine.model import Budget, Queue, Workload

SOFT_WEIGHT = 0.25  # the share of its fair-share weight a queue over a soft budget keeps
SLACK = 1e-9  # GPU-hours: a job that uses exactly what is left fits


def seconds_left(workload: Workload, now: float) -> float | None:
    """How much longer the workload may hold its GPUs: its whole time limit until it runs, the
    rest of it once it does; None without a time limit."""
    if workload.time_limit_s is None:
        return None
    if workload.started_at is None:
        return workload.time_limit_s
    return max(0.0, workload.started_at + workload.time_limit_s - now)


class BudgetLedger:
    """Weighted GPU-hours per budget: what running work holds on to and what this cycle adds."""

    def __init__(self, budgets: Iterable[Budget], workloads: Iterable[Workload], now: float):
        self.now = now
        self._budgets = tuple(budgets)
        self._of_queue: dict[int, list[int]] = defaultdict(list)
        for index, budget in enumerate(self._budgets):
            for queue_id in budget.queue_ids:
                self._of_queue[queue_id].append(index)
        self.held = [0.0] * len(self._budgets)  # running work, up to its time limits
        self.added = [0.0] * len(self._budgets)  # work this cycle admits
        if not self._budgets:
            return
        for w in workloads:
            seconds = seconds_left(w, now)
            if w.placements and not w.preempting and seconds is not None:
                self._debit(self.held, w.queue_id, w.gpu_model, w.held, seconds)

    def __bool__(self) -> bool:
        return bool(self._budgets)

    def left(self, index: int) -> float:
        budget = self._budgets[index]
        return budget.limit - budget.used - self.held[index] - self.added[index]

    def soften(self, queues: tuple[Queue, ...]) -> tuple[Queue, ...]:
        """The queues, those over a soft budget keeping `SOFT_WEIGHT` of their weight."""
        if not self._budgets:
            return queues
        return tuple(
            replace(queue, weight=queue.weight * SOFT_WEIGHT) if self._spent(queue.id) else queue
            for queue in queues
        )

    def _spent(self, queue_id: int) -> bool:
        """Whether a soft budget of the queue is spent."""
        for index in self._of_queue.get(queue_id, ()):
            budget = self._budgets[index]
            if not budget.hard and budget.used >= budget.limit:
                return True
        return False

    def check(
        self, queue: Queue, workload: Workload, gpus: int, seconds: float | None, borrows: bool
    ) -> None:
        """Raise Inadmissible unless every budget of the queue lets `gpus` GPUs of the
        workload be held for `seconds` (None: no time limit); `borrows` says whether they go
        beyond the queue's nominal quota."""
        for index in self._of_queue.get(queue.id, ()):
            budget = self._budgets[index]
            if not budget.hard:
                if borrows and budget.used >= budget.limit:
                    raise Inadmissible(soft_budget_reason(budget, workload.gpu_model))
                continue
            left = self.left(index)
            if seconds is None:
                raise Inadmissible(untimed_reason(budget, left))
            inside = budget.within(seconds, self.now)
            need = gpus * inside / 3600 * budget.weight(workload.gpu_model)
            if need > left + SLACK:
                held = self.held[index] > 0
                raise Inadmissible(
                    budget_reason(
                        budget, left, need, workload.gpu_model, gpus, inside, held, inside < seconds
                    )
                )

    def charge(self, queue_id: int, gpu_model: str, gpus: int, seconds: float | None) -> None:
        """Count `gpus` GPUs held for `seconds` more against the queue's budgets."""
        if self._budgets and seconds is not None:
            self._debit(self.added, queue_id, gpu_model, gpus, seconds)

    def _debit(
        self, into: list[float], queue_id: int, gpu_model: str, gpus: int, seconds: float
    ) -> None:
        for index in self._of_queue.get(queue_id, ()):
            budget = self._budgets[index]
            inside = budget.within(seconds, self.now)
            into[index] += gpus * inside / 3600 * budget.weight(gpu_model)
