"""Synthetic load for shapes real traces lack: inference with a daily peak and valley, a single
4,096-GPU training job, and a mixed month on a 100,000-GPU cluster.

Every generator is deterministic for its seed. Sizes of 8 GPUs or more are whole nodes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scheduler.checkpointing import Policy, PolicyKind
from scheduler.inference import DAY, HOUR, daily_level
from scheduler.sim.spec import ClusterSpec, layout, parse_spec
from scheduler.sim.trace import TraceJob

TRIGGERED = Policy(PolicyKind.TRIGGERED)


def inference_service(
    queue: str,
    *,
    days: float,
    peak_gpus: int,
    valley_gpus: int,
    replica_gpus: int = 64,
    gpu_model: str = "H100",
    step_s: float = HOUR,
    first_id: int = 1,
    priority: int = 10,
) -> list[TraceJob]:
    """Replicas of an inference service whose count follows a daily peak and valley.

    The count is set every `step_s` from `daily_level`; replica k (k = 1, 2, ...) runs while
    the count is at least k, so each spell of it is one job: the valley's replicas run the
    whole time, those above it once a day. Replicas save nothing worth keeping, so a fault
    costs them only a restart and a triggered save's step (`triggered` policy).
    """
    steps = int(days * DAY // step_s)
    counts = [
        round(daily_level(i * step_s, peak_gpus, valley_gpus) / replica_gpus) for i in range(steps)
    ]
    jobs = []
    for level in range(1, max(counts, default=0) + 1):
        start = None
        for i, count in enumerate([*counts, 0]):
            if count >= level and start is None:
                start = i
            elif count < level and start is not None:
                jobs.append(
                    TraceJob(
                        0,
                        start * step_s,
                        replica_gpus,
                        gpu_model,
                        (i - start) * step_s,
                        queue,
                        priority=priority,
                        checkpoint=TRIGGERED,
                    )
                )
                start = None
    jobs.sort(key=lambda job: (job.submit_s, -job.duration_s))
    return [replace(job, id=first_id + i) for i, job in enumerate(jobs)]


def training_job(
    queue: str,
    *,
    gpus: int = 4096,
    days: float = 30.0,
    submit_s: float = 0.0,
    gpu_model: str = "H100",
    job_id: int = 1,
    checkpoint: Policy | None = TRIGGERED,
) -> TraceJob:
    """One large pretraining gang running `days` of work."""
    return TraceJob(
        job_id, submit_s, gpus, gpu_model, days * DAY, queue, priority=5, checkpoint=checkpoint
    )


@dataclass(frozen=True)
class Stream:
    """Poisson arrivals of one kind of job: `per_day` on average, sizes drawn from `sizes`
    (GPUs, weight), durations log-uniform between `hours` bounds."""

    queues: tuple[str, ...]
    per_day: float
    sizes: tuple[tuple[int, float], ...]
    hours: tuple[float, float]
    priority: int = 0
    elastic: float = 0.0  # share of the multi-node jobs that may shrink to half
    checkpoint: Policy | None = None


def poisson_jobs(stream: Stream, days: float, rng: random.Random, gpu_model: str) -> list:
    """The stream's jobs over `days`, without ids."""
    jobs = []
    t = rng.expovariate(stream.per_day / DAY)
    sizes = [size for size, _ in stream.sizes]
    weights = [weight for _, weight in stream.sizes]
    low, high = (math.log(h * HOUR) for h in stream.hours)
    while t < days * DAY:
        gpus = rng.choices(sizes, weights)[0]
        elastic = gpus >= 16 and rng.random() < stream.elastic
        jobs.append(
            TraceJob(
                0,
                t,
                gpus,
                gpu_model,
                round(math.exp(rng.uniform(low, high))),
                rng.choice(stream.queues),
                priority=stream.priority,
                min_gpus=gpus // 2 if elastic else None,
                checkpoint=stream.checkpoint,
            )
        )
        t += rng.expovariate(stream.per_day / DAY)
    return jobs


BUILDERS = ("frontier-a", "frontier-b", "frontier-c")
COMPANIES = tuple(f"company-{c}" for c in "abcde")
TUNERS = tuple(f"tune-{i:02d}" for i in range(1, 11))
SERVING = ("serving-a", "serving-b")

# GPUs of nominal quota per queue of the 100,000-GPU site (guarantee: a quarter of it).
QUOTAS = {
    "frontier-a": 30_000,
    "frontier-b": 20_000,
    "frontier-c": 10_000,
    **{q: 3_000 for q in COMPANIES},
    **{q: 800 for q in TUNERS},
    "serving-a": 10_000,
    "serving-b": 5_000,
    "batch": 2_000,
}

STREAMS = (
    Stream(
        BUILDERS,
        2.5,
        ((2048, 3), (4096, 2), (8192, 1)),
        (48, 240),
        priority=5,
        checkpoint=TRIGGERED,
    ),
    Stream(BUILDERS, 25, ((64, 3), (128, 3), (256, 2), (512, 1)), (2, 24), priority=3, elastic=0.3),
    Stream(
        COMPANIES,
        80,
        ((64, 3), (128, 3), (256, 2), (512, 1), (1024, 1)),
        (4, 48),
        elastic=0.3,
        checkpoint=Policy(PolicyKind.ASYNC),
    ),
    Stream(COMPANIES + TUNERS, 150, ((8, 4), (16, 3), (32, 2), (64, 1)), (1, 8)),
    Stream(TUNERS, 60, ((1, 3), (2, 2), (4, 2), (8, 1)), (0.5, 6)),
    Stream(("batch",), 40, ((1, 2), (4, 1), (8, 2), (64, 1)), (0.25, 4), priority=-1),
)


def site_spec(gpus: int = 100_000, gpu_model: str = "H100") -> ClusterSpec:
    """A site of `gpus` GPUs: two data centers of pods of 25 leaves of 25 nodes of 8 GPUs
    (200 GPUs a leaf, 5,000 a pod), the queues of `QUOTAS` scaled to the site, in two cohorts
    (training, serving) under one root, so idle quota flows across the site."""
    scale = gpus / 100_000
    queues = []
    for name, quota in QUOTAS.items():
        nominal = int(quota * scale) // 8 * 8
        cohort = "serving" if name in SERVING or name == "batch" else "training"
        queues.append(
            {
                "name": name,
                "cohort": cohort,
                "priority": _priority(name),
                "quotas": {gpu_model: {"nominal": nominal, "guarantee": nominal // 4 // 8 * 8}},
            }
        )
    return parse_spec(
        {
            "name": f"site-{gpus}",
            "datacenters": layout(
                gpus // 8, gpu_model=gpu_model, nodes_per_leaf=25, leaves_per_pod=25, datacenters=2
            ),
            "cohorts": [
                {"name": "site"},
                {"name": "training", "parent": "site"},
                {"name": "serving", "parent": "site"},
            ],
            "queues": queues,
        }
    )


def _priority(queue: str) -> int:
    return 10 if queue in SERVING else (5 if queue in BUILDERS else 0)


def mixed_month(
    *, gpus: int = 100_000, days: float = 30.0, seed: int = 1, gpu_model: str = "H100"
) -> tuple[list[TraceJob], ClusterSpec]:
    """A month of mixed load on a site of `gpus` GPUs (`site_spec`): pretraining gangs of 2,048
    to 8,192 GPUs (one of 4,096 from the start) and ablations of the model builders,
    post-training and SFT of internet companies (some elastic), a long tail of fine-tuning,
    best-effort batch work, and two inference services with a daily peak and valley. Arrival
    rates and sizes scale with `gpus`."""
    rng = random.Random(seed)
    scale = gpus / 100_000
    jobs: list[TraceJob] = [
        training_job("frontier-a", gpus=_gpus(4096, scale), days=days, gpu_model=gpu_model)
    ]
    for stream in STREAMS:
        sizes = tuple((_gpus(s, scale), w) for s, w in stream.sizes)
        # Arrivals scale so that the GPU-hours offered scale with the site.
        rate = stream.per_day * scale * _mean(stream.sizes) / _mean(sizes)
        jobs += poisson_jobs(replace(stream, per_day=rate, sizes=sizes), days, rng, gpu_model)
    for queue, peak, valley in (("serving-a", 12_000, 4_000), ("serving-b", 6_000, 1_500)):
        jobs += inference_service(
            queue,
            days=days,
            peak_gpus=int(peak * scale),
            valley_gpus=int(valley * scale),
            replica_gpus=_gpus(128, scale),
            gpu_model=gpu_model,
            first_id=0,
        )
    return number(jobs), site_spec(gpus, gpu_model)


def _mean(sizes: tuple[tuple[int, float], ...]) -> float:
    return sum(s * w for s, w in sizes) / sum(w for _, w in sizes)


def _gpus(size: int, scale: float) -> int:
    """A job size scaled with the site: sizes of a node or more stay whole nodes."""
    if size < 8:
        return size
    return max(8, int(size * max(scale, 8 / size)) // 8 * 8)


def number(jobs: Sequence[TraceJob]) -> list[TraceJob]:
    """The jobs in submit order, numbered 1, 2, ..."""
    ordered = sorted(jobs, key=lambda job: (job.submit_s, job.queue, job.gpus, job.duration_s))
    return [replace(job, id=i) for i, job in enumerate(ordered, start=1)]
