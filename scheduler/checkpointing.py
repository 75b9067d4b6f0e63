"""Checkpoint policies, their cost model, the interval advisor and the checkpoint registry rules.

Failures are modelled as a Poisson process: a job of `gpus` GPUs fails at `gpus` times the
per-GPU rate, so its mean time between failures (MTBF) `M` shrinks as it grows. Each policy is
judged by its expected effective training time ratio (ETTR): useful training time over wall
time. Run `python -m scheduler.checkpointing` for the table of policies at 16,384 and 100,000
GPUs.

References:
- Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.4: 419 unexpected interruptions in 54
  days of training on 16,384 GPUs, the failure rate used here.
- Young 1974, "A first order approximation to the optimum checkpoint interval", CACM 17(9).
- Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
  Future Generation Computer Systems 22: the expected wall time with exponential failures and
  the higher-order optimum interval, both used below.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from scheduler.words import HOURS, MINUTES, SECONDS, phrase

# What each policy costs, in words (`advise`).
PERIODIC = phrase(
    "Stop the world for {stall} every {every} (Daly's optimum for a job MTBF of {mtbf}); a "
    "failure loses half an interval on average, plus a {restart} restart."
)
ASYNC = phrase(
    "Copy to host memory ({stall} stall) every {every} and persist in the background "
    "({persist}); a failure loses half an interval plus a persist on average, plus a {restart} "
    "restart."
)
TRIGGERED = phrase(
    "On a fault the healthy ranks save from memory ({save}, half a step lost), possible for "
    "{success} of faults; otherwise fall back to {fallback}; plus a {restart} restart."
)
FALLBACK_ASYNC = phrase("an async checkpoint every {every}")
FALLBACK_START = phrase("the start of the job")
NONE = phrase("No checkpoints: every failure restarts the {hours} h job from the beginning.")


class PolicyKind(StrEnum):
    """How a job protects its progress against failures."""

    PERIODIC = "periodic"  # stop the world and write the state every interval
    ASYNC = "async"  # short stall to copy to host memory, persist in the background
    TRIGGERED = "triggered"  # save from memory when a fault hits; async checkpoints as fallback
    NONE = "none"  # nothing: a failure restarts the job from the beginning


@dataclass(frozen=True)
class Costs:
    """What checkpointing and recovery cost, in seconds; the defaults are the reference figures."""

    save_stall_s: float = 300.0  # periodic: stop-the-world save
    async_stall_s: float = 10.0  # async: copy the state to host memory
    async_persist_s: float = 300.0  # async: write it to storage in the background
    restart_s: float = 120.0  # restart on hot spares
    triggered_save_s: float = 30.0  # fault-triggered save from GPU memory
    triggered_success: float = 0.95  # share of faults where a triggered save is possible
    step_s: float = 10.0  # one training step; a triggered save loses half of one


@dataclass(frozen=True)
class Policy:
    """A policy and its checkpoint interval: None for NONE, and for TRIGGERED without fallback."""

    kind: PolicyKind
    interval_s: float | None = None


@dataclass(frozen=True)
class Advice:
    """One policy as the advisor recommends it, with its expected ETTR and why."""

    policy: Policy
    expected_ettr: float
    explanation: str


# 419 interruptions / (54 days x 24 h x 16,384 GPUs) = one per 50,677 GPU-hours (Llama 3).
FAILURES_PER_GPU_HOUR = 1 / 50_700
JOB_HOURS = 24.0  # the job length NONE is judged on: a failure loses everything since start


def job_mtbf_s(gpus: int, failures_per_gpu_hour: float = FAILURES_PER_GPU_HOUR) -> float:
    """Mean time between failures, in seconds, of a job on `gpus` GPUs."""
    if gpus < 1 or failures_per_gpu_hour <= 0:
        raise ValueError(f"need at least one GPU and a positive failure rate, not {gpus} GPUs")
    return 3600.0 / (gpus * failures_per_gpu_hour)


def young_interval(cost_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum checkpoint interval, sqrt(2 C M)."""
    return math.sqrt(2.0 * cost_s * mtbf_s)


def young_daly_interval(cost_s: float, mtbf_s: float) -> float:
    """The optimum compute time between checkpoints of cost C for a job of MTBF M.

    Daly's higher-order estimate, used for every C because it stays accurate when C is not
    small against M, and agrees with Young's sqrt(2 C M) to first order when it is:
        T = sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C   for C < 2M,
        T = M                                                      otherwise.
    """
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2.0 * mtbf_s)
    return young_interval(cost_s, mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost_s


def daly_ettr(interval_s: float, cost_s: float, restart_s: float, mtbf_s: float) -> float:
    """ETTR of checkpointing every `interval_s` of work at `cost_s` each, by Daly's closed form.

    With exponential failures (MTBF M), a restart R that must itself run without failure,
    checkpoint cost C and interval T, Daly's expected wall time for T_s of work is
        T_w = M e^{R/M} (e^{(T+C)/M} - 1) T_s / T,
    so ETTR = T_s / T_w = T / (M e^{R/M} (e^{(T+C)/M} - 1)). With C = 0 and T the whole job it
    is the ETTR of a job that restarts from scratch after every failure.
    """
    try:
        wall_per_interval = (
            mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + cost_s) / mtbf_s)
        )
    except OverflowError:  # e^x beyond a float: the job essentially never finishes
        return 0.0
    return interval_s / wall_per_interval


def first_order_ettr(
    stall_s: float, interval_s: float, lost_s: float, restart_s: float, mtbf_s: float
) -> float:
    """ETTR of the first-order model, term by term:

    - every `interval_s` of work stalls `stall_s`, stretching work by a factor 1 + S/T;
    - failures arrive once per `mtbf_s` of wall time, each costing the work lost since the last
      usable checkpoint (`lost_s`, on average) plus the restart, a share (L + R)/M of the wall
      time that does no work.
    So ETTR = (1 - (L + R)/M) / (1 + S/T), and 0 when failures leave no time for work.
    """
    useful = 1.0 - (lost_s + restart_s) / mtbf_s
    return max(0.0, useful / (1.0 + stall_s / interval_s))


def interval_for(
    kind: PolicyKind,
    gpus: int,
    costs: Costs = Costs(),
    failures_per_gpu_hour: float = FAILURES_PER_GPU_HOUR,
) -> float | None:
    """The advisor's checkpoint interval for a policy, from Young/Daly with its stall cost.

    Async snapshots are never closer than one background persist, since a new snapshot waits
    for the previous one to be written. A triggered policy's async fallback is needed only for
    the faults a triggered save cannot cover, so its interval uses the MTBF of those faults,
    M / (1 - success); with success 1 it needs no fallback.
    """
    mtbf = job_mtbf_s(gpus, failures_per_gpu_hour)
    kind = PolicyKind(kind)  # a ValueError for an unknown kind, not a silent default
    if kind == PolicyKind.PERIODIC:
        return young_daly_interval(costs.save_stall_s, mtbf)
    if kind == PolicyKind.ASYNC:
        return max(young_daly_interval(costs.async_stall_s, mtbf), costs.async_persist_s)
    if kind == PolicyKind.TRIGGERED and costs.triggered_success < 1:
        uncovered_mtbf = mtbf / (1 - costs.triggered_success)
        return max(young_daly_interval(costs.async_stall_s, uncovered_mtbf), costs.async_persist_s)
    return None


def expected_ettr(
    policy: Policy,
    gpus: int,
    costs: Costs = Costs(),
    failures_per_gpu_hour: float = FAILURES_PER_GPU_HOUR,
    job_hours: float = JOB_HOURS,
) -> float:
    """Expected ETTR of a job on `gpus` GPUs under `policy`.

    - PERIODIC: Daly's closed form (`daly_ettr`) with C the stop-the-world save.
    - ASYNC: first order; a failure loses half an interval on average, plus one persist time,
      because a failure while the newest snapshot is still being written falls back to the
      one before it (the persist is in flight for P of every T, costing T extra then).
    - TRIGGERED: first order; with probability `triggered_success` a failure loses half a step
      and the triggered save; otherwise what the async fallback loses, or half the job's run
      so far without a fallback. The fallback's stall is paid every interval.
    - NONE: Daly's closed form with no checkpoint cost and the whole `job_hours` as interval:
      every failure loses everything since the start.
    """
    mtbf = job_mtbf_s(gpus, failures_per_gpu_hour)
    interval = policy.interval_s
    PolicyKind(policy.kind)  # a ValueError for an unknown kind, not a silent default
    if policy.kind == PolicyKind.NONE:
        return daly_ettr(job_hours * 3600.0, 0.0, costs.restart_s, mtbf)
    if interval is None and policy.kind != PolicyKind.TRIGGERED:
        raise ValueError(f"a {policy.kind} policy needs an interval")
    if policy.kind == PolicyKind.PERIODIC:
        return daly_ettr(interval, costs.save_stall_s, costs.restart_s, mtbf)
    if policy.kind == PolicyKind.ASYNC:
        lost = interval / 2 + costs.async_persist_s
        return first_order_ettr(costs.async_stall_s, interval, lost, costs.restart_s, mtbf)
    return _triggered_ettr(interval, mtbf, costs, job_hours)


def _triggered_ettr(interval: float | None, mtbf: float, costs: Costs, job_hours: float) -> float:
    saved = costs.step_s / 2 + costs.triggered_save_s
    if interval is None:  # no fallback: an unsaved failure loses half the run on average
        stall, interval, fallback = 0.0, math.inf, job_hours * 3600.0 / 2
    else:
        stall, fallback = costs.async_stall_s, interval / 2 + costs.async_persist_s
    p = costs.triggered_success
    lost = p * saved + (1 - p) * fallback
    return first_order_ettr(stall, interval, lost, costs.restart_s, mtbf)


def advise(
    gpus: int,
    costs: Costs = Costs(),
    failures_per_gpu_hour: float = FAILURES_PER_GPU_HOUR,
    job_hours: float = JOB_HOURS,
) -> list[Advice]:
    """One piece of advice per policy kind, its interval from `interval_for`, best ETTR first
    (ties in the order of `PolicyKind`)."""
    mtbf = job_mtbf_s(gpus, failures_per_gpu_hour)
    advice = []
    for kind in PolicyKind:
        policy = Policy(kind, interval_for(kind, gpus, costs, failures_per_gpu_hour))
        ettr = expected_ettr(policy, gpus, costs, failures_per_gpu_hour, job_hours)
        advice.append(Advice(policy, ettr, _explain(policy, mtbf, costs, job_hours)))
    return sorted(advice, key=lambda a: -a.expected_ettr)


def _explain(policy: Policy, mtbf: float, costs: Costs, job_hours: float) -> str:
    every = duration(policy.interval_s) if policy.interval_s is not None else ""
    restart = duration(costs.restart_s)
    if policy.kind == PolicyKind.PERIODIC:
        return PERIODIC.format(
            stall=duration(costs.save_stall_s), every=every, mtbf=duration(mtbf), restart=restart
        )
    if policy.kind == PolicyKind.ASYNC:
        return ASYNC.format(
            stall=duration(costs.async_stall_s),
            every=every,
            persist=duration(costs.async_persist_s),
            restart=restart,
        )
    if policy.kind == PolicyKind.TRIGGERED:
        return TRIGGERED.format(
            save=duration(costs.triggered_save_s),
            success=f"{costs.triggered_success:.0%}",
            fallback=FALLBACK_ASYNC.format(every=every) if every else FALLBACK_START,
            restart=restart,
        )
    return NONE.format(hours=f"{job_hours:g}")


def duration(seconds: float) -> str:
    """A short human duration: "45 s", "7.8 min", "3.1 h"."""
    if seconds < 120:
        return SECONDS.format(n=f"{seconds:.0f}")
    if seconds < 7200:
        return MINUTES.format(n=f"{seconds / 60:.1f}")
    return HOURS.format(hours=f"{seconds / 3600:.1f}")


def table(gpu_counts: Iterable[int] = (16_384, 100_000), costs: Costs = Costs()) -> str:
    """A Markdown table of every policy's interval and expected ETTR at each job size."""
    counts = list(gpu_counts)
    header = ["policy"]
    for gpus in counts:
        header += [f"interval @ {gpus:,} GPUs", f"ETTR @ {gpus:,} GPUs"]
    rows = [header, ["---"] * len(header)]
    for kind in PolicyKind:
        row = [kind.value]
        for gpus in counts:
            policy = Policy(kind, interval_for(kind, gpus, costs))
            interval = duration(policy.interval_s) if policy.interval_s is not None else "-"
            row += [interval, f"{expected_ettr(policy, gpus, costs):.3f}"]
        rows.append(row)
    mtbfs = ", ".join(f"{duration(job_mtbf_s(g))} at {g:,} GPUs" for g in counts)
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join([f"Job MTBF: {mtbfs}.", "", *lines])


# -- The checkpoint registry's rules ---------------------------------------------------------


class CheckpointStatus(StrEnum):
    """Where a checkpoint stands."""

    COMPLETE = "complete"  # every shard written and verified: a job can resume from it
    PARTIAL = "partial"  # some shards missing: unusable
    FAILED = "failed"  # the save failed
    IN_PROGRESS = "in_progress"  # being written now


class CheckpointLike(Protocol):
    """What the registry rules read from a checkpoint (an ORM row or a dataclass)."""

    @property
    def step(self) -> int: ...

    @property
    def status(self) -> str: ...

    @property
    def created_at(self) -> Any: ...


C = TypeVar("C", bound=CheckpointLike)


def _age_key(checkpoint: CheckpointLike) -> tuple[int, Any]:
    return (checkpoint.step, checkpoint.created_at)


def latest_complete(checkpoints: Iterable[C]) -> C | None:
    """The checkpoint a job resumes from: the complete one with the highest step, then the
    newest `created_at`; None when there is no complete one."""
    complete = [c for c in checkpoints if c.status == CheckpointStatus.COMPLETE]
    return max(complete, key=_age_key, default=None)


def to_prune(checkpoints: Iterable[C], keep: int) -> list[C]:
    """The checkpoints to delete, oldest first.

    Kept: the newest `keep` complete ones (always at least the latest complete one), every
    in-progress one, and failed or partial ones newer than the latest complete one (they may
    still be looked into). Pruned: older complete ones, and failed or partial ones older than
    the latest complete one. Without a complete checkpoint nothing is pruned.
    """
    if keep < 0:
        raise ValueError(f"keep must not be negative, not {keep}")
    items = list(checkpoints)
    latest = latest_complete(items)
    if latest is None:
        return []
    complete = [c for c in items if c.status == CheckpointStatus.COMPLETE and c is not latest]
    complete.sort(key=_age_key, reverse=True)
    doomed = complete[max(keep, 1) - 1 :]
    broken = (CheckpointStatus.FAILED, CheckpointStatus.PARTIAL)
    doomed += [c for c in items if c.status in broken and _age_key(c) < _age_key(latest)]
    return sorted(doomed, key=_age_key)


if __name__ == "__main__":
    print(table())
