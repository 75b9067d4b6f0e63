"""What a simulation records as it runs: GPUs in use over time, each queue's share and whether
it gets its guarantee, fragmentation, and each job's outcome. `summary` turns it into figures.

Definitions:
- allocated GPUs: held by running jobs; busy GPUs: held by jobs computing (not stalled for a
  checkpoint, saving or restarting).
- a queue's guarantee, for the share figures and the guarantee check, is its nominal quota
  (what reclaim gives back), not the engine's never-lent `Quota.guarantee`.
- guarantee check, at the start of each cycle: a pending job fits its queue's guarantee while
  used + the job's GPUs <= nominal. It is overdue once it has waited two cycle periods or more
  since it both waited and fit: since the later of its submission (or requeue) and the first
  cycle since which jobs of its size have fit, at the start and at the end of every cycle. A
  violation is a spell of cycles in which a queue has an overdue job: the queue did not get
  its guarantee within two cycles. Each job has its own clock, so a queue whose jobs keep
  arriving, or whose own backlog refills each GPU it frees, each job started within two
  cycles of fitting, is never in violation, however long it has some job pending.
- fragmentation: free GPUs that no pending job of their GPU model could use (a node with fewer
  free GPUs than the smallest pending job smaller than a node, or a partly used node when every
  pending job needs whole nodes), while work is pending; 0 while nothing is pending.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from scheduler.sim.jobs import Cause, Job
from scheduler.sim.state import Allocations

STARVED_CYCLES = 2


@dataclass(frozen=True)
class Outcome:
    """One job's outcome, as the summary needs it."""

    id: int
    queue: str
    gpus: int
    submit_s: float
    duration_s: float
    status: str  # finished, running (at the horizon) or never-started; jobs submitted
    # after the horizon are left out
    wait_s: float  # time pending, all spells
    first_start_s: float | None  # when it was first admitted
    jct_s: float | None
    ettr: float | None
    faults: int
    preemptions: int
    lost_fault_gpu_s: float
    lost_preemption_gpu_s: float
    productive_gpu_s: float
    wall_gpu_s: float  # GPUs asked (a share as its share) x wall time since first admission


class Series:
    """A step function of time, averaged into buckets of `step_s` seconds."""

    def __init__(self, step_s: float, start: float) -> None:
        self.step_s = step_s
        self.start = start
        self.value = 0.0
        self.at = start
        self.integral = 0.0
        self.buckets: dict[int, float] = defaultdict(float)

    def set(self, now: float, value: float) -> None:
        self.advance(now)
        self.value = value

    def add(self, now: float, delta: float) -> None:
        self.set(now, self.value + delta)

    def advance(self, now: float) -> None:
        if now <= self.at:
            return
        self.integral += self.value * (now - self.at)
        if self.value:
            step, start = self.step_s, self.start
            first = int((self.at - start) // step)
            last = int((now - start) // step)
            if first == last:
                self.buckets[first] += self.value * (now - self.at)
            else:
                self.buckets[first] += self.value * (start + (first + 1) * step - self.at)
                for bucket in range(first + 1, last):
                    self.buckets[bucket] += self.value * step
                self.buckets[last] += self.value * (now - (start + last * step))
        self.at = now

    def integral_to(self, end: float) -> float:
        """The integral of the value from the start to `end`."""
        self.advance(end)
        return self.integral

    def averages(self, end: float) -> list[tuple[float, float]]:
        """(bucket start, mean value) of every bucket up to `end`."""
        self.advance(end)
        count = int((end - self.start) // self.step_s) + 1
        return [
            (self.start + i * self.step_s, self.buckets.get(i, 0.0) / self.step_s)
            for i in range(count)
        ]


class Recorder:
    """Collects a run's figures; the simulator calls it on every change."""

    def __init__(
        self,
        allocations: Allocations,
        nominal: dict[tuple[str, str], int],
        cycle_s: float,
        start: float,
        step_s: float,
    ) -> None:
        self.allocations = allocations
        self.nominal = nominal  # (queue, model) -> nominal quota
        self.cycle_s = cycle_s
        self.allocated = Series(step_s, start)
        self.busy = Series(step_s, start)
        self.fragmented = Series(step_s, start)
        self.queue_used: dict[str, Series] = {}
        self.used: Counter[tuple[str, str]] = Counter()
        # (queue, model) -> GPUs -> pending job id -> when it began waiting, oldest first
        self.pending: dict[tuple[str, str], dict[int, dict[int, float]]] = defaultdict(dict)
        self.pending_by_model: dict[str, Counter[int]] = defaultdict(Counter)
        # (queue, model) -> GPUs -> the first cycle since which a job of that size has fit
        self.fits_since: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
        self.violated: set[tuple[str, str]] = set()
        self.violations: Counter[str] = Counter()
        self.longest_starved: dict[str, float] = defaultdict(float)
        self.outcomes: list[Outcome] = []
        self.cycles = 0
        self.preemptions = 0
        self.shrinks = 0
        self.grows = 0
        self.moves = 0  # running jobs moved to a faster GPU model
        self.defrag_moves = 0  # running jobs moved within their pod to defragment it
        self.kept: list[tuple[float, float]] = []  # each shrink: (GPUs, throughput) kept
        self.faults: Counter[str] = Counter()

    def shrunk(self, gpus_kept: float, throughput_kept: float) -> None:
        """A job was shrunk, keeping these shares of its GPUs and of its throughput."""
        self.shrinks += 1
        self.kept.append((gpus_kept, throughput_kept))

    # -- GPUs --------------------------------------------------------------------------------

    def gpus_changed(self, now: float, job: Job, delta: int) -> None:
        """Job `job` took (`delta` > 0) or gave back GPUs."""
        if not delta:
            return
        key = (job.spec.queue, job.gpu_model)  # the model it runs on
        self.used[key] += delta
        self.allocated.add(now, delta)
        series = self.queue_used.get(job.spec.queue)
        if series is None:
            series = self.queue_used[job.spec.queue] = Series(
                self.allocated.step_s, self.allocated.start
            )
        series.add(now, delta)

    def busy_changed(self, now: float, delta: int) -> None:
        if delta:
            self.busy.add(now, delta)

    # -- pending work ------------------------------------------------------------------------

    def pending_added(self, job: Job) -> None:
        """Job `job` waits (again), since `job.waiting_since`."""
        spec = job.spec
        self.pending[spec.queue, spec.gpu_model].setdefault(spec.gpus, {})[job.id] = (
            job.waiting_since
        )
        self.pending_by_model[spec.gpu_model][spec.gpus] += 1

    def pending_removed(self, job: Job) -> None:
        spec = job.spec
        key = (spec.queue, spec.gpu_model)
        waiting = self.pending[key][spec.gpus]
        del waiting[job.id]
        if not waiting:
            del self.pending[key][spec.gpus]
            self.fits_since[key].pop(spec.gpus, None)
        sizes = self.pending_by_model[spec.gpu_model]
        sizes[spec.gpus] -= 1
        if not sizes[spec.gpus]:
            del sizes[spec.gpus]

    # -- cycles ------------------------------------------------------------------------------

    def cycle_started(self, now: float) -> None:
        """The guarantee check (see the module docstring), before the engine runs: a queue
        with an overdue job starts a violation, unless one is going on."""
        self.cycles += 1
        for key in list(self.pending):
            if self._overdue(key, now) and key not in self.violated:
                self.violated.add(key)
                self.violations[key[0]] += 1

    def cycle_ended(self, now: float) -> None:
        """End the violations the plan resolved (and the fit of the sizes it filled the
        guarantee against); fragmentation after the plan."""
        for key in list(self.pending):
            if not self._overdue(key, now):
                self.violated.discard(key)
        self.fragmented.set(now, self._fragmented())

    def _overdue(self, key: tuple[str, str], now: float) -> bool:
        waited = self._longest_fitting_wait(key, now)
        return waited is not None and waited >= STARVED_CYCLES * self.cycle_s - 1e-9

    def _longest_fitting_wait(self, key: tuple[str, str], now: float) -> float | None:
        """How long the queue's longest-waiting job that fits its guarantee has waited and fit
        (None when no pending job fits); also kept as the queue's longest starved time."""
        sizes = self.pending[key]
        room = self.nominal.get(key, 0) - self.used[key]
        fits_since = self.fits_since[key]
        since = None
        for gpus, waiting in sizes.items():
            if gpus > room:
                fits_since.pop(gpus, None)
                continue
            start = max(fits_since.setdefault(gpus, now), next(iter(waiting.values())))
            since = start if since is None else min(since, start)
        if since is None:
            return None
        waited = now - since
        if waited > self.longest_starved[key[0]]:
            self.longest_starved[key[0]] = waited
        return waited

    def _fragmented(self) -> int:
        fragmented = 0
        for (model, free, size), nodes in self.allocations.by_free.items():
            sizes = self.pending_by_model.get(model)
            if not nodes or not free or not sizes:
                continue
            smallest_part = min((g for g in sizes if g < size), default=None)
            whole_wanted = any(g >= size for g in sizes)
            if free == size:
                usable = whole_wanted or smallest_part is not None
            else:
                usable = smallest_part is not None and smallest_part <= free
            if not usable:
                fragmented += free * nodes
        return fragmented

    # -- jobs --------------------------------------------------------------------------------

    def job_ended(self, job: Job, now: float) -> None:
        """Book a job's outcome: finished, or still running or never started at the end."""
        spec = job.spec
        if spec.submit_s > now:
            return  # not submitted before the end: not part of this run
        if job.finished_at is not None:
            status, jct = "finished", job.finished_at - spec.submit_s
        else:
            status, jct = ("running" if job.first_start is not None else "never-started"), None
        wait = job.queued_s + (
            now - job.waiting_since
            if job.first_start is None or (not job.running and job.finished_at is None)
            else 0.0
        )
        end = job.finished_at if job.finished_at is not None else now
        wall = (end - job.first_start) * spec.share if job.first_start is not None else 0.0
        self.outcomes.append(
            Outcome(
                spec.id,
                spec.queue,
                spec.gpus,
                spec.submit_s,
                spec.duration_s,
                status,
                wait,
                job.first_start,
                jct,
                job.ettr(now),
                job.faults,
                job.preemptions,
                job.lost_gpu_s[Cause.FAULT],
                job.lost_gpu_s[Cause.PREEMPTION],
                (job.compute_s - job.lost_compute_s) * spec.share,
                wall,
            )
        )

    def finish(self, now: float) -> None:
        """Count the queues with a job overdue at the end."""
        for key in list(self.pending):
            if self._overdue(key, now) and key not in self.violated:
                self.violations[key[0]] += 1
