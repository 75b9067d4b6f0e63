"""MIG profiles: the slices a GPU of a model with MIG can be cut into, where on the GPU each may
sit, and what each is charged.

A100, H100, H200, H800 and B200 GPUs cut into seven compute slices and eight memory slots. A
profile takes some of each ("3g.40gb": three compute slices, four memory slots of an 80 GB GPU)
and may start only at some memory slots (NVML's `nvmlDeviceGetGpuInstancePossiblePlacements`);
instances of one GPU never overlap. Profiles are named as nvidia-smi names them, their memory
from the model's (`scheduler.agent.backends.mig_profile` names what NVML reports the same way).

A MIG job is charged its profile's share of the GPU, the larger of its compute (slices of
seven) and its memory (slots of eight), as a share of a GPU is (ADR 5): 1g.10gb is 1/7 of an
H100, 3g.40gb is half of one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MIG_MODELS = ("A100", "H100", "H200", "H800", "B200")
COMPUTE_SLICES = 7
MEMORY_SLOTS = 8

# (compute slices, memory slots, first memory slots it may start at), as NVIDIA documents the
# placements of A100, H100, H200 and B200 (the MIG user guide's "supported profiles").
_SHAPES = (
    (1, 1, (0, 1, 2, 3, 4, 5, 6)),
    (1, 2, (0, 2, 4, 6)),
    (2, 2, (0, 2, 4)),
    (3, 4, (0, 4)),
    (4, 4, (0,)),
    (7, 8, (0,)),
)


@dataclass(frozen=True)
class Profile:
    """One MIG profile of a GPU model."""

    name: str
    compute: int  # compute slices, of `COMPUTE_SLICES`
    slots: int  # memory slots, of `MEMORY_SLOTS`
    starts: tuple[int, ...]  # memory slots an instance of it may start at

    @property
    def charge(self) -> float:
        """Its share of the GPU: the larger of its compute and its memory share."""
        return max(self.compute / COMPUTE_SLICES, self.slots / MEMORY_SLOTS)


def has_mig(gpu_model: str) -> bool:
    """Whether GPUs of the model can be cut into MIG instances (named as Wanka's models are,
    "H800", or as NVML names them, "NVIDIA H200")."""
    return gpu_model.upper().removeprefix("NVIDIA ").startswith(MIG_MODELS)


def profiles(gpu_model: str, memory_gb: int) -> dict[str, Profile]:
    """The model's MIG profiles by name (none for a model without MIG)."""
    if not has_mig(gpu_model):
        return {}
    named = {}
    for compute, slots, starts in _SHAPES:
        name = f"{compute}g.{(slots * memory_gb + 4) // MEMORY_SLOTS}gb"
        named[name] = Profile(name, compute, slots, starts)
    return named


def fits(layout: Iterable[Profile]) -> bool:
    """Whether one GPU can hold instances of all these profiles at once: their compute within
    the GPU's, and a start for each where their memory slots do not overlap."""
    wanted = sorted(layout, key=lambda p: (-p.slots, -p.compute))
    if sum(p.compute for p in wanted) > COMPUTE_SLICES:
        return False
    return _place(wanted, 0)


def _place(wanted: list[Profile], used: int) -> bool:
    if not wanted:
        return True
    first, rest = wanted[0], wanted[1:]
    for start in first.starts:
        mask = ((1 << first.slots) - 1) << start
        if not used & mask and _place(rest, used | mask):
            return True
    return False
