"""The fault catalogue: what each fault a node can report means for its node and its jobs.

A fault kind says how bad it is (`Severity`), what the node needs (`Action`), whether the jobs
on the node must stop (`kills_job`), whether the faulty node's GPU memory can still be read so
a fault-triggered save can include its ranks (`memory_readable`), and whether the node must
take no new work (`cordon`).

XID entries follow NVIDIA's Xid catalogue for Ampere and newer GPUs ("Xid Errors", NVIDIA
deployment documentation), its immediate-action resolution buckets mapped onto `Action`:
RESTART_APP -> RESTART_PROCESS, RESET_GPU -> RESET_GPU, a reboot -> REBOOT_NODE, and a
hardware fault that recurs after a reset -> REPAIR. The other kinds come from the agent's
telemetry (ECC counters, link states, heartbeats, step progress).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType


class Action(IntEnum):
    """What the node needs, ordered by how drastic it is, so the worst of several is `max`."""

    NONE = 0  # nothing; watch the trend
    RESTART_PROCESS = 1  # restart the job's processes; the hardware is fine
    RESET_GPU = 2  # reset the GPU (nvidia-smi -r) once its processes are gone
    DRAIN_NODE = 3  # let the node finish or move its work, then investigate
    REBOOT_NODE = 4  # the node must be rebooted or power-cycled
    REPAIR = 5  # hardware service: the part must be replaced


class Severity(IntEnum):
    """How urgently a person should look."""

    INFO = 0  # expected or harmless; recorded for trends
    WARNING = 1  # degraded or suspicious; work goes on
    CRITICAL = 2  # work on the node is lost or at risk now


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault and what it means for the node and the jobs on it."""

    code: str  # stable id on the wire and in the database: "xid-79", "ecc-dbe", ...
    title: str
    meaning: str
    severity: Severity
    action: Action
    xid: int | None
    kills_job: bool  # the job's processes die, or the job must stop
    memory_readable: bool  # the faulty node's GPU memory can still be read for a save
    cordon: bool  # the node must take no new work


def _entry(
    code: str,
    title: str,
    meaning: str,
    severity: Severity,
    action: Action,
    *,
    kills_job: bool,
    memory_readable: bool,
    cordon: bool,
) -> FaultKind:
    """A catalogue entry; its XID number comes from an "xid-<n>" code."""
    xid = int(code.removeprefix("xid-")) if code.startswith("xid-") else None
    return FaultKind(
        code, title, meaning, severity, action, xid, kills_job, memory_readable, cordon
    )


S, A = Severity, Action

# An application-side XID (13, 31, 43) leaves the process's CUDA context in a sticky error
# state, so that rank can no longer copy its memory out: `memory_readable` is False although
# the hardware is usually fine.
# fmt: off
_KINDS: tuple[FaultKind, ...] = (
    _entry("xid-13", "Graphics engine exception",
           "A kernel hit an exception, usually an application bug (bad index, bad instruction); "
           "restart the job, and look at the hardware only if it recurs on the same GPU.",
           S.WARNING, A.RESTART_PROCESS, kills_job=True, memory_readable=False, cordon=False),
    _entry("xid-31", "GPU memory page fault",
           "A process touched an illegal GPU address, almost always an application or framework "
           "bug; restart the job and check its code if it recurs.",
           S.WARNING, A.RESTART_PROCESS, kills_job=True, memory_readable=False, cordon=False),
    _entry("xid-43", "GPU stopped processing",
           "The driver aborted a channel after an error in the workload; the GPU itself is fine, "
           "restart the job.",
           S.WARNING, A.RESTART_PROCESS, kills_job=True, memory_readable=False, cordon=False),
    _entry("xid-45", "Preemptive cleanup",
           "The driver tore down a process's channels because it was stopped or an earlier error "
           "killed it; act on that earlier fault, not on this one.",
           S.INFO, A.NONE, kills_job=False, memory_readable=True, cordon=False),
    _entry("xid-48", "Double-bit ECC error",
           "GPU memory returned an uncorrectable error; the processes using it are lost and the "
           "GPU needs a reset before new work.",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=False, cordon=True),
    _entry("xid-63", "Row remapping pending",
           "A failing memory row was recorded for remapping; running work is unaffected, but the "
           "GPU needs a reset, once idle, to apply it.",
           S.WARNING, A.RESET_GPU, kills_job=False, memory_readable=True, cordon=True),
    _entry("xid-64", "Row remapping failed",
           "The GPU could not remap a failing memory row, so its memory can no longer protect "
           "itself; drain the node and send the GPU for repair.",
           S.CRITICAL, A.REPAIR, kills_job=False, memory_readable=True, cordon=True),
    _entry("xid-74", "NVLink error",
           "An NVLink connection between GPUs failed, which breaks the job's collectives; reset "
           "the GPU, and repair the link if it recurs.",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=True, cordon=True),
    _entry("xid-79", "GPU fell off the bus",
           "The GPU no longer answers on PCIe; everything on it is lost and only a reboot or "
           "power cycle brings it back.",
           S.CRITICAL, A.REBOOT_NODE, kills_job=True, memory_readable=False, cordon=True),
    _entry("xid-92", "High single-bit ECC rate",
           "Corrected memory errors are arriving faster than usual; nothing is lost yet, watch "
           "the trend and drain the node if it keeps rising.",
           S.WARNING, A.NONE, kills_job=False, memory_readable=True, cordon=False),
    _entry("xid-94", "Contained ECC error",
           "An uncorrectable memory error was contained to the process using that memory: that "
           "process is lost, other work on the GPU goes on; reset the GPU when it is idle.",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=False, cordon=True),
    _entry("xid-95", "Uncontained ECC error",
           "An uncorrectable memory error could not be contained: every process on the GPU is "
           "lost and the GPU must be reset before new work.",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=False, cordon=True),
    _entry("xid-119", "GSP RPC timeout",
           "The GPU's system processor stopped answering the driver; the GPU is wedged and needs "
           "a reset (a reboot if the reset fails).",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=False, cordon=True),
    _entry("xid-120", "GSP error",
           "The firmware on the GPU's system processor failed; the GPU needs a reset, and a "
           "driver or firmware update if it recurs.",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=False, cordon=True),
    _entry("ecc-dbe", "Uncorrectable ECC error",
           "The ECC counters show new uncorrectable (double-bit) errors; work on the GPU is "
           "lost and the GPU needs a reset before new work.",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=False, cordon=True),
    _entry("ecc-sbe-storm", "Retired-pages limit reached",
           "Corrected errors have retired or remapped more memory than the site allows; running "
           "work may finish, then the node is drained for a memory test.",
           S.WARNING, A.DRAIN_NODE, kills_job=False, memory_readable=True, cordon=True),
    _entry("nvlink-down", "NVLink down",
           "An NVLink between GPUs of the node is down, so the job's collectives on it fail; "
           "reset the GPUs, repair the link if it stays down.",
           S.CRITICAL, A.RESET_GPU, kills_job=True, memory_readable=True, cordon=True),
    _entry("nic-down", "Network link down",
           "A compute-network NIC of the node lost its link, so the job's cross-node traffic "
           "stops; drain the node and check the cable, port and NIC.",
           S.CRITICAL, A.DRAIN_NODE, kills_job=True, memory_readable=True, cordon=True),
    _entry("heartbeat-loss", "Heartbeats stopped",
           "The node's agent stopped reporting: the node is down or cut off, its work is "
           "presumed lost and it is power-cycled through its management controller.",
           S.CRITICAL, A.REBOOT_NODE, kills_job=True, memory_readable=False, cordon=True),
    # A hang is a job's symptom, not a node's verdict: which rank is stuck is not known yet,
    # so no node is cordoned. The GPUs are fine, so the ranks can save once they are aborted
    # out of the stuck collective.
    _entry("hang", "Training hung",
           "The job made no step progress for longer than its limit; abort and restart it, "
           "saving from memory first.",
           S.CRITICAL, A.RESTART_PROCESS, kills_job=True, memory_readable=True, cordon=False),
    _entry("straggler", "Straggler",
           "One rank's steps take far longer than its peers', slowing the whole job; nothing "
           "is lost, but if it persists, replace the node.",
           S.WARNING, A.NONE, kills_job=False, memory_readable=True, cordon=False),
    # What an operator asks of a node, recorded like a fault so its jobs' tenants see why they
    # moved. A drained node's jobs move to spares (saving first) or finish before the drain
    # deadline; a node marked down has its jobs recovered elsewhere at once.
    _entry("drain", "Node drained",
           "An operator is draining the node: its jobs move to hot spares, saving first, or "
           "finish before the drain deadline; then the node goes down.",
           S.WARNING, A.DRAIN_NODE, kills_job=False, memory_readable=True, cordon=True),
    _entry("node-down", "Node marked down",
           "An operator took the node down: its jobs are recovered elsewhere, the healthy "
           "ranks saving first where the job's policy does.",
           S.CRITICAL, A.REPAIR, kills_job=True, memory_readable=True, cordon=True),
    _entry("slow-node", "Slow node",
           "The node is persistently slower than its peers across jobs or checks; it finishes "
           "its work but takes no new work until it is investigated.",
           S.WARNING, A.DRAIN_NODE, kills_job=False, memory_readable=True, cordon=True),
)
# fmt: on

CATALOGUE: Mapping[str, FaultKind] = MappingProxyType({kind.code: kind for kind in _KINDS})
# Kinds an operator's request stands for, not something a node reports (no drill injects them).
OPERATOR_KINDS = frozenset({"drain", "node-down"})

HANG_AFTER_S = 1800.0  # no step progress for this long is a hang; jobs may set their own
STRAGGLER_FACTOR = 1.5  # a step this many times its peers' median makes a straggler
RETIRED_PAGES_LIMIT = 60  # site policy: retired or remapped pages before a GPU is drained


def lookup(code: str) -> FaultKind:
    """The fault kind for a code such as "xid-79" or "nic-down"; an unknown XID code gets the
    generic kind of `for_xid`. Raises KeyError, naming the known codes, for anything else."""
    if code in CATALOGUE:
        return CATALOGUE[code]
    number = code.removeprefix("xid-")
    if number != code and number.isdigit():
        return for_xid(int(number))
    raise KeyError(f"unknown fault code {code!r}; known codes: {', '.join(sorted(CATALOGUE))}")


def for_xid(xid: int) -> FaultKind:
    """The fault kind for an XID number. An XID the catalogue does not know gets a generic kind:
    a warning that restarts the job's processes without cordoning the node."""
    known = CATALOGUE.get(f"xid-{xid}")
    if known is not None:
        return known
    return FaultKind(
        code=f"xid-{xid}",
        title=f"XID {xid}",
        meaning=f"The driver reported XID {xid}, which the catalogue does not know; restart the "
        "job and look it up in NVIDIA's Xid catalogue if it recurs.",
        severity=Severity.WARNING,
        action=Action.RESTART_PROCESS,
        xid=xid,
        kills_job=True,
        memory_readable=False,
        cordon=False,
    )


def leaves_node(kind: FaultKind) -> bool:
    """Whether a job the fault hits must leave its node (else it restarts where it was)."""
    return kind.cordon or kind.action >= Action.RESET_GPU


def triggered_save_possible(
    kind: FaultKind,
    nodes: int,
    data_parallel: int,
    replicas_per_node: int = 1,
    sharded: bool = False,
) -> bool:
    """Whether the job's healthy ranks can save a full copy of its state from GPU memory.

    The rule: possible when the faulty node's memory stays readable (then every rank can save),
    or when the job spans at least two nodes and some data-parallel replica lies wholly outside
    the lost node: more replicas than a node holds (`replicas_per_node`: one when a replica
    fills a node or more, several when its TP x PP is smaller). A one-node job whose GPU memory
    is lost cannot save. The rule assumes each replica holds the whole model and optimizer
    state; when the optimizer state is `sharded` across the replicas (the distributed
    optimizer, ZeRO, FSDP) a lost node takes its shards with it.
    """
    if nodes < 1 or data_parallel < 1 or replicas_per_node < 1:
        raise ValueError(
            f"nodes, data_parallel and replicas_per_node must be at least 1, not {nodes}, "
            f"{data_parallel}, {replicas_per_node}"
        )
    if kind.memory_readable:
        return True
    return nodes >= 2 and not sharded and data_parallel > replicas_per_node


def ecc_fault(
    dbe_count_delta: int, retired_pages: int, limit: int = RETIRED_PAGES_LIMIT
) -> FaultKind | None:
    """The fault one GPU's ECC counters show since the last sample: new uncorrectable errors
    first, else a retired-pages count at or above the limit; None when healthy."""
    if dbe_count_delta > 0:
        return CATALOGUE["ecc-dbe"]
    if retired_pages >= limit:
        return CATALOGUE["ecc-sbe-storm"]
    return None


def hang_fault(
    seconds_without_progress: float, hang_after_s: float = HANG_AFTER_S
) -> FaultKind | None:
    """The hang fault once a job has made no step progress for `hang_after_s`, else None."""
    return CATALOGUE["hang"] if seconds_without_progress >= hang_after_s else None


def straggler_fault(
    step_s: float, peer_step_s: Sequence[float], factor: float = STRAGGLER_FACTOR
) -> FaultKind | None:
    """The straggler fault when a rank's step time is at least `factor` times the median of its
    peers' (the median, so that one other slow rank does not hide this one); None otherwise,
    and None without peers to compare with."""
    if not peer_step_s:
        return None
    return CATALOGUE["straggler"] if step_s >= factor * statistics.median(peer_step_s) else None
