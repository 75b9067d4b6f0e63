"""Small clusters and busy traces for the simulator's tests."""

from __future__ import annotations

import random

from scheduler.checkpointing import Policy, PolicyKind
from scheduler.sim.spec import ClusterSpec, parse_spec
from scheduler.sim.trace import TraceJob

QUEUES = {"prod": (24, 5), "research": (16, 0), "batch": (8, -1), "eval": (16, 0)}


def cluster(
    leaves: int = 2, nodes: int = 4, queues: dict[str, tuple[int, int]] = QUEUES, guarantee: int = 0
) -> ClusterSpec:
    """One data center of `leaves` leaves of `nodes` 8-GPU H800 nodes; queues (nominal GPUs,
    priority) in one cohort."""
    return parse_spec(
        {
            "name": "small",
            "datacenters": [
                {
                    "name": "dc1",
                    "pods": [
                        {
                            "name": "p1",
                            "leaves": leaves,
                            "nodes_per_leaf": nodes,
                            "gpu_model": "H800",
                        }
                    ],
                }
            ],
            "cohorts": [{"name": "all"}],
            "queues": [
                {
                    "name": name,
                    "cohort": "all",
                    "priority": priority,
                    "quotas": {"H800": {"nominal": nominal, "guarantee": min(guarantee, nominal)}},
                }
                for name, (nominal, priority) in queues.items()
            ],
        }
    )


def busy_trace(seed: int, jobs: int = 160, hours: float = 12.0) -> list[TraceJob]:
    """Bursty jobs of 1 to 32 GPUs from every queue, more than a 64-GPU cluster holds at
    times: some elastic, some with priorities, every checkpoint policy."""
    rng = random.Random(seed)
    policies = [
        None,
        Policy(PolicyKind.PERIODIC, 900.0),
        Policy(PolicyKind.ASYNC, 600.0),
        Policy(PolicyKind.TRIGGERED),
        Policy(PolicyKind.NONE),
    ]
    trace = []
    t = 0.0
    for job_id in range(1, jobs + 1):
        t += rng.expovariate(jobs / (hours * 3600)) * (0.2 if rng.random() < 0.3 else 1.0)
        gpus = rng.choice([1, 1, 2, 4, 8, 8, 16, 24, 32])
        elastic = gpus >= 16 and rng.random() < 0.4
        trace.append(
            TraceJob(
                job_id,
                round(t, 3),
                gpus,
                "H800",
                round(rng.uniform(300, 4 * 3600), 3),
                rng.choice(list(QUEUES)),
                priority=rng.choice([0, 0, 1, 3]),
                min_gpus=8 if elastic else None,
                checkpoint=rng.choice(policies),
            )
        )
    return trace
