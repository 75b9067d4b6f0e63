"""Budgets in a simulated run: what each budget's queues use in its window, weighted per GPU
model, given to the engine in every snapshot (`engine.Budget.used`) as the portal's cycle gives
it what was booked, so that a replay keeps out what a hard budget would and lowers the weight
of a queue over a soft one.

A calendar window (a month) ends and the next starts from nothing; a rolling window covers the
last `window_s` seconds, forgetting an hour at a time, and what it had used before the run is
taken as spread evenly over the window before the start (the simulator does not know when it
was used), so it leaves the window at an even pace.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from scheduler.engine import Budget

BUCKET_S = 3600.0  # a rolling window forgets what was used this much at a time


@dataclass(frozen=True)
class BudgetSpec:
    """A budget the simulator replays. `budget` is the engine's (whose queues by id, the limit,
    hard or soft, weights), its `used` what the current window had used when the run begins.
    Calendar windows follow each other, `window_s` long, the first ending `first_ends_in_s`
    after the run's start (None: a whole window after it)."""

    budget: Budget
    window_s: float
    rolling: bool = False
    first_ends_in_s: float | None = None


class BudgetMeter:
    """Each budget's weighted GPU-seconds in its window, kept up as GPUs are taken and given
    back (`changed`), and the engine's budgets at any time (`budgets`)."""

    def __init__(self, specs: Iterable[BudgetSpec], start: float) -> None:
        self.specs = tuple(specs)
        self.start = self._at = start
        self._of_queue: dict[int, list[int]] = defaultdict(list)
        for index, spec in enumerate(self.specs):
            for queue_id in spec.budget.queue_ids:
                self._of_queue[queue_id].append(index)
        self._rate = [0.0] * len(self.specs)  # weighted GPUs held now
        # Calendar windows: GPU-seconds used in the current one, and when it ends.
        self._used = [spec.budget.used * 3600 for spec in self.specs]
        self._ends = [
            start + (spec.window_s if spec.first_ends_in_s is None else spec.first_ends_in_s)
            for spec in self.specs
        ]
        # Rolling windows: (hour, GPU-seconds) since the start, oldest first.
        self._hours: list[deque[list]] = [deque() for _ in self.specs]

    def __bool__(self) -> bool:
        return bool(self.specs)

    def changed(self, now: float, queue_id: int, gpu_model: str, delta: int) -> None:
        """Work of `queue_id` took (`delta` > 0) or gave back GPUs of `gpu_model` at `now`."""
        if not delta or queue_id not in self._of_queue:
            return
        self._advance(now)
        for index in self._of_queue[queue_id]:
            self._rate[index] += delta * self.specs[index].budget.weight(gpu_model)

    def budgets(self, now: float) -> tuple[Budget, ...]:
        """The engine's budgets at `now`, each with the weighted GPU-hours its window used and,
        for a calendar window, when it ends."""
        self._advance(now)
        return tuple(
            replace(
                spec.budget,
                used=self._window_s(index, now) / 3600,
                ends_at=None if spec.rolling else self._ends[index],
            )
            for index, spec in enumerate(self.specs)
        )

    def next_renewal(self, now: float) -> float | None:
        """When a budget's window next lets go of some of what it used: a calendar window's
        end, or for a rolling one the next hour; None when no window holds anything."""
        self._advance(now)
        ends = [
            (int(now // BUCKET_S) + 1) * BUCKET_S if spec.rolling else self._ends[index]
            for index, spec in enumerate(self.specs)
            if self._window_s(index, now) > 0
        ]
        return min(ends, default=None)

    def _window_s(self, index: int, now: float) -> float:
        spec = self.specs[index]
        if not spec.rolling:
            return self._used[index]
        hours = self._hours[index]
        while hours and (hours[0][0] + 1) * BUCKET_S <= now - spec.window_s:
            hours.popleft()
        before = spec.budget.used * 3600 * max(0.0, 1 - (now - self.start) / spec.window_s)
        return before + sum(used for _, used in hours)

    def _advance(self, now: float) -> None:
        if now <= self._at:
            return
        for index, spec in enumerate(self.specs):
            if spec.rolling:
                self._spread(index, self._at, now)
                continue
            at = self._at
            while self._ends[index] <= now:  # a window ended: the next starts from nothing
                at = max(at, self._ends[index])
                self._used[index] = 0.0
                self._ends[index] += spec.window_s
            self._used[index] += self._rate[index] * (now - at)
        self._at = now

    def _spread(self, index: int, at: float, now: float) -> None:
        """Book the GPU-seconds of [at, now) into the hours they fall in."""
        rate, hours = self._rate[index], self._hours[index]
        while rate and at < now:
            hour = int(at // BUCKET_S)
            until = min(now, (hour + 1) * BUCKET_S)
            if not hours or hours[-1][0] != hour:
                hours.append([hour, 0.0])
            hours[-1][1] += rate * (until - at)
            at = until
