"""Run a trace on a cluster under several policies and gather the figures: the entry point for
the command line, the benchmarks and the portal.

    from scheduler.sim import SimConfig, load_spec, load_csv, run
    results = run(load_csv("trace.csv"), load_spec("cluster.json"), ["wanka", "fifo"],
                  config=SimConfig(seed=7), on_progress=lambda f, msg: print(f, msg))

`run` returns a JSON-ready dict (no wall-clock figures in it, so the same inputs and seed give
the same JSON bit for bit); `scheduler.sim.report.write_html` turns it into a report.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

from scheduler.engine import Queue
from scheduler.sim.policies import make_policy
from scheduler.sim.simulator import Hook, SimConfig, Simulator
from scheduler.sim.spec import ClusterSpec
from scheduler.sim.summary import default_large_gang, summarize
from scheduler.sim.trace import TraceJob, format_policy

Progress = Callable[[float, str], None]
DEFAULTS = SimConfig()


def simulate(
    trace: Sequence[TraceJob],
    spec: ClusterSpec,
    policy: str,
    config: SimConfig = DEFAULTS,
    on_progress: Callable[[float], None] | None = None,
    hook: Hook | None = None,
) -> Simulator:
    """One policy's run; the simulator, after running, holds the recorder and counters."""
    simulator = Simulator(trace, spec, make_policy(policy, spec), config, on_event=hook)
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
) -> dict:
    """Every policy's figures for the trace on the cluster (see `summary` for what they mean).

    `on_progress(fraction, message)` is called as the runs go, with a fraction from 0 to 1.
    """
    names = list(dict.fromkeys(policies))  # each once, in the order given
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
    for index, name in enumerate(names):
        tell = _progress(on_progress, trace, index, len(names), name)
        simulator = simulate(trace, spec, name, config, tell, hook)
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
        results["policies"][name] = figures
        if on_progress is not None:
            on_progress((index + 1) / len(names), f"{name}: done")
    return results


def _progress(
    on_progress: Progress | None, trace: Sequence[TraceJob], index: int, count: int, name: str
) -> Callable[[float], None] | None:
    """A per-run callback turning simulated time into the fraction of all runs done."""
    if on_progress is None:
        return None
    first = min((job.submit_s for job in trace), default=0.0)
    span = max((job.submit_s for job in trace), default=0.0) - first or 1.0

    def tell(now: float) -> None:
        done = min(0.99, (now - first) / span)
        on_progress((index + done) / count, f"{name}: day {(now - first) / 86400:.1f}")

    return tell


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
