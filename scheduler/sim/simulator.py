"""The discrete-event simulator: a simulated clock, an event heap, and the production engine.

Events, at equal times in this order: job events (a phase ends, an async copy is persisted, a
fault), arrivals, then the engine cycle, so a cycle sees everything that happened at its time.
Ties within a kind go by the order they were scheduled in.

A cycle runs only when something changed that could change the plan (an arrival, a finish, or
a plan that admitted, preempted or shrank work while work still waits) and something is pending
(the engine admits nothing else). A fault is no such change: the job restarts on the GPUs it
holds (a hot spare replaces the failed node), so what the engine sees held stays the same.
Changes within one period are coalesced: a change at time t runs a cycle at
max(t, previous cycle + `cycle_s`). The plan takes effect at once: preempted jobs stop and
wait again, shrunk jobs give back GPUs, admitted jobs start.

With `SimConfig.preemption_grace_s` set, a preempted job stops computing and keeps its GPUs
while it saves (`Job.notice`), and the GPUs a shrink gives back stay busy for the job's save,
so whoever claimed them waits for it; else both take effect at once (the save's time not
modelled). Inference services (`services`) add an autoscaler tick every 2 s and replica jobs
that come and go as the run goes; a run with services needs a horizon. The cluster's budgets
(`scheduler.sim.budgets`) are metered as GPUs are taken and given back and go to the engine in
each snapshot; a window's renewal runs a cycle while work waits. With `SimConfig.defrag` the
engine is told which pods are due for defragmentation and their moves left
(`scheduler.sim.defrag`); while work waits, a cycle runs when that changes and when a running
job becomes movable, and a defragmentation move is applied as any move (the job saves and
restarts from its save on its new GPUs).

Everything random (fault times, kinds, whether a triggered save is possible) comes from one
generator seeded with `SimConfig.seed`, drawn in event order, so the same inputs and seed give
the same result, bit for bit.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import IntEnum

from scheduler.calibration import Table
from scheduler.checkpointing import FAILURES_PER_GPU_HOUR, Costs, Policy, PolicyKind
from scheduler.engine import NodeIndex, Placement, Plan
from scheduler.engine.cycle import paused_collector
from scheduler.interruptions import Cause, Restart, save_first, where
from scheduler.sim.budgets import BudgetMeter
from scheduler.sim.defrag import Defrag, DefragMeter
from scheduler.sim.faultmodel import LLAMA3_MIX, FaultModel
from scheduler.sim.incidents import SLOWDOWNS, Detection, Incident
from scheduler.sim.jobs import Checkpointing, Job, Phase
from scheduler.sim.metrics import Recorder, Series
from scheduler.sim.policies import SchedulingPolicy
from scheduler.sim.services import TICK_S, Service, ServiceRun
from scheduler.sim.spec import ClusterSpec
from scheduler.sim.state import Allocations, SimulationError, Workloads
from scheduler.sim.trace import TraceJob


@dataclass(frozen=True)
class SimConfig:
    """How to simulate; every field has the reference value by default."""

    seed: int = 1
    cycle_s: float = 10.0  # the shortest time between two engine cycles
    costs: Costs = field(default_factory=Costs)
    failures_per_gpu_hour: float = FAILURES_PER_GPU_HOUR  # 0 for no faults
    fault_mix: tuple[tuple[str, float], ...] = LLAMA3_MIX
    checkpoint: Policy = Policy(PolicyKind.PERIODIC)  # for jobs whose trace names none
    time_limits: bool = False  # tell the engine each job's trace duration as its time limit
    grow_every_s: float = 300.0  # an elastic job grows at most this often (`Snapshot`)
    move_every_s: float = 3600.0  # a job moves to a faster GPU model at most this often
    detection: Detection = Detection()  # how scripted incidents are noticed
    horizon_s: float | None = None  # stop at this simulated time; None: when all is done
    series_step_s: float = 3600.0  # time series are averaged into buckets this long
    preemption_grace_s: float | None = None  # a victim's most time to save; None: no wait
    since_s: float | None = None  # services' figures count from then (None: the start)
    # The fleet's calibration (`scheduler.calibration.table`, as the portal's
    # `workloads.calibration.factors` reads it); None: the planner's curves as modelled.
    calibration: Table | None = None
    defrag: Defrag | None = None  # scheduled defragmentation (`scheduler.sim.defrag`); None: off


class Kind(IntEnum):
    """Event kinds; the value orders events of equal time."""

    PHASE = 0  # a job's phase ends
    PERSIST = 1  # a job's async copy is persisted
    FAULT = 2  # a job is hit by a fault
    INCIDENT = 3  # a scripted incident happens, or is noticed
    RELEASE = 4  # GPUs a shrunk job gave back are free, its save done
    ARRIVAL = 5
    TICK = 6  # the services' autoscalers look at their load
    CYCLE = 7


Hook = Callable[["Simulator"], None]


class Simulator:
    """One policy's run over one trace on one cluster."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        spec: ClusterSpec,
        policy: SchedulingPolicy,
        config: SimConfig = SimConfig(),
        on_event: Hook | None = None,
        incidents: Sequence[Incident] = (),
        services: Sequence[Service] = (),
    ) -> None:
        with paused_collector():  # tens of thousands of objects, all to be kept, each
            # automatic collection would walk all made so far
            self._setup(trace, spec, policy, config, on_event, incidents, services)

    def _setup(
        self,
        trace: Sequence[TraceJob],
        spec: ClusterSpec,
        policy: SchedulingPolicy,
        config: SimConfig,
        on_event: Hook | None,
        incidents: Sequence[Incident],
        services: Sequence[Service],
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.config = config
        self.on_event = on_event
        self.rng = random.Random(config.seed)
        self.faults = FaultModel(config.failures_per_gpu_hour, config.fault_mix)
        self.allocations = Allocations(spec)
        self.index = NodeIndex()  # the engine's index of the nodes, kept from cycle to cycle
        self.workloads = Workloads(
            spec, policy, config.time_limits, config.grow_every_s, config.move_every_s
        )
        self.start = min((job.submit_s for job in trace), default=0.0)
        self.budgets = BudgetMeter(spec.budgets, self.start)
        self._renewal_at: float | None = None  # the cycle booked for a budget's renewal
        self.defrag = self._defrag(config.defrag)
        self._movable: list[tuple[float, int]] = []  # (when it may move, job id), defrag on
        self._defrag_at: float | None = None  # the cycle booked for defragmentation
        self._smallest_node = min((node.gpus for node in spec.nodes), default=0)
        self.now = self.end = self.start  # `end`: where the run stopped, once it has
        self.jobs = {job.id: self._job(job) for job in trace}
        if len(self.jobs) != len(trace):
            raise SimulationError("job ids in the trace are not unique")
        nominal = {
            (q.name, quota.gpu_model): quota.nominal for q in spec.queues for quota in q.quotas
        }
        self.recorder = Recorder(
            self.allocations, nominal, config.cycle_s, self.start, config.series_step_s
        )
        self._heap: list[tuple] = []
        self._seq = 0
        self._versions: dict[tuple[int, Kind], int] = {}
        self.pending: set[int] = set()
        # Running jobs the engine may resize: elastic ones below their most, and ones on a
        # slower GPU model than the fastest they accept (it may move them).
        self.growable: set[int] = set()
        self.ended: set[int] = set()
        self.events = 0
        self._last_cycle = -math.inf
        self._cycle_at: float | None = None
        self.last_plan: Plan | None = None  # the latest cycle's plan, for hooks
        for job in trace:
            self._push(job.submit_s, Kind.ARRIVAL, job.id, 0)
        self.incidents = tuple(incidents)
        self.spares = set(spec.spares)
        for number, incident in enumerate(self.incidents):
            if incident.job_id not in self.jobs:
                raise SimulationError(f"an incident names job {incident.job_id}, not in the trace")
            self._push(incident.at_s, Kind.INCIDENT, number, 0)  # version: 0 begun, 1 noticed
        self._claimants: dict[int, int] = {}  # stopping job -> the workload it stops for
        self._releasing: dict[int, tuple[Placement, ...]] = {}  # GPUs a shrunk job saves on
        self._release_keys = itertools.count(-1, -1)  # their stopping workloads' ids
        self.services = [self._service(service) for service in services]
        self.replicas: dict[int, ServiceRun] = {}  # replica job id -> its service
        self._next_id = max(self.jobs, default=0) + 1
        for run in self.services:
            for _ in range(run.service.replicas):
                self._add_replica(run)
        # GPUs held by services' replicas and by the other work, sampled every tick.
        since = self.start if config.since_s is None else config.since_s
        self.tide = {kind: Series(config.series_step_s, since) for kind in ("inference", "other")}
        if self.services:
            self._push(self.start, Kind.TICK, 0, 0)

    def _defrag(self, defrag: Defrag | None) -> DefragMeter | None:
        if defrag is None:
            return None
        pods = {node.pod for node in self.spec.nodes}
        unknown = sorted(set(defrag.pods) - pods)
        if unknown:
            raise SimulationError(
                f"defragmentation names pod(s) {', '.join(unknown)}, which the cluster "
                f"{self.spec.name} does not have"
            )
        return DefragMeter(defrag, sorted(pods))

    def _service(self, service: Service) -> ServiceRun:
        if self.config.horizon_s is None:
            raise SimulationError("a run with services needs a horizon")
        if service.queue not in self.spec.queue_ids:
            raise SimulationError(f"service {service.name} names queue {service.queue!r}")
        since = self.start if self.config.since_s is None else self.config.since_s
        return ServiceRun(service, self.start, self.config.horizon_s, since)

    def _job(self, spec: TraceJob) -> Job:
        if spec.queue not in self.spec.queue_ids:
            raise SimulationError(
                f"job {spec.id} names queue {spec.queue!r}, which the cluster "
                f"{self.spec.name} does not have"
            )
        profiles = self.spec.mig_profiles.get(spec.gpu_model, {})
        if spec.mig and spec.mig != profiles.get(spec.mig.name):
            raise SimulationError(
                f"job {spec.id} asks for MIG profile {spec.mig.name}, which {spec.gpu_model} "
                f"GPUs of the cluster {self.spec.name} do not have"
            )
        policy = spec.checkpoint or self.config.checkpoint
        ckpt = Checkpointing.resolve(
            policy, spec.gpus, self.config.costs, self.config.failures_per_gpu_hour
        )
        return Job(spec, ckpt, self.config.costs, self.config.calibration)

    # -- the loop ----------------------------------------------------------------------------

    def run(self, on_progress: Callable[[float], None] | None = None) -> Recorder:
        """Run until nothing is left to happen (or the horizon); the recorder holds the
        figures. `on_progress(simulated time)` is called now and then."""
        with _quiet_collector():
            self._loop(on_progress)
        return self.recorder

    def _loop(self, on_progress: Callable[[float], None] | None) -> None:
        horizon = self.config.horizon_s
        stopped = False
        while self._heap:
            when, kind, _, job_id, version = heapq.heappop(self._heap)
            if horizon is not None and when > horizon:
                stopped = True
                break
            if kind < Kind.INCIDENT and self._versions.get((job_id, kind)) != version:
                continue  # superseded
            self.now = when
            self.events += 1
            self._dispatch(kind, job_id, version)
            if self.on_event is not None:
                self.on_event(self)
            if on_progress is not None and not self.events % 4096:
                on_progress(self.now)
        self._close(stopped)

    def _dispatch(self, kind: Kind, job_id: int, version: int) -> None:
        if kind == Kind.CYCLE:
            self._cycle()
        elif kind == Kind.TICK:
            self._tick()
        elif kind == Kind.RELEASE:
            self._released(job_id)
        elif kind == Kind.ARRIVAL:
            self._arrive(self.jobs[job_id])
        elif kind == Kind.INCIDENT:
            self._incident(job_id, noticed=version == 1)
        else:
            job = self.jobs[job_id]
            with self._tracking(job, faults=kind == Kind.FAULT):
                if kind == Kind.PHASE and job.phase == Phase.STOPPING:
                    self._stopped(job)
                elif kind == Kind.PHASE:
                    if job.phase_ended(self.now):
                        self._finish(job)
                elif kind == Kind.PERSIST:
                    job.persisted(self.now)
                else:
                    self._fault(job)

    def _close(self, stopped: bool) -> None:
        """Book the jobs still pending or running at the end: the horizon if the run stopped
        there, else the last event."""
        end = self.config.horizon_s if stopped else self.now
        for job in self.jobs.values():
            if job.id not in self.ended:
                job.advance(end)
                if job.id not in self.replicas:
                    self.recorder.job_ended(job, end)
                self.ended.add(job.id)
        self.recorder.finish(end)
        self.end = end

    # -- scheduling events -------------------------------------------------------------------

    def _push(self, when: float, kind: Kind, job_id: int, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, kind, self._seq, job_id, version))

    def _schedule(self, job: Job, kind: Kind, when: float | None) -> None:
        """(Re)schedule one of a job's event streams; None cancels it."""
        key = (job.id, kind)
        version = self._versions.get(key, 0) + 1
        self._versions[key] = version
        if when is not None:
            self._push(when, kind, job.id, version)

    def _reschedule(self, job: Job, faults: bool, persist: bool) -> None:
        """Schedule the job's next phase end; its persist and next fault when asked (a new
        fault time is drawn whenever the GPUs it holds change, or after a fault)."""
        running = job.running
        self._schedule(job, Kind.PHASE, job.next_phase_at() if running else None)
        if persist or not running:
            self._schedule(job, Kind.PERSIST, job.persisting_until if running else None)
        if faults or not running:
            when = None
            if running and self.faults.enabled and job.phase != Phase.STOPPING:
                when = self.now + self.faults.next_in(self.rng, job.held)
            self._schedule(job, Kind.FAULT, when)

    def _tracking(self, job: Job, faults: bool = False) -> _Tracking:
        return _Tracking(self, job, faults)

    def request_cycle(self) -> None:
        """Ask for a cycle: now, or one period after the last, unless one is coming."""
        if self._cycle_at is not None or not (self.pending or self.growable):
            return
        self._cycle_at = max(self.now, self._last_cycle + self.config.cycle_s)
        self._push(self._cycle_at, Kind.CYCLE, 0, 0)

    # -- handlers ----------------------------------------------------------------------------

    def _arrive(self, job: Job) -> None:
        self.pending.add(job.id)
        self.recorder.pending_added(job)
        self.workloads.changed(job)
        self.request_cycle()

    def _finish(self, job: Job) -> None:
        self.growable.discard(job.id)
        self.allocations.give(job.placements, job.id)
        job.finish(self.now)
        self.workloads.changed(job)
        if job.id not in self.replicas:
            self.recorder.job_ended(job, self.now)
        self.ended.add(job.id)
        self.request_cycle()

    def _fault(self, job: Job) -> None:
        kind = self.faults.kind(self.rng)
        self.recorder.faults[kind.code] += 1
        if kind.kills_job:
            # The job restarts on the same GPUs (a hot spare replaces the failed node), so the
            # engine would see no change in what is held: no cycle is needed.
            possible = self.rng.random() < self.config.costs.triggered_success
            job.fault(self.now, possible and job.ckpt.kind is PolicyKind.TRIGGERED)
            self.workloads.changed(job)

    def _incident(self, number: int, noticed: bool) -> None:
        """Scripted incident `number` (see `incidents`): when it happens, a hang or a straggler
        slows the job and anything the control plane must notice waits for its delay; once
        noticed, the job recovers as the portal would."""
        incident = self.incidents[number]
        job = self.jobs[incident.job_id]
        if not job.running or incident.node_rank >= len(job.placements):
            return  # it ended, waits, or no longer has that node
        detection = self.config.detection
        if not noticed:
            if incident.code in SLOWDOWNS:
                with self._tracking(job):
                    job.slow(self.now, SLOWDOWNS[incident.code])
            delay = detection.delay(incident.code)
            if delay > 0:
                self._push(self.now + delay, Kind.INCIDENT, number, 1)
                return
        kind = incident.kind
        self.recorder.faults[kind.code] += 1
        if not detection.recovers(incident):
            return
        cause = Cause.DRAIN if incident.code == "drain" else Cause.FAULT
        asked = save_first(cause, job.ckpt.kind, True, kind, nodes=len(job.placements))
        save = asked is not None
        node = job.placements[incident.node_rank]
        with self._tracking(job, faults=True):
            outcome = self._leave(job, node) if detection.leaves(incident) else "in place"
            if outcome == "requeued":
                job.requeue(self.now, save)
            else:
                job.fault(self.now, save, outcome)
        if outcome == "requeued":
            self.growable.discard(job.id)
            self.pending.add(job.id)
            self.recorder.pending_added(job)
        elif outcome == "shrunk":
            self._may_grow(job)
        self.request_cycle()

    def _leave(self, job: Job, leaving: Placement) -> str:
        """Move the job's part on a node off it, as the portal's recovery does: onto a hot
        spare of the same pod, else without it (elastic and still at its minimum), else off
        every node (requeued), as `interruptions.where` says. The node takes no more work.
        Returns the outcome."""
        allocations = self.allocations
        allocations.give([leaving], job.id)
        allocations.close(leaving.node_id)
        old = allocations.nodes[leaving.node_id]
        spare = next(
            (
                n
                for n in sorted(self.spares)
                if (allocations.nodes[n].datacenter, allocations.nodes[n].pod)
                == (old.datacenter, old.pod)
            ),
            None,
        )
        held = job.spec.gpus if job.spec.fractional else job.held  # a share or MIG job: its GPU
        outcome = where(len(leaving.gpu_indices), held, job.spec.min_gpus, spare is not None)
        if outcome is Restart.SPARE:
            self.spares.discard(spare)
            allocations.close(spare, False)
            moved = Placement(spare, leaving.gpu_indices)
            allocations.take([moved], job.id, *_part(job))
            job.move(self.now, tuple(moved if p is leaving else p for p in job.placements))
        elif outcome is Restart.SHRUNK:
            job.move(self.now, _without(job.placements, (leaving,)))
        else:
            allocations.give(_without(job.placements, (leaving,)))
        return outcome.value

    def _cycle(self) -> None:
        self._cycle_at = None
        self._last_cycle = self.now
        if not self.pending and not self.growable:
            return
        self.recorder.cycle_started(self.now)
        due = self.defrag.due(self.now) if self.defrag else ()
        snapshot = self.workloads.snapshot(self.allocations, self.budgets.budgets(self.now), due)
        plan = self.last_plan = self.policy.plan(snapshot, self.now, self.index)
        self._apply(plan)
        self.recorder.cycle_ended(self.now)
        if plan.admissions or plan.preemptions or plan.shrinks or plan.grows or plan.moves:
            self.request_cycle()
        # A budget's window letting go of what it used may let waiting work in: a cycle then
        # (none once no window holds anything, so a job no budget can ever allow ends the run).
        if self.budgets and self.pending:
            renewal = self.budgets.next_renewal(self.now)
            if renewal is not None and renewal != self._renewal_at:
                self._renewal_at = renewal
                self._push(renewal, Kind.CYCLE, 0, 0)
        if self.defrag and self.pending:
            self._wake_for_defrag()

    def _wake_for_defrag(self) -> None:
        """While a gang of whole nodes waits and work runs, book a cycle for when
        defragmentation could do what it could not now: a daily run begins, a move leaves the
        hour's count, or a running job becomes movable (`Snapshot.move_every_s` after it
        started or moved). Nothing running, nothing can move: no cycle (so a gang that can
        never start ends the run)."""
        gang = self._smallest_node
        if not any(self.allocations.used.values()) or not any(
            self.jobs[job_id].spec.gpus >= gang for job_id in self.pending
        ):
            return
        times = [self.defrag.next_change(self.now)]
        movable = self._movable
        while movable and movable[0][0] <= self.now:
            heapq.heappop(movable)
        defrag = self.defrag.defrag
        if movable and (defrag.when_scattered or defrag.in_window(self.now)):
            times.append(movable[0][0])
        wake = min((t for t in times if t is not None), default=None)
        if wake is not None and wake != self._defrag_at:
            self._defrag_at = wake
            self._push(wake, Kind.CYCLE, 0, 0)

    def _apply(self, plan: Plan) -> None:
        """Preempted jobs stop and wait again, shrunk ones give back GPUs, grown ones take
        more, moved ones go to another model's GPUs, admitted ones start; in that order, so
        GPUs are freed before any are taken."""
        grace = self.config.preemption_grace_s
        for preemption in plan.preemptions:
            job = self.jobs[preemption.workload_id]
            self.growable.discard(job.id)
            self._reclaimed(preemption.for_workload_id, job.held)
            if grace is not None:
                with self._tracking(job):
                    job.notice(self.now, grace)
                self.workloads.changed(job)
                self._claimants[job.id] = preemption.for_workload_id
                continue
            with self._tracking(job):
                self.allocations.give(job.placements, job.id)
                job.preempt(self.now)
                self.pending.add(job.id)
                self.recorder.pending_added(job)
            self.recorder.preemptions += 1
        for shrink in plan.shrinks:
            job = self.jobs[shrink.workload_id]
            held, rate = job.held, job.rate
            self._reclaimed(shrink.for_workload_id, held - shrink.gpus)
            with self._tracking(job, faults=True):
                self._give_back(job, shrink.released)
                job.resize(self.now, _without(job.placements, shrink.released))
            self.recorder.shrunk(job.held / held, job.rate / rate)
            self._may_grow(job)
        for grow in plan.grows:
            job = self.jobs[grow.workload_id]
            with self._tracking(job, faults=True):
                self.allocations.take(grow.added, job.id)
                job.resize(self.now, _with(job.placements, grow.added))
            self.recorder.grows += 1
            self._may_grow(job)
        for move in plan.moves:
            job = self.jobs[move.workload_id]
            with self._tracking(job, faults=True):
                self.allocations.give(job.placements, job.id)
                self.allocations.take(move.placements, job.id)
                job.resize(self.now, move.placements, move.gpu_model, move.pod)
            if move.pod:
                self.recorder.defrag_moves += 1
                self.defrag.moved(move.pod, self.now)
            else:
                self.recorder.moves += 1
            self._may_defrag(job)
        for admission in plan.admissions:
            job = self.jobs[admission.workload_id]
            if job.id not in self.pending:
                raise SimulationError(f"the plan admits job {job.id}, which is not pending")
            if job.id in self.replicas:
                self.replicas[job.id].started(job, self.now)
            with self._tracking(job, faults=True):
                self.allocations.take(admission.placements, job.id, *_part(job))
                model = self.allocations.nodes[admission.placements[0].node_id].gpu_model
                job.start(self.now, admission.placements, model)
                self.pending.discard(job.id)
                self.recorder.pending_removed(job)
            self._may_grow(job)

    def _give_back(self, job: Job, released: tuple[Placement, ...]) -> None:
        """Free the GPUs a shrink releases: at once, or with a grace once the job's save is
        done, shown to the engine meanwhile as a stopping workload of the job's queue."""
        grace = self.config.preemption_grace_s
        if grace is None or not job.save_s():
            self.allocations.give(released)
            return
        key = next(self._release_keys)
        self._releasing[key] = released
        gpus = sum(len(p.gpu_indices) for p in released)
        stopping = replace(
            self.workloads.workload(job),
            id=key,
            gpus=gpus,
            placements=released,
            min_gpus=None,
            max_gpus=None,
            throughput=(),
            preempting=True,
        )
        self.workloads.hold(stopping)
        self._push(self.now + min(job.save_s(), grace), Kind.RELEASE, key, 0)

    def _released(self, key: int) -> None:
        """A shrunk job's save is done: the GPUs it gave back are free."""
        self.allocations.give(self._releasing.pop(key))
        self.workloads.drop(key)
        self.request_cycle()

    def _stopped(self, job: Job) -> None:
        """A preempted job's grace is over: its GPUs are free, and it waits again."""
        self.allocations.give(job.placements, job.id)
        lost = job.released(self.now)
        run = self.replicas.get(self._claimants.pop(job.id, 0))
        if run is not None:
            run.lost(self.now, lost)
        self.pending.add(job.id)
        self.recorder.pending_added(job)
        self.recorder.preemptions += 1
        self.request_cycle()

    def _reclaimed(self, claimant: int, gpus: int) -> None:
        """Count GPUs taken from other work for a service's replica."""
        run = self.replicas.get(claimant)
        if run is not None:
            run.reclaimed(claimant, self.now, gpus)

    # -- services ----------------------------------------------------------------------------

    def _tick(self) -> None:
        """Every service's autoscaler decides; replicas are added or ended to match."""
        for run in self.services:
            change = run.tick(self.now)
            for _ in range(change):
                self._add_replica(run)
            if change < 0:
                for job in run.to_end(-change):
                    self._end_replica(job)
                run.pool.resize(self.now, run.ready(self.now))
        inference = sum(job.held for run in self.services for job in run.replicas)
        if self.now >= self.tide["inference"].start:
            self.tide["inference"].set(self.now, inference)
            self.tide["other"].set(self.now, sum(self.allocations.used.values()) - inference)
        self._push(self.now + TICK_S, Kind.TICK, 0, 0)

    def _add_replica(self, run: ServiceRun) -> None:
        job = self._job(run.replica(self._next_id, self.now))
        self._next_id += 1
        self.jobs[job.id] = job
        self.replicas[job.id] = run
        run.replicas.append(job)
        self._arrive(job)

    def _end_replica(self, job: Job) -> None:
        """A scale-down: a pending replica is withdrawn, a running one stops."""
        if job.id in self.pending:
            self.pending.discard(job.id)
            self.recorder.pending_removed(job)
        with self._tracking(job):
            self._finish(job)

    def _may_defrag(self, job: Job) -> None:
        """Note when a running job defragmentation may move becomes movable: one that saves,
        was not marked not to move, and holds whole GPUs of one node."""
        if (
            self.defrag
            and job.spec.movable
            and job.ckpt.kind is not PolicyKind.NONE
            and len(job.placements) == 1
            and not job.spec.slices
        ):
            since = max(t for t in (job.started_at, job.resized_at) if t is not None)
            heapq.heappush(self._movable, (since + self.config.move_every_s, job.id))

    def _may_grow(self, job: Job) -> None:
        """Note a running job the engine may resize, and look again when it may: an elastic
        one below its most, or one on a slower GPU model than the fastest it accepts."""
        self._may_defrag(job)
        if job.spec.min_gpus is not None and job.held < job.spec.gpus:
            self.growable.add(job.id)
            self._push(self.now + self.config.grow_every_s, Kind.CYCLE, 0, 0)
        elif self.workloads.policy.speeds and _slower_than_best(job):
            self.growable.add(job.id)
            self._push(self.now + self.config.move_every_s, Kind.CYCLE, 0, 0)
        else:
            self.growable.discard(job.id)


@contextmanager
def _quiet_collector() -> Iterator[None]:
    """Keep Python's cyclic garbage collector from scanning the simulation's state over and
    over: each cycle allocates a snapshot's worth of objects, which would trigger full
    collections that walk every live job. The state is frozen out of the collector's sight and
    collections are made rarer for the run (the objects a cycle makes are freed by reference
    counting anyway); both are restored after."""
    threshold = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


class _Tracking:
    """Around a change to one job: book the GPUs it takes or gives back, the change in busy
    GPUs, rebuild its workload and reschedule its events."""

    def __init__(self, sim: Simulator, job: Job, faults: bool = False) -> None:
        self.sim = sim
        self.job = job
        self.faults = faults

    def __enter__(self) -> None:
        job = self.job
        self.held = job.held
        self.busy = job.held if job.phase == Phase.COMPUTE else 0
        self.checkpoint = job.last_checkpoint_at
        self.persisting = job.persisting_until

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        sim, job = self.sim, self.job
        recorder = sim.recorder
        recorder.gpus_changed(sim.now, job, job.held - self.held)
        if sim.budgets:
            queue_id = sim.spec.queue_ids[job.spec.queue]
            sim.budgets.changed(sim.now, queue_id, job.gpu_model, job.held - self.held)
        recorder.busy_changed(sim.now, (job.held if job.phase == Phase.COMPUTE else 0) - self.busy)
        if job.held != self.held or job.last_checkpoint_at != self.checkpoint:
            sim.workloads.changed(job)
        sim._reschedule(
            job, self.faults or job.held != self.held, job.persisting_until != self.persisting
        )


def _with(placements: tuple[Placement, ...], added: tuple[Placement, ...]) -> tuple[Placement, ...]:
    """Placements with the GPUs a grow adds (on a node it has, or on new nodes after its own)."""
    indices = {p.node_id: list(p.gpu_indices) for p in placements}
    for placement in added:
        indices.setdefault(placement.node_id, []).extend(placement.gpu_indices)
    return tuple(Placement(node, tuple(sorted(gpus))) for node, gpus in indices.items())


def _without(
    placements: tuple[Placement, ...], released: tuple[Placement, ...]
) -> tuple[Placement, ...]:
    """Placements less the GPUs released by a shrink."""
    gone = {(p.node_id, i) for p in released for i in p.gpu_indices}
    kept = []
    for placement in placements:
        indices = tuple(i for i in placement.gpu_indices if (placement.node_id, i) not in gone)
        if indices:
            kept.append(Placement(placement.node_id, indices))
    return tuple(kept)


def _part(job: Job) -> tuple[int, str]:
    """The part of its one GPU a share or MIG job takes: its eighths, its MIG profile."""
    return job.spec.slices, job.spec.mig.name if job.spec.mig else ""


def _slower_than_best(job: Job) -> bool:
    """Whether the job runs on a GPU model slower than the fastest it accepts."""
    speeds = dict(job.spec.speeds)
    return bool(speeds) and speeds.get(job.gpu_model, 0.0) < max(speeds.values())
