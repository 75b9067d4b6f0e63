"""The tide: an inference service's quota lent to training off-peak and reclaimed at its
scale-ups, against a static split where the service keeps its peak.

    python -m bench.tidal [--gpus 10000] [--hours 24] [--from-hour 0] [--seed 1] [--short]

One simulated day of the Azure conversation service (`scheduler.inference`: the 2023 trace
under the daily curve, peak at 14:00, a quarter of it at night) beside a Philly-shaped
training load, on a cluster of `--gpus` H100 GPUs in nodes of 8, run twice with the
production engine: tidal (the service's queue and the training queue in one cohort, so idle
quota is lent and reclaimed) and static (each queue held to its own quota).

- The service: replicas of one node (8 GPUs) serving 32 requests at once, scaled by the KPA
  autoscaler (`scheduler.autoscale`) to 70 % of that (Knative's target utilisation), a 5-minute
  scale-down delay against flapping; its peak rate is set so that the peak needs 30 % of the
  cluster, and its queue's quota is that peak. Each replica serves 30 s after it starts. The
  pool is simulated at 1/16 of its size (`scheduler.sim.services`).
- Training: Philly's job-size mix by GPU-hours (`scheduler.sim.philly`), each size eight times
  Philly's (whole nodes), Poisson arrivals offering 115 % of the cluster less the service's mean,
  run times log-uniform from 30 min to 16 h, half of the multi-node jobs elastic down to half;
  they checkpoint asynchronously or save from GPU memory on a fault or a preemption (half each).
  A backlog fills the cluster at the start.
- Preemption grants a 60 s grace for a save (`SimConfig.preemption_grace_s`); an engine cycle at
  most every 5 s, faults off (the tide is what is measured). The run starts an hour early to
  warm up; the figures count from `--from-hour`.

`--short`: the same day on 2,000 GPUs. Progress on stderr; the last
line is JSON: slo_attainment (share of requests that found a replica with room),
queueing_p99_s, alloc_static and alloc_tidal (mean share of the cluster's GPUs held),
training_gpu_hours_gained (tidal less static), reclaim_p99_s (a replica's wait from pending to
started), lost_min_per_reclaimed_node (node-minutes of training work thrown away per node
taken from training), serving_quota_alloc_static and _tidal (the same share over the service's
quota alone: its replicas, and in the tidal run what training borrows of it), wall_s and
reference_s (the reference loop, `bench.reference`, timed first).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import replace

from bench.reference import reference_s
from scheduler.autoscale import Settings
from scheduler.checkpointing import Policy, PolicyKind
from scheduler.inference import daily_factor, mean_service_s, read_trace
from scheduler.sim.policies import make_policy
from scheduler.sim.services import Service
from scheduler.sim.simulator import SimConfig, Simulator
from scheduler.sim.spec import ClusterSpec, layout, parse_spec
from scheduler.sim.synthetic import HOUR, Stream, number, poisson_jobs
from scheduler.sim.trace import TraceJob

GPU_MODEL = "H100"
NODE = 8
SHARE = 0.30  # of the cluster the service's peak needs
SLOTS = 32
TARGET = 0.7 * SLOTS
SAMPLE = 16
WARMUP_S = HOUR
# Philly's GPU-hours per job size (GPUs), sizes times eight.
PHILLY_GPU_HOURS = {1: 176_690, 2: 31_251, 4: 163_650, 8: 473_822, 16: 112_362, 32: 17_819}
HOURS = (0.5, 16.0)
OFFERED = 1.15  # training offered: this share of the cluster less the service's mean


def cluster(gpus: int) -> ClusterSpec:
    """`gpus` GPUs in pods of 25 leaves of 25 nodes; a serving queue with the service's peak
    as its quota and a training queue with the rest, in one cohort."""
    serving = round(gpus * SHARE / NODE) * NODE
    return parse_spec(
        {
            "name": f"tidal-{gpus}",
            "datacenters": layout(
                gpus // NODE, gpu_model=GPU_MODEL, nodes_per_leaf=25, leaves_per_pod=25
            ),
            "cohorts": [{"name": "site"}],
            "queues": [
                {
                    "name": "serving",
                    "cohort": "site",
                    "priority": 10,
                    "quotas": {GPU_MODEL: serving},
                },
                {"name": "training", "cohort": "site", "quotas": {GPU_MODEL: gpus - serving}},
            ],
        }
    )


def service(spec: ClusterSpec, begin_s: float) -> Service:
    """The conversation service, its peak needing the serving queue's quota."""
    peak = spec.queues[0].quotas[0].nominal // NODE
    requests = read_trace("azure-conv")
    peak_rps = peak * TARGET / mean_service_s(requests, GPU_MODEL)
    settings = Settings(target=TARGET, min_replicas=1, max_replicas=peak, scale_down_delay_s=300)
    start = math.ceil(peak * daily_factor(begin_s))
    return Service(
        "conversation",
        "serving",
        peak_rps,
        settings,
        slots=SLOTS,
        replica_gpus=NODE,
        gpu_model=GPU_MODEL,
        sample=SAMPLE,
        replicas=start,
    )


def training(gpus: int, begin_s: float, seconds: float, seed: int) -> list[TraceJob]:
    """The Philly-shaped training load (see the module docstring), numbered from 1."""
    rng = random.Random(seed)
    sizes = tuple((n * NODE, hours / (n * NODE)) for n, hours in PHILLY_GPU_HOURS.items())
    mean_gpus = sum(s * w for s, w in sizes) / sum(w for _, w in sizes)
    low, high = HOURS
    mean_h = (high - low) / math.log(high / low)
    offered = gpus * (OFFERED - SHARE * (1 + 0.25) / 2)
    per_day = offered * 24 / (mean_gpus * mean_h)
    jobs = []
    for kind in (PolicyKind.ASYNC, PolicyKind.TRIGGERED):
        stream = Stream(
            ("training",), per_day / 2, sizes, HOURS, elastic=0.5, checkpoint=Policy(kind)
        )
        jobs += poisson_jobs(stream, seconds / 86400, rng, GPU_MODEL)
        backlog = poisson_jobs(replace(stream, per_day=per_day * 2), 0.5, rng, GPU_MODEL)
        jobs += [replace(job, submit_s=0.0) for job in _filling(backlog, gpus // 2)]
    return number([replace(job, submit_s=job.submit_s + begin_s) for job in jobs])


def _filling(jobs: list[TraceJob], gpus: int) -> list[TraceJob]:
    """The first jobs whose GPUs add up to `gpus`."""
    chosen, total = [], 0
    for job in jobs:
        if total >= gpus:
            break
        chosen.append(job)
        total += job.gpus
    return chosen


def simulate(policy: str, gpus: int, since: float, hours: float, seed: int, tell) -> dict:
    """One run; its figures from `since` to the end."""
    spec = cluster(gpus)
    begin = since - WARMUP_S
    end = since + hours * HOUR
    config = SimConfig(
        seed=seed,
        cycle_s=5.0,
        failures_per_gpu_hour=0.0,
        horizon_s=end,
        preemption_grace_s=60.0,
        since_s=since,
    )
    trace = training(gpus, begin, end - begin, seed)
    sim = Simulator(trace, spec, make_policy(policy, spec), config, services=[service(spec, begin)])
    sim.run(lambda now: tell(f"{policy}: {now / HOUR:5.2f} h"))
    span = end - since
    inference = sim.tide["inference"].integral_to(end) / span
    other = sim.tide["other"].integral_to(end) / span
    serving_quota = spec.queues[0].quotas[0].nominal
    borrowed = _borrowed(sim, serving_quota, end) if policy == "wanka" else 0.0
    return {
        **sim.services[0].figures(),
        "inference_gpus": round(inference, 1),
        "training_gpus": round(other, 1),
        "alloc": round((inference + other) / spec.gpus, 4),
        "serving_quota_alloc": round((inference + borrowed) / serving_quota, 4),
        "training_gpu_hours": round(other * span / HOUR),
        "cycles": sim.recorder.cycles,
        "preemptions": sim.recorder.preemptions,
        "shrinks": sim.recorder.shrinks,
    }


def _borrowed(sim: Simulator, serving_quota: int, end: float) -> float:
    """Mean GPUs training held beyond its own quota (borrowed from the service's)."""
    training_quota = sim.spec.gpus - serving_quota
    series = sim.tide["other"]
    series.advance(end)
    hours = series.averages(end)
    return sum(max(0.0, mean - training_quota) for _, mean in hours[:-1]) / max(1, len(hours) - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--from-hour", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--short", action="store_true", help="the day on 2,000 GPUs")
    args = parser.parse_args(argv)
    if args.short:
        args.gpus = 2_000
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)

    def tell(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    since = args.from_hour * HOUR
    runs = {
        name: simulate(policy, args.gpus, since, args.hours, args.seed, tell)
        for name, policy in (("static", "static"), ("tidal", "wanka"))
    }
    wall = time.perf_counter() - started
    for name, figures in runs.items():
        print(name, " ".join(f"{key}={value}" for key, value in figures.items()), file=sys.stderr)
    tidal, static = runs["tidal"], runs["static"]
    nodes = tidal["reclaimed_nodes"]
    result = {
        "slo_attainment": tidal["slo_attainment"],
        "queueing_p99_s": tidal["queueing_p99_s"],
        "alloc_static": static["alloc"],
        "alloc_tidal": tidal["alloc"],
        "training_gpu_hours_gained": tidal["training_gpu_hours"] - static["training_gpu_hours"],
        "reclaim_p99_s": tidal["reclaim_p99_s"],
        "lost_min_per_reclaimed_node": round(tidal["lost_gpu_s"] / NODE / 60 / nodes, 3)
        if nodes
        else 0.0,
        "serving_quota_alloc_static": static["serving_quota_alloc"],
        "serving_quota_alloc_tidal": tidal["serving_quota_alloc"],
        "static_slo_attainment": static["slo_attainment"],
        "wall_s": round(wall, 1),
        "reference_s": reference,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
