"""Every interruption of a job has one shape: save if you can, within a grace, then restart
somewhere as a new attempt. A fault, a drain, a hang, a straggler replaced, a preemption, a
shrink and a grow differ only in what they answer here:

- `save_first`: whether the job is asked for a save before it stops, and of which kind;
- `savers`: which of its nodes save;
- `grace_s`: how long the save is waited for before the job restarts from its newest save;
- `where`: where it restarts after losing nodes (a hot spare, fewer nodes, or its queue).

The portal (`portal.workloads.recovery`, `preemption`, `lifecycle`) and the simulator
(`scheduler.sim.simulator`) both ask this module, so what the simulator predicts is what the
portal does. See docs/adr/0004-one-shape-for-interruptions.md.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum

from scheduler.checkpointing import PolicyKind
from scheduler.faults import FaultKind, triggered_save_possible


class Cause(StrEnum):
    """Why a job is interrupted."""

    FAULT = "fault"  # something failed under it: a fault, a hang, a straggler replaced
    DRAIN = "drain"  # an operator empties its node: nothing has failed yet
    PREEMPT = "preempt"  # its GPUs go to a claimant, or an operator requeues it
    SHRINK = "shrink"  # it gives GPUs back and goes on with fewer
    GROW = "grow"  # it takes GPUs that freed up


class Restart(StrEnum):
    """Where a job restarts after losing nodes (the portal's `RecoveryOutcome` values)."""

    IN_PLACE = "in_place"  # on the nodes it holds
    SPARE = "spare"  # each lost node swapped for a hot spare
    SHRUNK = "shrunk"  # without the lost nodes: elastic, and still at its minimum
    REQUEUED = "requeued"  # off every node, at the head of its queue


def save_first(
    cause: Cause,
    policy: PolicyKind,
    running: bool,
    fault: FaultKind | None = None,
    nodes: int = 1,
    data_parallel: int | None = None,
    replicas_per_node: int = 1,
    sharded: bool = False,
) -> str | None:
    """The kind of save (a `checkpoint` command's kind) the job is asked for before it stops,
    or None when it restarts from its newest complete save. Only running processes save, and
    only a job whose policy saves. Where nothing has failed (a drain, a preemption, a resize)
    it is asked for a save; after a fault only the fault-triggered policy saves, from memory,
    where the healthy ranks hold a full copy of the state (`faults.triggered_save_possible`;
    without a parallel plan one replica per node)."""
    if not running or policy is PolicyKind.NONE:
        return None
    if cause is not Cause.FAULT:
        return "requested"
    if fault is None or policy is not PolicyKind.TRIGGERED:
        return None
    replicas = nodes if data_parallel is None else data_parallel
    possible = triggered_save_possible(fault, nodes, replicas, replicas_per_node, sharded)
    return "triggered" if possible else None


def savers(nodes: Collection[int], lost: Collection[int], fault: FaultKind | None) -> list[int]:
    """The nodes that save: all of them where the fault left GPU memory readable (or nothing
    failed), else those the job keeps."""
    if fault is None or fault.memory_readable:
        return list(nodes)
    return [node for node in nodes if node not in lost]


def grace_s(
    cause: Cause, preemption_grace_s: float, fault_grace_s: float, deadline_s: float | None = None
) -> float:
    """How long the save is waited for: a fault's save from memory gets `fault_grace_s` (the
    ranks are already stopped); anything else the job's preemption grace, cut to `deadline_s`
    (a claimant's reclaim deadline) where there is one."""
    grace = fault_grace_s if cause is Cause.FAULT else preemption_grace_s
    return grace if deadline_s is None else min(grace, deadline_s)


def where(lost_gpus: int, held_gpus: int, min_gpus: int | None, spares_found: bool) -> Restart:
    """Where the job restarts after losing `lost_gpus` of the `held_gpus` it holds: in place
    when it lost none, on hot spares when there is one for every lost node, without them when
    it is elastic and keeps its minimum, else back in its queue."""
    if lost_gpus == 0:
        return Restart.IN_PLACE
    if spares_found:
        return Restart.SPARE
    left = held_gpus - lost_gpus
    if min_gpus is not None and 0 < min_gpus <= left:
        return Restart.SHRUNK
    return Restart.REQUEUED
