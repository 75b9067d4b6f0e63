"""The ETTR of one large job under each checkpoint policy, simulated and as the model says.

Issue 5's reference case: a job on all the GPUs of a cluster of its size, failures exponential
at `FAILURES_PER_GPU_HOUR`, the costs of `checkpointing.Costs`, each policy's interval from
the advisor (`checkpointing.interval_for`). The simulator runs the job (with the production
engine admitting it) for `days` of simulated time; its ETTR is its productive compute time
over the wall time since it was admitted. For `none`, as in the model, the job is
`checkpointing.JOB_HOURS` long and restarts from the beginning after every failure; jobs of that
length run one after the other for the whole time, and the ETTR sums them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.checkpointing import (
    FAILURES_PER_GPU_HOUR,
    JOB_HOURS,
    Costs,
    Policy,
    PolicyKind,
    expected_ettr,
    interval_for,
)
from scheduler.sim.runner import simulate
from scheduler.sim.simulator import SimConfig
from scheduler.sim.spec import ClusterSpec, layout, parse_spec
from scheduler.sim.trace import TraceJob

DAY = 86_400.0
GPU_MODEL = "H800"
REFERENCE = Costs()


@dataclass(frozen=True)
class EttrResult:
    """One policy at one size: the simulated and the model's ETTR."""

    kind: PolicyKind
    gpus: int
    interval_s: float | None
    simulated: float
    model: float
    faults: int
    days: float

    @property
    def error(self) -> float:
        return abs(self.simulated - self.model)


def job_cluster(gpus: int) -> ClusterSpec:
    """A cluster of exactly `gpus` GPUs (8 a node) with one queue that may use them all."""
    if gpus % 8:
        raise ValueError(f"the job needs whole 8-GPU nodes, not {gpus} GPUs")
    return parse_spec(
        {
            "name": f"job-{gpus}",
            "datacenters": layout(
                gpus // 8, gpu_model=GPU_MODEL, nodes_per_leaf=32, leaves_per_pod=16
            ),
            "queues": [{"name": "train", "quotas": {GPU_MODEL: gpus}}],
        }
    )


def simulated_ettr(
    kind: PolicyKind,
    gpus: int,
    *,
    days: float,
    seed: int = 1,
    costs: Costs = REFERENCE,
    failures_per_gpu_hour: float = FAILURES_PER_GPU_HOUR,
) -> EttrResult:
    """Simulate the reference job for `days` and compare with `checkpointing.expected_ettr`."""
    policy = Policy(kind, interval_for(kind, gpus, costs, failures_per_gpu_hour))
    horizon = days * DAY
    if kind is PolicyKind.NONE:
        count = math.ceil(horizon / (JOB_HOURS * 3600)) + 1
        trace = [
            TraceJob(i, 0.0, gpus, GPU_MODEL, JOB_HOURS * 3600, "train", checkpoint=policy)
            for i in range(1, count + 1)
        ]
    else:
        trace = [TraceJob(1, 0.0, gpus, GPU_MODEL, 2 * horizon, "train", checkpoint=policy)]
    config = SimConfig(
        seed=seed, costs=costs, failures_per_gpu_hour=failures_per_gpu_hour, horizon_s=horizon
    )
    recorder = simulate(trace, job_cluster(gpus), "wanka", config).recorder
    started = [o for o in recorder.outcomes if o.first_start_s is not None]
    productive = math.fsum(o.productive_gpu_s for o in started)
    wall = math.fsum(o.wall_gpu_s for o in started)
    return EttrResult(
        kind,
        gpus,
        policy.interval_s,
        productive / wall if wall else 0.0,
        expected_ettr(policy, gpus, costs, failures_per_gpu_hour),
        sum(recorder.faults.values()),
        days,
    )
