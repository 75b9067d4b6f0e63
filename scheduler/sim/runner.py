"""Run a trace on a cluster under several policies and gather the figures: the entry point for
the command line, the benchmarks and the portal.

    from scheduler.sim import SimConfig, load_spec, load_csv, run
    results = run(load_csv("trace.csv"), load_spec("cluster.json"), ["wanka", "fifo"],
                  config=SimConfig(seed=7), on_progress=lambda f, msg: print(f, msg))

`run` returns a JSON-ready dict (no wall-clock figures in it, so the same inputs and seed give
the same JSON bit for bit); `scheduler.sim.report.write_html` turns it into a report.

`service_share=0.3` adds an inference service beside the trace (`with_service`): the Azure
conversation service, sized as `bench.tidal` sizes it, whose peak needs that share of the
cluster. A run with a service needs a horizon; without one in the config it stops a day after
the trace's first submission, one turn of the tide.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence

from scheduler.autoscale import Settings
from scheduler.engine import Queue, Quota
from scheduler.inference import daily_factor, mean_service_s, read_trace
from scheduler.sim.policies import make_policy
from scheduler.sim.services import Service
from scheduler.sim.simulator import Hook, SimConfig, Simulator
from scheduler.sim.spec import ClusterSpec, SpecError
from scheduler.sim.summary import default_large_gang, summarize, tide
from scheduler.sim.trace import TraceJob, format_policy
from scheduler.words import phrase

# Progress, as a what-if's page shows it.
DAY, DONE = phrase("{policy}: day {day}"), phrase("{policy}: done")

Progress = Callable[[float, str], None]
DEFAULTS = SimConfig()
SERVICE_QUEUE = "conversation"
SERVICE_DAY_S = 86400.0  # a run with a service and no horizon: one day, one turn of the tide
SLOTS = 32  # requests a replica serves at once
TARGET = 0.7 * SLOTS  # Knative's target utilisation of those slots
POOL_REPLICAS = 24  # a pool is simulated at about this many replicas (`Service.sample`)


def simulate(
    trace: Sequence[TraceJob],
    spec: ClusterSpec,
    policy: str,
    config: SimConfig = DEFAULTS,
    on_progress: Callable[[float], None] | None = None,
    hook: Hook | None = None,
    services: Sequence[Service] = (),
) -> Simulator:
    """One policy's run; the simulator, after running, holds the recorder and counters."""
    simulator = Simulator(
        trace, spec, make_policy(policy, spec), config, on_event=hook, services=services
    )
    simulator.run(on_progress)
    return simulator


def run(
    trace: Sequence[TraceJob],
    spec: ClusterSpec,
    policies: Sequence[str] = ("wanka",),
    *,
    config: SimConfig = DEFAULTS,
    on_progress: Progress | None = None,
    large_gang_gpus: int | None = None,
    hook: Hook | None = None,
    service_share: float | None = None,
) -> dict:
    """Every policy's figures for the trace on the cluster (see `summary` for what they mean),
    with an inference service beside the trace when `service_share` is given (see the module
    docstring).

    `on_progress(fraction, message)` is called as the runs go, with a fraction from 0 to 1.
    """
    names = list(dict.fromkeys(policies))  # each once, in the order given
    services: tuple[Service, ...] = ()
    if service_share is not None:
        first = _first_submit(trace)
        spec, service = with_service(spec, service_share, first)
        services = (service,)
        if config.horizon_s is None:
            config = dataclasses.replace(config, horizon_s=first + SERVICE_DAY_S)
    for name in names:
        make_policy(name, spec)  # fail on an unknown name before any long run
    large = large_gang_gpus or default_large_gang(spec.gpus)
    nominal: Counter[str] = Counter()
    for queue in spec.queues:
        nominal[queue.name] += sum(q.nominal for q in queue.quotas)
    results = {
        "cluster": describe_cluster(spec),
        "trace": describe_trace(trace),
        "config": describe_config(config),
        "policies": {},
    }
    if services:
        results["service"] = describe_service(services[0], service_share, spec)
    for index, name in enumerate(names):
        tell = _progress(on_progress, trace, config.horizon_s, index, len(names), name)
        simulator = simulate(trace, spec, name, config, tell, hook, services)
        figures = summarize(
            simulator.recorder,
            start=simulator.start,
            end=simulator.end,
            capacity=spec.capacity,
            nominal=dict(nominal),
            large_gang_gpus=large,
        )
        figures["events"] = simulator.events
        figures["preemption"] = describe_preemption(make_policy(name, spec).queues)
        if services:
            figures["tide"] = tide(simulator.tide, simulator.end)
            figures["service"] = simulator.services[0].figures()
        results["policies"][name] = figures
        if on_progress is not None:
            on_progress((index + 1) / len(names), DONE.format(policy=name))
    return results


def _progress(
    on_progress: Progress | None,
    trace: Sequence[TraceJob],
    horizon_s: float | None,
    index: int,
    count: int,
    name: str,
) -> Callable[[float], None] | None:
    """A per-run callback turning simulated time into the fraction of all runs done: of the
    time to the horizon, or to the last submission when there is none."""
    if on_progress is None:
        return None
    first = _first_submit(trace)
    last = max((job.submit_s for job in trace), default=0.0) if horizon_s is None else horizon_s
    span = last - first or 1.0

    def tell(now: float) -> None:
        done = min(0.99, (now - first) / span)
        day = f"{(now - first) / 86400:.1f}"
        on_progress((index + done) / count, DAY.format(policy=name, day=day))

    return tell


def _first_submit(trace: Sequence[TraceJob]) -> float:
    return min((job.submit_s for job in trace), default=0.0)


def with_service(spec: ClusterSpec, share: float, begin_s: float) -> tuple[ClusterSpec, Service]:
    """The cluster with a queue for the Azure conversation service, and the service, whose
    peak needs `share` of the GPUs of the cluster's main GPU model, as `bench.tidal` sizes it.

    Replicas of one node, 32 requests at once each, scaled by the autoscaler to 70 % of that
    with a 5-minute scale-down delay; the pool simulated at about `POOL_REPLICAS` replicas.
    The service's queue (`service_queue`) has its peak as its quota, carved out of the other
    queues' quotas of that model in proportion where they leave it no room. It starts with
    the replicas the load of `begin_s` wants. SpecError when the share is out of range or the
    queue's name is taken."""
    if not 0 < share < 1:
        raise SpecError(
            f"the service's share of the cluster must be above 0 and below 1, not {share}"
        )
    if SERVICE_QUEUE in spec.queue_ids:
        raise SpecError(f"the cluster already has a queue {SERVICE_QUEUE!r} for the service")
    model = max(spec.capacity, key=lambda m: (spec.capacity[m], m))
    node_gpus = Counter(n.gpus for n in spec.nodes if n.gpu_model == model).most_common(1)[0][0]
    peak = max(1, round(share * spec.capacity[model] / node_gpus))
    queues = _carved(spec.queues, model, peak * node_gpus, spec.capacity[model])
    queues.append(service_queue(spec, Quota(model, peak * node_gpus)))
    rps = peak * TARGET / mean_service_s(read_trace("azure-conv"), model)
    settings = Settings(target=TARGET, min_replicas=1, max_replicas=peak, scale_down_delay_s=300)
    service = Service(
        "conversation",
        SERVICE_QUEUE,
        rps,
        settings,
        slots=SLOTS,
        replica_gpus=node_gpus,
        gpu_model=model,
        sample=math.ceil(peak / POOL_REPLICAS),
        replicas=math.ceil(peak * daily_factor(begin_s)),
    )
    return dataclasses.replace(spec, queues=tuple(queues)), service


def service_queue(spec: ClusterSpec, quota: Quota) -> Queue:
    """The service's queue: priority 10, above training, so the engine reclaims for it; in the
    cohort of the queue with the most of its GPU model's quota, so its valleys are lent to
    training; in the region with the most of that model's GPUs (a queue's work runs only in
    its own region)."""
    model = quota.gpu_model
    biggest = max(spec.queues, key=lambda q: q.quota(model).nominal, default=None)
    regions: Counter[str] = Counter()
    for node in spec.nodes:
        if node.gpu_model == model:
            regions[node.region] += node.gpus
    return Queue(
        max((q.id for q in spec.queues), default=0) + 1,
        SERVICE_QUEUE,
        (quota,),
        cohort=biggest.cohort if biggest is not None else None,
        priority=10,
        region=regions.most_common(1)[0][0],
    )


def _carved(queues: Sequence[Queue], model: str, gpus: int, capacity: int) -> list[Queue]:
    """The queues with `gpus` of `model`'s quota made room for: each quota of that model cut
    in proportion, by as much as the quotas and `gpus` together exceed the `capacity`."""
    total = sum(q.quota(model).nominal for q in queues)
    excess = total + gpus - capacity
    if excess <= 0:
        return list(queues)
    fraction = excess / total
    return [
        dataclasses.replace(q, quotas=tuple(_cut(x, model, fraction) for x in q.quotas))
        for q in queues
    ]


def _cut(quota: Quota, model: str, fraction: float) -> Quota:
    """A quota of `model` less `fraction` of its nominal (rounded up), its guarantee and
    lending limit kept within what is left; a quota of another model as it is."""
    if quota.gpu_model != model:
        return quota
    nominal = quota.nominal - math.ceil(quota.nominal * fraction - 1e-9)
    lending = None if quota.lending_limit is None else min(quota.lending_limit, nominal)
    return dataclasses.replace(
        quota, nominal=nominal, guarantee=min(quota.guarantee, nominal), lending_limit=lending
    )


def describe_service(service: Service, share: float, spec: ClusterSpec) -> dict:
    return {
        "name": service.name,
        "trace": service.trace,
        "queue": service.queue,
        "share": share,
        "gpu_model": service.gpu_model,
        "peak_gpus": service.autoscale.max_replicas * service.replica_gpus,
        "model_gpus": spec.capacity[service.gpu_model],
        "replica_gpus": service.replica_gpus,
        "peak_rps": round(service.peak_rps, 4),
        "sample": service.sample,
    }


def describe_cluster(spec: ClusterSpec) -> dict:
    return {
        "name": spec.name,
        "nodes": len(spec.nodes),
        "gpus": spec.capacity,
        "datacenters": len({n.datacenter for n in spec.nodes}),
        "pods": len({(n.datacenter, n.pod) for n in spec.nodes}),
        "leaves": len({(n.datacenter, n.pod, n.leaf) for n in spec.nodes}),
        "queues": {
            q.name: {
                "cohort": q.cohort,
                "priority": q.priority,
                "quotas": {x.gpu_model: x.nominal for x in q.quotas},
                **({"families": {f.family: f.nominal for f in q.families}} if q.families else {}),
            }
            for q in spec.queues
        },
    }


def describe_preemption(queues: Sequence[Queue]) -> dict[str, int]:
    """How many queues run each preemption policy, in Kueue's names."""
    described: Counter[str] = Counter()
    for queue in queues:
        policy = queue.preemption
        words = [
            f"reclaimWithinCohort={policy.reclaim_within_cohort}",
            f"withinClusterQueue={policy.within_cluster_queue}",
            f"borrowWithinCohort={'LowerPriority' if policy.borrow_within_cohort else 'Never'}",
        ]
        if policy.borrow_within_cohort and policy.max_priority_threshold is not None:
            words.append(f"maxPriorityThreshold={policy.max_priority_threshold}")
        words.append(f"fairSharing={policy.fair_sharing}")
        if policy.preempt_by_fair_share:
            words.append("preemptByFairShare")
        described[", ".join(words)] += 1
    return dict(sorted(described.items()))


def describe_trace(trace: Sequence[TraceJob]) -> dict:
    first = min((job.submit_s for job in trace), default=0.0)
    last = max((job.submit_s for job in trace), default=0.0)
    return {
        "jobs": len(trace),
        "submit_span_days": round((last - first) / 86400, 4),
        "gpu_hours": round(sum(j.gpus * j.duration_s for j in trace) / 3600, 4),
        "largest_gpus": max((job.gpus for job in trace), default=0),
    }


def describe_config(config: SimConfig) -> dict:
    described = dataclasses.asdict(config)
    described["checkpoint"] = format_policy(config.checkpoint)
    described["fault_mix"] = [list(item) for item in config.fault_mix]
    return described
