"""Inference services in the simulator: replicas scaled by the production autoscaler, and the
requests they serve.

A service's replicas (`replica_gpus` GPUs each, one node by default) sit behind a least-loaded
balancer, modelled as one pool: a request finds room when the pool serves fewer requests than
its ready replicas hold (`slots` each, continuous batching); else it waits its turn, first come
first served, and its queueing delay is kept. A request takes `inference.service_s` on the
service's GPU model whatever the batch. A replica that is scaled down drains: what it serves
finishes, nothing new starts on it.

Arrivals are `inference.replay` of a trace under the daily curve. A day of a large service is
hundreds of millions of requests, so the pool is simulated at 1/`sample` of its size: arrivals
at 1/`sample` of the rate, `slots / sample` slots a replica, the load the autoscaler sees
multiplied back. A smaller pool smooths bursts less, so its shares and delays err on the
pessimistic side.

Every `tick_s` (2 s, the portal's period) the autoscaler (`scheduler.autoscale`) observes the
requests in flight (served and waiting) and decides the replica count. A scale-up submits
pending replica jobs to the service's queue at its priority: the engine admits them, reclaiming
borrowed GPUs where it must, and each serves `start_s` after it starts (loading its weights;
noticed at the next tick, as the portal's readiness probe would). A scale-down ends pending
replicas first, then the newest running ones; the next cycle hands their GPUs to waiting work.
For its first stable window the autoscaler only observes, and the service keeps the replicas it
starts with (`replicas`): with no load seen yet it would scale them down.
Figures count from `since` on, so a run can warm up first.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from scheduler.autoscale import Autoscaler, Settings
from scheduler.checkpointing import Policy, PolicyKind
from scheduler.inference import VALLEY, Request, read_trace, replay, service_s
from scheduler.sim.jobs import Job, Phase
from scheduler.sim.trace import TraceJob

TICK_S = 2.0  # the portal's autoscaling period
NODE_GPUS = 8
NO_SAVE = Policy(PolicyKind.NONE)  # a replica keeps no state worth saving


@dataclass(frozen=True)
class Service:
    """One inference service: its queue, its load (a trace at `peak_rps` under the daily
    curve) and its replicas."""

    name: str
    queue: str
    peak_rps: float
    autoscale: Settings
    slots: int = 32  # requests one replica serves at once
    replica_gpus: int = 8
    gpu_model: str = "H100"
    trace: str = "azure-conv"
    valley: float = VALLEY
    priority: int = 10  # above training, so the engine reclaims for it
    start_s: float = 30.0  # from admission to serving
    sample: int = 1  # simulate 1/sample of the pool (see the module docstring)
    replicas: int = 1  # replicas asked for at the start


class Pool:
    """A service's requests: arrivals, those being served (their end times) and those
    waiting, against the slots of its ready replicas."""

    def __init__(self, service: Service, begin_s: float, seconds: float, since: float) -> None:
        self.gpu_model = service.gpu_model
        self.sample = service.sample
        self.per_replica = service.slots / service.sample
        self.since = since
        self.arrivals: Iterator[Request] = replay(
            read_trace(service.trace),
            seconds=seconds,
            peak_rps=service.peak_rps / service.sample,
            start_s=begin_s,
            valley=service.valley,
        )
        self.next: Request | None = next(self.arrivals, None)
        self.ends: list[float] = []
        self.waiting: deque[Request] = deque()
        self.capacity = 0.0
        self.requests = 0  # counted from `since`, as are the two below
        self.found_room = 0
        self.delays: list[float] = []  # of the requests that waited

    def in_flight(self) -> float:
        """Requests served and waiting, at the service's full size."""
        return (len(self.ends) + len(self.waiting)) * self.sample

    def resize(self, now: float, ready: int) -> None:
        """`ready` replicas serve from `now`; waiting requests take any new room."""
        self.advance(now)
        self.capacity = ready * self.per_replica
        while self.waiting and len(self.ends) < self.capacity:
            self._serve(self.waiting.popleft(), now)

    def advance(self, until: float) -> None:
        """Play arrivals and ends up to `until`, in time order (an end first at a tie)."""
        ends, waiting = self.ends, self.waiting
        while True:
            arrival = self.next
            if ends and ends[0] <= until and (arrival is None or ends[0] <= arrival.at_s):
                done = heapq.heappop(ends)
                if waiting and len(ends) < self.capacity:
                    self._serve(waiting.popleft(), done)
                continue
            if arrival is None or arrival.at_s > until:
                return
            self.next = next(self.arrivals, None)
            counted = arrival.at_s >= self.since
            self.requests += counted
            if not waiting and len(ends) < self.capacity:
                self.found_room += counted
                heapq.heappush(ends, arrival.at_s + service_s(arrival, self.gpu_model))
            else:
                waiting.append(arrival)

    def _serve(self, request: Request, now: float) -> None:
        if request.at_s >= self.since:
            self.delays.append(now - request.at_s)
        heapq.heappush(self.ends, now + service_s(request, self.gpu_model))


@dataclass
class Reclaims:
    """What the service's scale-ups took from other work: the replicas that had room made
    for them (shrinking or preempting), the GPUs those moves freed, the work they threw away
    (GPU-seconds), and how long each replica waited from pending to started."""

    claimants: set[int] = field(default_factory=set)
    replicas: int = 0  # of `claimants`, those started
    gpus: int = 0
    lost_gpu_s: float = 0.0
    latencies: list[float] = field(default_factory=list)


class ServiceRun:
    """One service in one simulation: its autoscaler, pool and replica jobs."""

    def __init__(self, service: Service, begin_s: float, end_s: float, since: float) -> None:
        self.service = service
        self.autoscaler = Autoscaler(service.autoscale)
        self.pool = Pool(service, begin_s, end_s - begin_s, since)
        self.since = since
        self.deciding_from = begin_s + service.autoscale.stable_window_s
        self.replicas: list[Job] = []  # pending or running, oldest first
        self.reclaims = Reclaims()
        self.replica_s = 0.0  # replica-seconds running, from `since`

    def replica(self, job_id: int, now: float) -> TraceJob:
        """A new replica job, pending from `now` (it never finishes: it is ended)."""
        s = self.service
        return TraceJob(
            job_id,
            now,
            s.replica_gpus,
            s.gpu_model,
            math.inf,
            s.queue,
            priority=s.priority,
            checkpoint=NO_SAVE,
        )

    def ready(self, now: float) -> int:
        """Replicas serving: computing, and started at least `start_s` ago."""
        start_s = self.service.start_s
        return sum(
            1
            for job in self.replicas
            if job.phase == Phase.COMPUTE and job.started_at + start_s <= now
        )

    def tick(self, now: float) -> int:
        """Observe and decide at `now`; the change in replicas wanted (+ more, - fewer)."""
        ready = self.ready(now)
        self.pool.resize(now, ready)
        if now >= self.since:
            self.replica_s += TICK_S * sum(1 for job in self.replicas if job.running)
        self.autoscaler.observe(now, self.pool.in_flight())
        if now < self.deciding_from:
            return 0
        return self.autoscaler.decide(now, ready).replicas - len(self.replicas)

    def to_end(self, count: int) -> list[Job]:
        """The `count` replicas a scale-down ends: pending ones first, then the newest."""
        order = sorted(self.replicas, key=lambda job: (job.running, -job.id))
        gone = order[:count]
        self.replicas = [job for job in self.replicas if job not in gone]
        return gone

    def started(self, job: Job, now: float) -> None:
        """A replica was admitted: how long it waited for its GPUs."""
        if job.waiting_since >= self.since:
            self.reclaims.latencies.append(now - job.waiting_since)
            self.reclaims.replicas += job.id in self.reclaims.claimants
        self.reclaims.claimants.discard(job.id)

    def reclaimed(self, job_id: int, now: float, gpus: int) -> None:
        """Room is being made for replica `job_id`: `gpus` GPUs shrunk or preempted."""
        if now >= self.since:
            self.reclaims.claimants.add(job_id)
            self.reclaims.gpus += gpus

    def lost(self, now: float, gpu_s: float) -> None:
        """Work thrown away by a job preempted for a replica."""
        if now >= self.since:
            self.reclaims.lost_gpu_s += gpu_s

    def figures(self) -> dict:
        """SLO attainment, queueing delays (p99 over all requests) and reclaim figures."""
        pool = self.pool
        delays = sorted(pool.delays)
        latencies = sorted(self.reclaims.latencies)
        return {
            "requests": pool.requests * pool.sample,
            "slo_attainment": round(pool.found_room / pool.requests, 5) if pool.requests else 1,
            "queueing_p99_s": round(_quantile(delays, 0.99, pool.requests), 3),
            "replicas_started": len(latencies),
            "reclaim_p50_s": round(_quantile(latencies, 0.5), 1),
            "reclaim_p99_s": round(_quantile(latencies, 0.99), 1),
            "reclaimed_nodes": self.reclaims.replicas * self.service.replica_gpus / NODE_GPUS,
            "freed_gpus": self.reclaims.gpus,
            "lost_gpu_s": round(self.reclaims.lost_gpu_s, 1),
        }


def _quantile(values: list[float], q: float, count: int | None = None) -> float:
    """The q-quantile of `count` values (default: len), of which the sorted `values` are the
    largest and the rest are 0."""
    count = len(values) if count is None else count
    if not values or not count:
        return 0.0
    rank = math.ceil(q * count) - (count - len(values))
    return values[rank - 1] if rank >= 1 else 0.0
