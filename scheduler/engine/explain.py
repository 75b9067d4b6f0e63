"""Reasons a person can act on, with the numbers behind them, for preemptions, shrinks and the
workloads that wait for them or for a budget."""

from __future__ import annotations

import math

from scheduler.engine.capacity import describe, plural
from scheduler.engine.model import Budget, Queue, Workload
from scheduler.engine.moves import Claim, Move, MoveKind, Rule
from scheduler.engine.quota import QuotaLedger


def cause(ledger: QuotaLedger, rule: Rule, queue: Queue, workload: Workload) -> str:
    """The rule that lets `workload` of `queue` make room, in words."""
    model = workload.gpu_model
    if rule == Rule.RECLAIM:
        used, nominal = ledger.usage[queue.id, model], queue.quota(model).nominal
        gpus = workload.gpus
        cohort = None if used + gpus <= nominal else ledger.lowest_fit(queue, model, gpus)
        if cohort is not None:
            name, in_use, quota = cohort
            return (
                f"cohort {name} of queue {queue.name} has room in its {model} quota "
                f"({in_use}/{quota} in use, job needs {gpus})"
            )
        own = ", with its own lower-priority work stopped" if used + gpus > nominal else ""
        return (
            f"queue {queue.name} is under its {model} nominal quota ({used}/{nominal} in "
            f"use, job needs {gpus}{own})"
        )
    if rule == Rule.PRIORITY:
        return f"it has priority {workload.priority} in queue {queue.name}"
    if rule == Rule.NEWER:
        return (
            f"it has priority {workload.priority} in queue {queue.name} and was submitted "
            "first (LowerOrNewerEqualPriority)"
        )
    if rule == Rule.BORROW:
        ceiling = queue.preemption.borrow_ceiling(workload.priority)
        if ceiling == math.inf:
            share = ledger.share(queue, workload.gpu_model, workload.gpus)
            return (
                f"queue {queue.name} may borrow over others' borrowed work by fair share "
                f"(its share with the job: {share:.2f})"
            )
        return (
            f"queue {queue.name} may borrow over work below priority {ceiling} and it has "
            f"priority {workload.priority}"
        )
    return "the work there is already stopping"


def _borrows(ledger: QuotaLedger, victim: Workload) -> str:
    queue = ledger.queue_or_none(victim.queue_id)
    if queue is None:
        return f"queue {victim.queue_id} is not in the snapshot"
    model = victim.gpu_model
    return (
        f"queue {queue.name} borrows {ledger.borrowing(queue, model)} {model} GPUs beyond "
        f"its nominal {queue.quota(model).nominal}"
    )


def preemption_reason(ledger: QuotaLedger, move: Move, queue: Queue, workload: Workload) -> str:
    """Why `move.workload` is preempted for `workload`; read before the ledger changes."""
    victim = move.workload
    if move.rule == Rule.RECLAIM:
        return (
            f"reclaimed for workload {workload.id}: {cause(ledger, move.rule, queue, workload)}"
            f", and {_borrows(ledger, victim)}"
        )
    if move.rule == Rule.NEWER:
        return (
            f"preempted for workload {workload.id} of the same queue {queue.name} and the same "
            f"priority {workload.priority}, submitted before this workload"
        )
    if move.rule == Rule.PRIORITY:
        return (
            f"preempted for workload {workload.id} of the same queue {queue.name}, whose "
            f"priority {workload.priority} is above this workload's {victim.priority}"
        )
    return (
        f"preempted for workload {workload.id}: {cause(ledger, move.rule, queue, workload)}; "
        f"this workload has priority {victim.priority} and {_borrows(ledger, victim)}"
    )


def shrink_reason(
    ledger: QuotaLedger, move: Move, keep: int, queue: Queue, workload: Workload
) -> str:
    """Why an elastic workload shrinks to `keep` GPUs for `workload`."""
    victim = move.workload
    kept = ""
    if victim.throughput:
        share = victim.rate(keep) / victim.rate(victim.held)
        kept = f", keeping {share:.0%} of its throughput"
    return (
        f"shrunk from {victim.held} to {keep} GPUs (its minimum is {victim.fewest_gpus}{kept}) "
        f"to make room for workload {workload.id}: {cause(ledger, move.rule, queue, workload)}"
    )


def grow_reason(workload: Workload, gpus: int, region: str) -> str:
    """Why an elastic workload grows to `gpus` GPUs."""
    gained = ""
    if workload.throughput:
        more = workload.rate(gpus) / workload.rate(workload.held) - 1
        gained = f", {more:.0%} more throughput"
    where = f" in {region}" if region else ""
    return (
        f"grown from {workload.held} to {gpus} GPUs{gained}: they were free and no work waits "
        f"for {workload.gpu_model} GPUs{where}"
    )


def claim_reason(ledger: QuotaLedger, claim: Claim, queue: Queue, workload: Workload) -> str:
    """Why a claimant waits although room is being made for it."""
    evicted: dict[str, int] = {}  # queue name -> workloads evicted
    gone, shrunk, stopping = set(), set(), set()
    rule = None  # the first rule at stake
    for move in claim.moves:
        if move.kind == MoveKind.RELEASING:
            stopping.add(move.workload.id)
            continue
        rule = move.rule if rule is None else rule
        if move.kind == MoveKind.EVICT:
            gone.add(move.workload.id)
            name = _queue_name(ledger, move.workload)
            evicted[name] = evicted.get(name, 0) + 1
        else:
            shrunk.add(move.workload.id)
    shrunk -= gone  # an eviction supersedes a shrink
    parts = []
    if shrunk:
        parts.append(f"shrinking {plural(len(shrunk), 'elastic workload')}")
    if evicted:
        count = sum(evicted.values())
        of = ", ".join(f"{name}: {n}" for name, n in sorted(evicted.items()))
        parts.append(f"preempting {plural(count, 'workload')} (queue {of})")
    if stopping:
        parts.append(f"waiting for {plural(len(stopping), 'preempted workload')} to stop")
    where = f" in {describe(claim.level, claim.domain)}" if claim.domain else ""
    why = f" ({cause(ledger, rule, queue, workload)})" if rule is not None else ""
    return f"{' and '.join(parts)} to make room{where}{why}; it starts once they have stopped"


def _queue_name(ledger: QuotaLedger, workload: Workload) -> str:
    queue = ledger.queue_or_none(workload.queue_id)
    return queue.name if queue is not None else str(workload.queue_id)


def kept_off_reason(no_room: str, held: dict[int, int]) -> str:
    """Why there is no room, adding the reservations (owner -> nodes with free GPUs held) that
    keep the workload off GPUs it could otherwise use."""
    held = {owner: nodes for owner, nodes in held.items() if nodes}
    if not held:
        return no_room
    nodes = sum(held.values())
    owners = ", ".join(str(owner) for owner in held)
    gangs = f"gang (workload {owners})" if len(held) == 1 else f"gangs (workloads {owners})"
    verb = "is" if nodes == 1 else "are"
    return (
        f"{no_room}; {plural(nodes, 'node')} with free GPUs {verb} reserved for waiting "
        f"{gangs}, usable only by work that ends before they start or that they could "
        f"preempt"
    )


def budget_reason(
    budget: Budget,
    left: float,
    need: float,
    gpu_model: str,
    gpus: int,
    seconds: float,
    held: bool,
    to_the_end: bool = False,
) -> str:
    """Why a hard budget keeps a workload out: what the budget has left (`held`: after the
    time limits of work already running), what the workload may use (`to_the_end`: in the
    `seconds` left of the window, less than its time limit), and the difference."""
    left = max(0.0, left)
    weight = budget.weight(gpu_model)
    weighted = f", weighted {weight:g}" if weight != 1 else ""
    after = " after its running jobs' time limits" if held else ""
    span = f"the {duration(seconds)} left {budget.window}" if to_the_end else duration(seconds)
    return (
        f"budget of {budget.name}: {gpu_hours(left)} GPU-hours left {budget.window}{after}, "
        f"this job needs up to {gpu_hours(need)} ({gpus} {gpu_model} GPUs for "
        f"{span}{weighted}), {gpu_hours(need - left)} more than is left"
    )


def untimed_reason(budget: Budget, left: float) -> str:
    """Why a workload without a time limit waits under a hard budget."""
    return (
        f"budget of {budget.name} is hard and this job has no time limit: only jobs with one "
        f"start under it ({gpu_hours(max(0.0, left))} GPU-hours left {budget.window})"
    )


def soft_budget_reason(budget: Budget, gpu_model: str) -> str:
    """Why a workload that would borrow waits while its soft budget is spent."""
    return (
        f"budget of {budget.name} is spent {budget.window} ({gpu_hours(budget.used)} of "
        f"{gpu_hours(budget.limit)} GPU-hours used): its jobs start only within their "
        f"queue's nominal {gpu_model} quota, and this one would borrow"
    )


def gpu_hours(hours: float) -> str:
    """GPU-hours in words: whole ones with thousands separators, tenths below 100."""
    return f"{hours:,.0f}" if abs(hours) >= 100 else f"{hours:,.1f}".removesuffix(".0")


def duration(seconds: float) -> str:
    """A time limit in hours: "96 h", "1.5 h", "0.25 h"."""
    return f"{seconds / 3600:,.2f}".rstrip("0").rstrip(".") + " h"
