"""Estimated start times of pending work: the production engine run forward from a snapshot.

`estimate(snapshot, now, guesses)` plans, applies the plan, moves the clock on to the next
expected end of running work (one cycle on after a plan that admitted, preempted or shrank
work), and again, and records when each pending workload is first admitted. A running
workload ends at its time limit, or at its guessed run time (`Guess`, from the submitter's
history: `History`) when that comes first; one that has outlived its guess is expected to run
as long again as it has run so far (run times are heavy-tailed). Nothing new is assumed to
arrive, so work submitted later that goes first makes an estimate late.

Two passes: the expected run times give `start`; the pessimistic ones (each guess times the
90th percentile of actual over guessed run time seen so far, time limits still binding) give
`p90`, never earlier than `start` plus a cycle. A pessimistic pass was chosen over a fixed
spread because it widens the bound where it matters: behind long jobs of users whose guesses
have been poor.

Bounded: the clock moves at least `precision` of the way it has come at each step, at most
`steps` plans a pass, to at most `horizon_s` ahead; only the first `per_queue` pending
workloads of each queue (in queue order) are simulated. With a `clock`, each pass has half of
`budget_s` of that clock, and its steps grow so that the plans that budget still holds (at the
slowest plan's cost so far: plans that admit more cost more, and a pass counting on the last
one's cost ran out of budget hours short of the horizon) reach the horizon, each step the
same multiple of the time come so far: a plan at 100,000 GPUs takes a few tenths of a second,
so there a pass makes about a dozen plans and an estimate hours ahead is good to a fraction
of its distance, not to the cycle. Any other
workload, or one not admitted by the time the pass stops (`Estimates.until`), has no estimate:
it starts later than that.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace

from scheduler.engine import Clock, NodeIndex, Placement, Plan, Snapshot, Workload, plan
from scheduler.engine.ordering import queue_order

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True)
class Guess:
    """A workload's expected and pessimistic run time, in seconds from its start."""

    mean_s: float
    p90_s: float


FALLBACK = Guess(HOUR, 8 * HOUR)  # a job of a submitter with no history, and no time limit


@dataclass(frozen=True)
class Bounds:
    """How far an estimate may look: see the module docstring."""

    horizon_s: float = DAY
    steps: int = 400
    precision: float = 0.02
    per_queue: int = 300
    cycle_s: float = 10.0  # the engine's cycle: a plan that changed something is followed soon
    budget_s: float = 4.0  # seconds of the caller's clock for both passes, when one is given


@dataclass(frozen=True)
class Estimates:
    """Expected and P90 start per pending workload id; a missing id starts after `until`."""

    start: dict[int, float]
    p90: dict[int, float]
    until: float


class History:
    """Run times of finished jobs, by submitter and kind of job, and how far guesses made from
    them were off.

    A waiting job's guess is the mean of the last two run times under the most specific key
    that has any (Tsafrir, Etsion and Feitelson 2007: the user's last two similar jobs), its
    P90 that mean times the 90th percentile of actual over guessed run time of the last `keep`
    such guesses. A running job has outlived some of them: its guess is the median of those of
    the last `runs` under its most specific key that ran longer than it has so far (a job an
    hour in is not one of the ten-minute ones), its P90 their 90th percentile, and at least
    the median times the same stretch (few runs make a short tail).
    """

    def __init__(self, keep: int = 2000, runs: int = 32, fallback: Guess = FALLBACK) -> None:
        self.fallback = fallback
        self._runs: dict[Hashable, deque[float]] = {}
        self._depth = runs
        self._ratios: deque[float] = deque(maxlen=keep)
        self._stretch: float | None = None

    def add(self, run_s: float, *keys: Hashable) -> None:
        """A job that ran `run_s` seconds finished; `keys` from most to least specific."""
        mean = self._mean(keys)
        if mean is not None:
            self._ratios.append(run_s / mean)
            self._stretch = None
        for key in keys:
            self._runs.setdefault(key, deque(maxlen=self._depth)).append(run_s)

    def guess(self, *keys: Hashable, elapsed: float = 0.0) -> Guess | None:
        """The guess for a job of these keys (most specific first) that has run `elapsed`
        seconds so far; None without history."""
        longer = self._longer(keys, elapsed) if elapsed > 0 else []
        if longer:
            median, tail = longer[len(longer) // 2], longer[int(0.9 * (len(longer) - 1))]
            return Guess(median, max(tail, median * self.stretch()))
        mean = self._mean(keys)
        return None if mean is None else Guess(mean, mean * self.stretch())

    def stretch(self) -> float:
        """The 90th percentile of actual over guessed run time, at least 1."""
        if self._stretch is None:
            if len(self._ratios) < 20:
                self._stretch = self.fallback.p90_s / self.fallback.mean_s
            else:
                ordered = sorted(self._ratios)
                self._stretch = max(1.0, ordered[int(0.9 * (len(ordered) - 1))])
        return self._stretch

    def _mean(self, keys: Iterable[Hashable]) -> float | None:
        for key in keys:
            if key in self._runs:
                last = list(self._runs[key])[-2:]
                return sum(last) / len(last)
        return None

    def _longer(self, keys: Iterable[Hashable], elapsed: float) -> list[float]:
        """The recent run times longer than `elapsed` under the most specific key with any,
        in order."""
        for key in keys:
            if longer := sorted(run for run in self._runs.get(key, ()) if run > elapsed):
                return longer
        return []


def estimate(
    snapshot: Snapshot,
    now: float,
    guesses: Mapping[int, Guess],
    bounds: Bounds = Bounds(),
    fallback: Guess = FALLBACK,
    clock: Clock | None = None,
) -> Estimates:
    """Expected and P90 starts of the snapshot's pending workloads (see the module docstring).

    `guesses` maps workload ids to run-time guesses; one without a guess runs to its time
    limit, or for `fallback` when it has none.
    """

    def expected(w: Workload) -> tuple[float, float]:
        guess = guesses.get(w.id)
        if guess is None:
            return (w.time_limit_s or fallback.mean_s), 1.0
        return guess.mean_s, 1.0

    def pessimistic(w: Workload) -> tuple[float, float]:
        guess = guesses.get(w.id)
        if guess is None:
            if w.time_limit_s:
                return w.time_limit_s, 1.0
            guess = fallback
        return guess.p90_s, guess.p90_s / guess.mean_s

    begun = None if clock is None else clock()
    snapshot = capped(snapshot, bounds.per_queue)
    first = plan(snapshot, now)  # the same for both passes
    # What the first plan took tells each pass how many more fit in its budget.
    took = 0.0 if clock is None or begun is None else clock() - begun
    half = None if begun is None else begun + bounds.budget_s / 2
    start, until = forward(snapshot, now, expected, bounds, clock, first, half, took)
    end = None if begun is None else begun + bounds.budget_s
    late, late_until = forward(snapshot, now, pessimistic, bounds, clock, first, end, took)
    # An admission waits for the next cycle, which may come up to a cycle after the plan.
    p90 = {i: max(late[i], start[i]) + bounds.cycle_s for i in start if i in late}
    return Estimates(start, p90, min(until, late_until))


RunTime = Callable[[Workload], tuple[float, float]]


def forward(
    snapshot: Snapshot,
    now: float,
    run_time: RunTime,
    bounds: Bounds = Bounds(),
    clock: Clock | None = None,
    first: Plan | None = None,
    deadline: float | None = None,
    took: float = 0.0,
) -> tuple[dict[int, float], float]:
    """One pass over the snapshot as given (see `capped`): when each pending workload is
    first admitted, and the simulated time up to which that is known (the last plan's).

    `run_time(w)` is a workload's run time from its start and how much longer than that an
    outlived one runs, as a multiple of the time it has run (1: as long again). `first`, when
    given, is the engine's plan for the snapshot at `now`, and `took` the seconds it took.
    With a `clock`, the pass stops before a plan that would likely end after `deadline` (the
    slowest plan's time from now), and steps so that the plans left reach the horizon.
    """
    world = World(snapshot, now, run_time)
    index = NodeIndex()  # the world's nodes, indexed anew only where they changed
    starts: dict[int, float] = {}
    t = planned = now
    last = now + bounds.horizon_s
    for number in range(bounds.steps):
        if clock is not None:
            began = clock()
            if number and deadline is not None and began + took > deadline:
                break
        result = (
            first if number == 0 and first is not None else plan(world.snapshot(), t, index=index)
        )
        for admission in result.admissions:
            if admission.workload_id not in starts:
                starts[admission.workload_id] = world.free_since(admission.placements, planned)
        world.apply(result, t)
        if clock is not None:
            took = max(took, clock() - began)  # the slowest plan so far
        planned = t
        if t >= last or not world.waiting - starts.keys():
            return starts, last
        step = max(bounds.cycle_s, (t - now) * bounds.precision)
        if clock is not None and deadline is not None:
            left = min((deadline - clock()) // max(took, 1e-6), bounds.steps - number - 1)
            step = max(step, reaching(t - now, bounds, left))
        ends = world.next_end()
        if not (result.admissions or result.preemptions or result.shrinks):
            if ends is None:
                return starts, last  # nothing will change: the rest waits for good
            step = max(step, ends - t)
        t = min(t + step, last)
        world.finish(t)
    return starts, planned


def reaching(elapsed: float, bounds: Bounds, plans: float) -> float:
    """The step after `elapsed` seconds of a pass from which `plans` more plans, each the same
    multiple of the time come so far on, reach the horizon (the last plan looks at it)."""
    if plans <= 1:
        return bounds.horizon_s - elapsed
    base = max(elapsed, bounds.cycle_s)
    return base * ((bounds.horizon_s / base) ** (1 / plans) - 1)


def capped(snapshot: Snapshot, per_queue: int) -> Snapshot:
    """The snapshot with only the first `per_queue` pending workloads of each queue."""
    priority = {queue.id: queue.priority for queue in snapshot.queues}
    pending = sorted(
        (w for w in snapshot.workloads if not w.is_running),
        key=lambda w: queue_order(w, priority.get(w.queue_id, 0)),
    )
    taken: dict[int, int] = {}
    kept = [w for w in snapshot.workloads if w.is_running]
    for workload in pending:
        if taken.get(workload.queue_id, 0) < per_queue:
            taken[workload.queue_id] = taken.get(workload.queue_id, 0) + 1
            kept.append(workload)
    return replace(snapshot, workloads=tuple(kept))


class World:
    """The simulated state of one pass: workloads, free GPUs and expected ends, with the
    engine's node objects rebuilt only where GPUs changed hands."""

    def __init__(self, snapshot: Snapshot, now: float, run_time: RunTime) -> None:
        self.base = snapshot
        self.run_time = run_time
        self.workloads = {w.id: w for w in snapshot.workloads}
        self.waiting = {w.id for w in snapshot.workloads if not w.is_running}
        self.free = {node.id: set(node.free) for node in snapshot.nodes}
        self._index = {node.id: i for i, node in enumerate(snapshot.nodes)}
        self._nodes = list(snapshot.nodes)
        self._changed: set[int] = set()
        self.freed: dict[tuple[int, int], float] = {}  # (node, GPU): when it last came free
        self.ends = {
            w.id: now if w.preempting else self._end(w, now)
            for w in snapshot.workloads
            if w.is_running
        }

    def _end(self, workload: Workload, now: float) -> float:
        started = now if workload.started_at is None else workload.started_at
        elapsed = now - started
        total, outlived = self.run_time(workload)
        if total <= elapsed:
            total = elapsed * (1 + outlived)
        if workload.time_limit_s is not None:
            total = min(total, workload.time_limit_s)
        return max(now, started + total)

    def snapshot(self) -> Snapshot:
        for node_id in self._changed:
            i = self._index[node_id]
            self._nodes[i] = replace(self._nodes[i], free=tuple(sorted(self.free[node_id])))
        self._changed.clear()
        return replace(
            self.base, nodes=tuple(self._nodes), workloads=tuple(self.workloads.values())
        )

    def apply(self, result: Plan, now: float) -> None:
        """Preempted work stops and waits again, shrunk work gives GPUs back, admitted work
        starts (grows are left out: they only take GPUs nothing waiting can use)."""
        for preemption in result.preemptions:
            workload = self.workloads[preemption.workload_id]
            self._give(workload.placements, now)
            self.ends.pop(workload.id, None)
            self.workloads[workload.id] = replace(
                workload, placements=(), started_at=None, preempting=False
            )
        for shrink in result.shrinks:
            workload = self.workloads[shrink.workload_id]
            self._give(shrink.released, now)
            gone = {(p.node_id, i) for p in shrink.released for i in p.gpu_indices}
            kept = tuple(
                Placement(p.node_id, indices)
                for p in workload.placements
                if (indices := tuple(i for i in p.gpu_indices if (p.node_id, i) not in gone))
            )
            held = sum(len(p.gpu_indices) for p in kept)
            self.workloads[workload.id] = replace(workload, placements=kept, gpus=held)
        for admission in result.admissions:
            workload = self.workloads[admission.workload_id]
            self._take(admission.placements)
            held = sum(len(p.gpu_indices) for p in admission.placements)
            started = replace(workload, placements=admission.placements, gpus=held, started_at=now)
            self.workloads[workload.id] = started
            self.ends[workload.id] = self._end(started, now)

    def next_end(self) -> float | None:
        return min(self.ends.values(), default=None)

    def finish(self, now: float) -> None:
        """Running work expected to end by `now` ends, and gives its GPUs back."""
        for workload_id in [i for i, end in self.ends.items() if end <= now]:
            self._give(self.workloads.pop(workload_id).placements, self.ends.pop(workload_id))

    def free_since(self, placements: Iterable[Placement], since: float) -> float:
        """When the last of these GPUs came free, or `since` if they all were by then: a
        workload admitted at a plan could have started when its GPUs were, after the plan
        before (which did not admit it)."""
        came = (self.freed.get((p.node_id, i), since) for p in placements for i in p.gpu_indices)
        return max(since, *came)

    def _give(self, placements: Iterable[Placement], at: float) -> None:
        for placement in placements:
            self.free[placement.node_id].update(placement.gpu_indices)
            self.freed.update(((placement.node_id, i), at) for i in placement.gpu_indices)
            self._changed.add(placement.node_id)

    def _take(self, placements: Iterable[Placement]) -> None:
        for placement in placements:
            self.free[placement.node_id].difference_update(placement.gpu_indices)
            self._changed.add(placement.node_id)
