"""Where faults come from in a simulation: a Poisson process per GPU, and a mix of kinds.

A job holding `g` GPUs fails at `g` times the per-GPU rate (exponential times between faults);
the default rate is Llama 3's, one interruption per 50,700 GPU-hours
(`checkpointing.FAILURES_PER_GPU_HOUR`). Each fault's kind is drawn from a weighted mix of
codes of the fault catalogue (`scheduler.faults`); a kind that does not kill jobs is counted
and otherwise harmless. Whether a fault-triggered save is possible is drawn with
`Costs.triggered_success` (95 % by default), the figure issue 5's ETTR model uses, rather than
from the kind, so that the simulator and the model agree.

The default mix is Llama 3's table of root causes of its 419 unexpected interruptions (Dubey et
al. 2024, "The Llama 3 Herd of Models", Table 5), each cause mapped onto the catalogue: faulty
GPU and GPU thermal (154) -> xid-79; GPU HBM3 memory (72) -> ecc-dbe; software bugs and silent
data corruption (60) -> xid-13; network switch, cable and NIC (42) -> nic-down; host
maintenance, SSD, power supply, chassis, IO board, CPU, system memory and dependencies (48)
-> heartbeat-loss; GPU SRAM memory (19) -> xid-94; GPU system processor (17) -> xid-119; NCCL
watchdog timeouts (7) -> hang. Every one of them kills the job, as an interruption did.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from scheduler.checkpointing import FAILURES_PER_GPU_HOUR
from scheduler.faults import FaultKind, lookup

LLAMA3_MIX: tuple[tuple[str, float], ...] = (
    ("xid-79", 154),
    ("ecc-dbe", 72),
    ("xid-13", 60),
    ("heartbeat-loss", 48),
    ("nic-down", 42),
    ("xid-94", 19),
    ("xid-119", 17),
    ("hang", 7),
)


class FaultModel:
    """Fault times and kinds, drawn from the simulation's random generator."""

    def __init__(
        self,
        failures_per_gpu_hour: float = FAILURES_PER_GPU_HOUR,
        mix: Sequence[tuple[str, float]] = LLAMA3_MIX,
    ) -> None:
        if failures_per_gpu_hour < 0:
            raise ValueError(f"the failure rate must not be negative, not {failures_per_gpu_hour}")
        if not mix or any(weight < 0 for _, weight in mix) or sum(w for _, w in mix) <= 0:
            raise ValueError("the fault mix needs at least one kind with a positive weight")
        self.rate_per_gpu_s = failures_per_gpu_hour / 3600.0
        self.kinds: list[FaultKind] = [lookup(code) for code, _ in mix]
        self._cumulative = list(accumulate(weight for _, weight in mix))

    @property
    def enabled(self) -> bool:
        return self.rate_per_gpu_s > 0

    def next_in(self, rng: random.Random, gpus: int) -> float:
        """Seconds until the next fault of a job holding `gpus` GPUs."""
        return rng.expovariate(self.rate_per_gpu_s * gpus)

    def kind(self, rng: random.Random) -> FaultKind:
        """A fault kind drawn from the mix."""
        point = rng.random() * self._cumulative[-1]
        return self.kinds[min(bisect_right(self._cumulative, point), len(self.kinds) - 1)]
