"""One job's life in the simulator: computing, checkpointing, failing, recovering, finishing.

A job's work is its trace duration at its requested size on its trace's GPU model; on another
model it accepts it progresses at that model's speed (`TraceJob.speeds`); on fewer GPUs (an
elastic job that was shrunk) in proportion, `held / gpus` seconds of work per second, or, for a
job that names its model, at the planner's throughput for `held` GPUs over that for `gpus` (the
curve the engine weighs its shrinks by, `scheduler.parallelism.curve`, corrected by the fleet's
calibration when `SimConfig.calibration` gives one). A job that carries its measured throughput
by GPU count on each model (`TraceJob.curves`) runs at that, over its throughput at `gpus` on
its trace's model, and the engine weighs its resizes by the curve of the model it runs on.
While it holds GPUs it is in one phase at a time:

- COMPUTE: work advances; after `interval_s` seconds of compute a routine checkpoint is due;
- STALL: a routine checkpoint's stall (a periodic stop-the-world save, or an async copy to host
  memory after which the copy persists in the background for `persist_s` while it computes);
- SAVE: a fault-triggered save from GPU memory (`Costs.triggered_save_s`);
- RECOVER: a restart (`Costs.restart_s`), after a fault, on resuming after a preemption, and
  after a resize (a shrink and a grow both save first and lose nothing);
- STOPPING: preempted with a grace (`SimConfig.preemption_grace_s`): it saves on request if
  its save fits in the grace, then gives its GPUs back and waits again.

Only a complete checkpoint counts: a periodic save completes at the end of its stall, an async
one when its persist ends. A fault stops the job (if its kind kills jobs) and rolls its work
back to the newest complete checkpoint, unless the policy is `triggered` and the save from
memory is possible, which keeps the work up to the last whole training step. A fault while
saving or restarting falls back to the newest complete checkpoint and restarts again. The job
keeps its GPUs through a fault: the failed node is swapped for a hot spare (issue 5's
recovery), so the engine sees no change. These are the assumptions of Daly's model, so a long
periodic run matches `checkpointing.daly_ettr`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

from scheduler import parallelism
from scheduler.calibration import Table, calibrated_curve
from scheduler.checkpointing import Costs, Policy, PolicyKind, interval_for
from scheduler.engine import Placement
from scheduler.engine.model import at
from scheduler.sim.trace import TraceJob

EPS = 1e-6  # seconds of work below which a job counts as done (float rounding)


class Phase(IntEnum):
    """Where a job stands; RUNNING phases hold GPUs."""

    PENDING = 0  # waiting for the engine to admit it
    COMPUTE = 1  # running and making progress
    STALL = 2  # a routine checkpoint's stall
    SAVE = 3  # a fault-triggered save from memory
    RECOVER = 4  # restarting
    STOPPING = 5  # preempted with a grace: saving, if it can, before it gives its GPUs back
    DONE = 6  # finished


class Cause(IntEnum):
    """Why a job is restarting, for the accounting of lost GPU time."""

    FAULT = 0
    PREEMPTION = 1
    RESIZE = 2


PHASES, CAUSES = len(Phase), len(Cause)


@dataclass(frozen=True)
class Checkpointing:
    """A job's checkpoint policy resolved to numbers: routine checkpoints every `interval_s`
    seconds of compute (None: never), each stalling `stall_s`, complete `persist_s` later."""

    kind: PolicyKind
    interval_s: float | None
    stall_s: float
    persist_s: float

    @classmethod
    def resolve(
        cls, policy: Policy, gpus: int, costs: Costs, failures_per_gpu_hour: float
    ) -> Checkpointing:
        """The numbers for `policy` on `gpus` GPUs; an interval left None is the advisor's."""
        interval = policy.interval_s
        if interval is None and failures_per_gpu_hour > 0:
            interval = interval_for(policy.kind, gpus, costs, failures_per_gpu_hour)
        if policy.kind is PolicyKind.NONE:
            return cls(policy.kind, None, 0.0, 0.0)
        if policy.kind is PolicyKind.PERIODIC:
            return cls(policy.kind, interval, costs.save_stall_s, 0.0)
        return cls(policy.kind, interval, costs.async_stall_s, costs.async_persist_s)


class Job:
    """A trace job's state in one simulation, and its time accounting."""

    def __init__(
        self,
        spec: TraceJob,
        checkpointing: Checkpointing,
        costs: Costs,
        factors: Table | None = None,  # the fleet's calibration; None: as modelled
    ) -> None:
        self.spec = spec
        self.id = spec.id
        self.ckpt = checkpointing
        self.costs = costs
        self.phase = Phase.PENDING
        self.placements: tuple[Placement, ...] = ()
        self.held = 0
        self.gpu_model = spec.gpu_model  # the model it runs (or last ran) on
        self.rate = 0.0  # seconds of work per second of compute
        self.progress = 0.0  # seconds of work done, as of `mark`
        self.mark = spec.submit_s
        self.saved = 0.0  # work kept by the newest complete checkpoint
        self.last_checkpoint_at: float | None = None
        self.to_checkpoint = math.inf  # seconds of compute until the next routine checkpoint
        self.capture = 0.0  # work captured by the checkpoint being taken or persisted
        self.persisting_until: float | None = None  # an async copy being persisted
        self.due = False  # a routine checkpoint waits for the previous persist
        self.phase_end: float | None = None
        self.cause = Cause.FAULT
        # Accounting.
        self.started_at: float | None = None  # when it last started
        self.first_start: float | None = None
        self.finished_at: float | None = None
        self.waiting_since = spec.submit_s
        self.queued_s = 0.0
        self.compute_s = 0.0
        self.lost_compute_s = 0.0
        self.phase_s = [0.0] * PHASES
        self.lost_gpu_s = [0.0] * CAUSES
        self.faults = 0
        self.preemptions = 0
        self.shrinks = 0
        self.resized_at: float | None = None
        self.planned = throughput_curve(spec, factors or {})
        self.slowdown = 1.0  # a hang (0) or a straggler (below 1) until the job restarts
        # What happened to it, as the portal's workload states name it: "running",
        # "preempting", "pending", "recovering (spare)" and so on, "succeeded".
        self.history: list[str] = []

    # -- reading -----------------------------------------------------------------------------

    @property
    def work(self) -> float:
        return self.spec.duration_s

    @property
    def throughput(self) -> tuple:
        """The curve the engine weighs its resizes by: its measured one on the model it runs
        on, else the planner's (or none)."""
        return self.spec.curve_on(self.gpu_model) or self.planned

    @property
    def running(self) -> bool:
        return Phase.PENDING < self.phase < Phase.DONE

    def next_phase_at(self) -> float:
        """When the current phase ends (COMPUTE: the next checkpoint or the finish)."""
        if self.phase != Phase.COMPUTE:
            return self.phase_end  # type: ignore[return-value]
        if not self.rate:
            return math.inf  # hung: nothing ends until it is noticed
        finish = (self.work - self.progress) / self.rate
        return self.mark + min(finish, self.to_checkpoint)

    def ettr(self, end: float) -> float | None:
        """Productive compute time over wall time since first admission, up to `end` (its
        finish, or the end of the simulation); None if it never started."""
        if self.first_start is None:
            return None
        wall = (self.finished_at if self.finished_at is not None else end) - self.first_start
        productive = self.compute_s - self.lost_compute_s
        return productive / wall if wall > 0 else 1.0

    # -- changes -----------------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Book the time since `mark` to the current phase (and progress, when computing)."""
        elapsed = now - self.mark
        if elapsed <= 0:
            self.mark = max(self.mark, now)
            return
        if self.phase == Phase.COMPUTE:
            self.progress = min(self.work, self.progress + elapsed * self.rate)
            self.to_checkpoint -= elapsed
            self.compute_s += elapsed
            if not self.rate:  # hung: running, and nothing to show for it
                self.lost_compute_s += elapsed
                self.lost_gpu_s[Cause.FAULT] += elapsed * self.held
        elif self.phase == Phase.RECOVER:
            self.lost_gpu_s[self.cause] += elapsed * self.held
        elif self.phase == Phase.SAVE:
            self.lost_gpu_s[Cause.FAULT] += elapsed * self.held
        elif self.phase == Phase.STOPPING:
            self.lost_gpu_s[Cause.PREEMPTION] += elapsed * self.held
        self.phase_s[self.phase] += elapsed
        self.mark = now

    def start(
        self, now: float, placements: tuple[Placement, ...], gpu_model: str | None = None
    ) -> None:
        """Start (or resume) on these GPUs, of `gpu_model` (default: its trace's); a resumed
        job restarts from its checkpoint first."""
        self.advance(now)
        self.queued_s += now - self.waiting_since
        self.gpu_model = gpu_model or self.spec.gpu_model
        self._hold(placements)
        self.started_at = now
        if self.first_start is None:
            self.first_start = now
        self.to_checkpoint = self.ckpt.interval_s or math.inf
        self.history.append("running")
        if self.progress > 0:
            self._recover(now, Cause.PREEMPTION)
        else:
            self._enter(Phase.COMPUTE, None)

    def resize(
        self,
        now: float,
        placements: tuple[Placement, ...],
        gpu_model: str | None = None,
        pod: str = "",
    ) -> None:
        """Go on with fewer or more GPUs, or on GPUs of another model it accepts (`gpu_model`:
        the engine moved it), or elsewhere in its pod (`pod`: defragmented), after one restart.
        All save first, so nothing is lost (the portal's `save_then_shrink`, and a grow or a
        move that asks for a save when its newest is older than a few seconds); the save's
        time is not modelled."""
        self.advance(now)
        if self.ckpt.kind is not PolicyKind.NONE:
            self._complete(now, self.progress)
        before = self.held
        self.gpu_model = gpu_model or self.gpu_model
        self._hold(placements)
        if self.held < before:
            self.shrinks += 1
        self.resized_at = now
        if pod:
            self.history.append(f"recovering (moved within {pod} to free whole nodes)")
        elif gpu_model is not None:
            self.history.append(f"recovering (moved to {gpu_model})")
        else:
            grown = "recovering (shrunk)" if self.held < before else "recovering (grown)"
            self.history.append(grown)
        self._recover(now, Cause.RESIZE)

    def preempt(self, now: float) -> None:
        """Stop and wait again (keeping its submit time). Running, it saves first when its
        policy saves, as the portal's graceful preemption does (the save's time is not
        modelled here: `notice` and `released` model it); else the work since the newest
        complete checkpoint is lost."""
        self.advance(now)
        if self.ckpt.kind is not PolicyKind.NONE and self.phase in (Phase.COMPUTE, Phase.STALL):
            self._complete(now, self.progress)
        self._preempted(now)

    def notice(self, now: float, grace_s: float) -> float:
        """Told to stop within `grace_s`: it stops computing and saves when its policy saves,
        its save (`save_s`) fits in the grace and it is computing (restarting, it has nothing
        new to keep); it is stopped at the grace otherwise, or at once when it has nothing to
        save. Returns when its GPUs are free (`released`)."""
        self.advance(now)
        save = self.save_s()
        computing = self.phase in (Phase.COMPUTE, Phase.STALL)
        saves = computing and 0 < save <= grace_s
        self.capture = self.progress if saves else self.saved
        self.persisting_until = None  # a copy still persisting is as good as lost
        wait = save if saves else (grace_s if computing and save > 0 else 0.0)
        self._enter(Phase.STOPPING, now + wait)
        return now + wait

    def released(self, now: float) -> float:
        """The grace of `notice` is over: what its save kept is its checkpoint; it waits
        again. Returns the work thrown away (GPU-seconds)."""
        self.advance(now)
        if self.capture > self.saved:
            self._complete(now, self.capture)
        return self._preempted(now)

    def save_s(self) -> float:
        """Seconds a save on request takes under its policy: a fault-style save from GPU
        memory, an async copy to host memory (it persists from there), or a stop-the-world
        write; 0 for a job that saves nothing."""
        kind = self.ckpt.kind
        if kind is PolicyKind.TRIGGERED:
            return self.costs.triggered_save_s
        if kind is PolicyKind.ASYNC:
            return self.costs.async_stall_s
        return self.costs.save_stall_s if kind is PolicyKind.PERIODIC else 0.0

    def _preempted(self, now: float) -> float:
        lost = self._roll_back(self.saved) * self.spec.share
        self.lost_gpu_s[Cause.PREEMPTION] += lost
        self.preemptions += 1
        self._stop(now)
        self.history += ["preempting", "pending"]
        return lost

    def requeue(self, now: float, saves: bool) -> None:
        """A fault it cannot recover from where it runs (no spare, not elastic enough): it
        saves from memory when `saves` (else falls back to its newest complete checkpoint),
        gives its GPUs back and waits again."""
        self.advance(now)
        self.faults += 1
        if saves:
            kept = self._step_reached()
            self._lose(kept)
            self._complete(now, kept)
        else:
            self._lose(self.saved)
        self._stop(now)
        self.history += ["recovering (requeued)", "pending"]

    def move(self, now: float, placements: tuple[Placement, ...]) -> None:
        """Hold these GPUs from now on (a node swapped for a spare, or dropped)."""
        self.advance(now)
        self._hold(placements)

    def slow(self, now: float, factor: float) -> None:
        """Run at `factor` of its speed until it restarts: 0 for a hang."""
        self.advance(now)
        self.slowdown = factor
        self._hold(self.placements)

    def finish(self, now: float) -> None:
        self.advance(now)
        self.finished_at = now
        self._hold(())
        self._enter(Phase.DONE, None)
        self.history.append("succeeded")

    def fault(self, now: float, saves: bool, outcome: str = "in place") -> None:
        """A fault that kills the job: save from memory when `saves` (the policy and the
        fault allow it), else fall back to the newest complete checkpoint; then restart
        (`outcome`: where, as the portal's recovery says it)."""
        self.advance(now)
        self.faults += 1
        self.history.append(f"recovering ({outcome})")
        if self.slowdown != 1.0:  # the restart ends a hang, and a straggler left behind
            self.slowdown = 1.0
            self._hold(self.placements)
        if self.phase == Phase.RECOVER and self.cause == Cause.FAULT:
            self._recover(now, Cause.FAULT)  # nothing new to lose: restart again
            return
        if saves and self.phase != Phase.SAVE:
            self.capture = self._step_reached()
            self._enter(Phase.SAVE, now + self.costs.triggered_save_s)
            return
        self._lose(self.saved)
        self._recover(now, Cause.FAULT)

    def phase_ended(self, now: float) -> bool:
        """Move on from the phase that ends now; True when the job has finished its work."""
        self.advance(now)
        if self.phase == Phase.COMPUTE:
            if self.work - self.progress <= EPS:
                return True
            if self.to_checkpoint <= EPS:
                self._begin_checkpoint(now)
        elif self.phase == Phase.STALL:
            self._end_stall(now)
        elif self.phase == Phase.SAVE:
            self._lose(self.capture)
            self._complete(now, self.capture)
            self._recover(now, Cause.FAULT)
        elif self.phase == Phase.RECOVER:
            if self.cause != Cause.PREEMPTION:
                self.history.append("running")
            self._enter(Phase.COMPUTE, None)
        return False

    def persisted(self, now: float) -> None:
        """The async copy being persisted is complete: it becomes the newest checkpoint."""
        self.advance(now)
        self._complete(now, self.capture)
        if self.due:
            self.due = False
            self.to_checkpoint = 0.0  # the checkpoint that waited is taken when computing
            if self.phase == Phase.COMPUTE:
                self._begin_checkpoint(now)

    # -- internals ---------------------------------------------------------------------------

    def _hold(self, placements: tuple[Placement, ...]) -> None:
        self.placements = placements
        if self.spec.fractional:  # a share or MIG job holds its share, at its full pace
            self.held = self.spec.share if placements else 0
            self.rate = self.slowdown if placements else 0.0
            return
        self.held = sum(len(p.gpu_indices) for p in placements)
        self.rate = self.speed(self.held) * self.slowdown if self.held else 0.0

    def _stop(self, now: float) -> None:
        self._hold(())
        self.started_at = None
        self.waiting_since = now
        self._enter(Phase.PENDING, None)

    def _step_reached(self) -> float:
        """The work up to the last whole training step: what a save from memory keeps."""
        step = self.costs.step_s
        return math.floor(self.progress / step + EPS) * step

    def speed(self, gpus: int) -> float:
        """Seconds of work per second on `gpus` GPUs of the model it runs on: 1 at its
        requested size on its trace's model."""
        spec = self.spec
        measured = spec.curve_on(self.gpu_model)
        if measured:
            return at(dict(measured), gpus) / at(dict(spec.curve_on(spec.gpu_model)), spec.gpus)
        if self.planned:
            curve = dict(self.planned)
            return at(curve, gpus) / at(curve, spec.gpus) * spec.speed_on(self.gpu_model)
        return gpus / spec.gpus * spec.speed_on(self.gpu_model)

    def _enter(self, phase: Phase, ends: float | None) -> None:
        self.phase = phase
        self.phase_end = ends

    def _recover(self, now: float, cause: Cause) -> None:
        self.cause = cause
        self._enter(Phase.RECOVER, now + self.costs.restart_s)

    def _roll_back(self, to: float) -> float:
        """Set the work back to `to`, dropping any copy still persisting; the compute time
        lost."""
        lost = max(0.0, self.progress - to)
        lost_compute = lost / self.rate if self.rate else 0.0
        self.lost_compute_s += lost_compute
        self.progress = min(self.progress, to)
        self.persisting_until = None
        self.due = False
        self.to_checkpoint = self.ckpt.interval_s or math.inf
        return lost

    def _lose(self, to: float) -> None:
        lost = self._roll_back(to)
        self.lost_gpu_s[Cause.FAULT] += lost * self.spec.share

    def _complete(self, now: float, work: float) -> None:
        self.saved = min(work, self.progress)
        self.last_checkpoint_at = now
        self.persisting_until = None

    def _begin_checkpoint(self, now: float) -> None:
        if self.persisting_until is not None:
            self.due = True  # one copy persists at a time: wait for it
            self.to_checkpoint = math.inf
            return
        self.due = False
        self.capture = self.progress
        self._enter(Phase.STALL, now + self.ckpt.stall_s)

    def _end_stall(self, now: float) -> None:
        self.to_checkpoint = self.ckpt.interval_s or math.inf
        if self.ckpt.persist_s > 0:
            self.persisting_until = now + self.ckpt.persist_s
        else:
            self._complete(now, self.capture)
        self._enter(Phase.COMPUTE, None)


def throughput_curve(spec: TraceJob, factors: Table) -> tuple:
    """The planner's curve for an elastic job that names its model, else (); calibrated by
    the fleet's `factors` (`SimConfig.calibration`)."""
    gpu = parallelism.GPUS.get(spec.gpu_model)
    if not spec.model or gpu is None or spec.fewest_gpus >= spec.gpus:
        return ()
    model = parallelism.MODELS[spec.model]
    found = parallelism.curve(model, gpu, spec.global_batch, spec.fewest_gpus, spec.gpus)
    return calibrated_curve(found, factors, spec.model, spec.gpu_model)
