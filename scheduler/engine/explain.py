"""Reasons a person can act on, with the numbers behind them, for preemptions, shrinks and the
workloads that wait for them or for a budget."""

from __future__ import annotations

import math

from scheduler.engine.gains import Contender, worth
from scheduler.engine.model import Budget, Queue, Workload
from scheduler.engine.moves import Claim, Move, MoveKind, Rule
from scheduler.engine.quota import NOT_IN_SNAPSHOT, QuotaLedger
from scheduler.engine.topology import describe, plural
from scheduler.parallelism import PREDICTION_ERROR
from scheduler.words import AND_SO, HOURS, amount, phrase

COHORT_ROOM = phrase(
    "cohort {cohort} of queue {queue} has room in its {model} quota ({used}/{quota} in use, "
    "job needs {gpus})"
)
UNDER_QUOTA = phrase(
    "queue {queue} is under its {model} nominal quota ({used}/{nominal} in use, job needs {gpus})"
)
UNDER_QUOTA_OWN = phrase(
    "queue {queue} is under its {model} nominal quota ({used}/{nominal} in use, job needs "
    "{gpus}, with its own lower-priority work stopped)"
)
PRIORITY = phrase("it has priority {priority} in queue {queue}")
NEWER = phrase(
    "it has priority {priority} in queue {queue} and was submitted first "
    "(LowerOrNewerEqualPriority)"
)
BORROW_FAIR = phrase(
    "queue {queue} may borrow over others' borrowed work by fair share (its share with the "
    "job: {share})"
)
BORROW_BELOW = phrase(
    "queue {queue} may borrow over work below priority {ceiling} and it has priority {priority}"
)
GAINS = phrase(
    "the GPUs do more for it than for the elastic work of its queue {queue} and priority "
    "{priority} that gives them back"
)
STOPPING = phrase("the work there is already stopping")
BORROWS = phrase("queue {queue} borrows {borrowed} {model} GPUs beyond its nominal {nominal}")
RECLAIMED = phrase("reclaimed for workload {workload}: {cause}, and {borrows}")
PREEMPTED_NEWER = phrase(
    "preempted for workload {workload} of the same queue {queue} and the same priority "
    "{priority}, submitted before this workload"
)
PREEMPTED_PRIORITY = phrase(
    "preempted for workload {workload} of the same queue {queue}, whose priority {priority} "
    "is above this workload's {own}"
)
PREEMPTED = phrase(
    "preempted for workload {workload}: {cause}; this workload has priority {own} and {borrows}"
)
SHRUNK = phrase(
    "shrunk from {held} to {keep} GPUs (its minimum is {fewest}) to make room for workload "
    "{workload}: {cause}"
)
SHRUNK_KEEPING = phrase(
    "shrunk from {held} to {keep} GPUs (its minimum is {fewest}, keeping {share} of its "
    "throughput) to make room for workload {workload}: {cause}"
)
GROWN = phrase(
    "grown from {held} to {gpus} GPUs: they were free and no work waits for {model} GPUs"
)
GROWN_MORE = phrase(
    "grown from {held} to {gpus} GPUs, {more} more throughput: they were free and no work "
    "waits for {model} GPUs"
)
GROWN_IN = phrase(
    "grown from {held} to {gpus} GPUs: they were free and no work waits for {model} GPUs in "
    "{region}"
)
GROWN_MORE_IN = phrase(
    "grown from {held} to {gpus} GPUs, {more} more throughput: they were free and no work "
    "waits for {model} GPUs in {region}"
)
# A gain smaller than the planner's error (`parallelism.PREDICTION_ERROR`): said so.
PLANNER_ERROR = f"{PREDICTION_ERROR * 100:g}%"
# A shrink for waiting work of the same queue and priority (`Rule.GAIN`), with both jobs'
# throughput in what one GPU does for each alone (`gains.worth`).
SHRUNK_FOR_GAIN = phrase(
    "shrunk from {held} to {keep} GPUs (its minimum is {fewest}) for workload {workload} of the "
    "same queue {queue} and priority {priority}: its {gpus} GPUs there do {gained} GPUs' work "
    "for it, the {freed} given back did {lost} here, a gain beyond the planner's error of "
    "{error}"
)
GROWN_UNSURE = phrase(
    "grown from {held} to {gpus} GPUs, {more} more throughput, less than the planner's error of "
    "{error}: they were free and no work waits for {model} GPUs"
)
GROWN_UNSURE_IN = phrase(
    "grown from {held} to {gpus} GPUs, {more} more throughput, less than the planner's error of "
    "{error}: they were free and no work waits for {model} GPUs in {region}"
)
SHRINKING = phrase("shrinking {workloads}")
PREEMPTING = phrase("preempting {workloads} (queue {queues})")
WAITING_FOR = phrase("waiting for {workloads} to stop")
BOTH = phrase("{one} and {other}")
MAKING_ROOM = phrase("{moves} to make room; it starts once they have stopped")
MAKING_ROOM_IN = phrase("{moves} to make room in {domain}; it starts once they have stopped")
MAKING_ROOM_WHY = phrase("{moves} to make room ({cause}); it starts once they have stopped")
MAKING_ROOM_IN_WHY = phrase(
    "{moves} to make room in {domain} ({cause}); it starts once they have stopped"
)
NOUNS = (
    phrase("{count} elastic workload"), phrase("{count} elastic workloads"),
    phrase("{count} workload"), phrase("{count} workloads"),
    phrase("{count} preempted workload"), phrase("{count} preempted workloads"),
    phrase("{count} node"), phrase("{count} nodes"),
)  # fmt: skip
KEPT_OFF = phrase(
    "{no_room}; {nodes} with free GPUs {verb} reserved for waiting {gangs}, usable only by "
    "work that ends before they start or that they could preempt"
)
GANG = phrase("gang (workload {owners})")
GANGS = phrase("gangs (workloads {owners})")
IS, ARE = phrase("is"), phrase("are")
BUDGET = phrase(
    "budget of {budget}: {left} GPU-hours left {window}, this job needs up to {need} ({gpus} "
    "{model} GPUs for {span}{weighted}), {over} more than is left"
)
BUDGET_HELD = phrase(
    "budget of {budget}: {left} GPU-hours left {window} after its running jobs' time limits, "
    "this job needs up to {need} ({gpus} {model} GPUs for {span}{weighted}), {over} more than "
    "is left"
)
WEIGHTED = phrase(", weighted {weight}")
TO_THE_END = phrase("the {duration} left {window}")
UNTIMED = phrase(
    "budget of {budget} is hard and this job has no time limit: only jobs with one start under "
    "it ({left} GPU-hours left {window})"
)
SOFT_SPENT = phrase(
    "budget of {budget} is spent {window} ({used} of {limit} GPU-hours used): its jobs start "
    "only within their queue's nominal {model} quota, and this one would borrow"
)


def cause(ledger: QuotaLedger, rule: Rule, queue: Queue, workload: Workload) -> str:
    """The rule that lets `workload` of `queue` make room, in words."""
    model, gpus = workload.gpu_model, workload.gpus
    if rule == Rule.RECLAIM:
        used, nominal = ledger.usage[queue.id, model], queue.quota(model).nominal
        cohort = None if used + gpus <= nominal else ledger.lowest_fit(queue, model, gpus)
        if cohort is not None:
            name, in_use, quota = cohort
            return COHORT_ROOM.format(
                cohort=name, queue=queue.name, model=model, used=in_use, quota=quota, gpus=gpus
            )
        template = UNDER_QUOTA_OWN if used + gpus > nominal else UNDER_QUOTA
        return template.format(queue=queue.name, model=model, used=used, nominal=nominal, gpus=gpus)
    if rule == Rule.PRIORITY:
        return PRIORITY.format(priority=workload.priority, queue=queue.name)
    if rule == Rule.NEWER:
        return NEWER.format(priority=workload.priority, queue=queue.name)
    if rule == Rule.GAIN:
        return GAINS.format(priority=workload.priority, queue=queue.name)
    if rule == Rule.BORROW:
        ceiling = queue.preemption.borrow_ceiling(workload.priority)
        if ceiling == math.inf:
            share = ledger.share(queue, workload.gpu_model, workload.gpus)
            return BORROW_FAIR.format(queue=queue.name, share=f"{share:.2f}")
        return BORROW_BELOW.format(queue=queue.name, ceiling=ceiling, priority=workload.priority)
    return STOPPING


def _borrows(ledger: QuotaLedger, victim: Workload) -> str:
    queue = ledger.queue_or_none(victim.queue_id)
    if queue is None:
        return NOT_IN_SNAPSHOT.format(queue=victim.queue_id)
    model = victim.gpu_model
    return BORROWS.format(
        queue=queue.name,
        borrowed=ledger.borrowing(queue, model),
        model=model,
        nominal=queue.quota(model).nominal,
    )


def preemption_reason(ledger: QuotaLedger, move: Move, queue: Queue, workload: Workload) -> str:
    """Why `move.workload` is preempted for `workload`; read before the ledger changes."""
    victim, claimant = move.workload, workload.id
    if move.rule == Rule.RECLAIM:
        return RECLAIMED.format(
            workload=claimant,
            cause=cause(ledger, move.rule, queue, workload),
            borrows=_borrows(ledger, victim),
        )
    if move.rule == Rule.NEWER:
        return PREEMPTED_NEWER.format(
            workload=claimant, queue=queue.name, priority=workload.priority
        )
    if move.rule == Rule.PRIORITY:
        return PREEMPTED_PRIORITY.format(
            workload=claimant, queue=queue.name, priority=workload.priority, own=victim.priority
        )
    return PREEMPTED.format(
        workload=claimant,
        cause=cause(ledger, move.rule, queue, workload),
        own=victim.priority,
        borrows=_borrows(ledger, victim),
    )


def shrink_reason(
    ledger: QuotaLedger, move: Move, keep: int, queue: Queue, workload: Workload
) -> str:
    """Why an elastic workload shrinks to `keep` GPUs for `workload`."""
    victim = move.workload
    if move.rule == Rule.GAIN:
        model, freed = victim.gpu_model, victim.held - keep
        lost = worth(victim, model, victim.held) - worth(victim, model, keep)
        return SHRUNK_FOR_GAIN.format(
            held=victim.held,
            keep=keep,
            fewest=victim.fewest_gpus,
            workload=workload.id,
            queue=queue.name,
            priority=workload.priority,
            gpus=workload.gpus,
            gained=amount(worth(workload, model, workload.gpus)),
            freed=freed,
            lost=amount(lost),
            error=PLANNER_ERROR,
        )
    fields = {
        "held": victim.held,
        "keep": keep,
        "fewest": victim.fewest_gpus,
        "workload": workload.id,
        "cause": cause(ledger, move.rule, queue, workload),
    }
    if victim.throughput:
        share = victim.rate(keep) / victim.rate(victim.held)
        return SHRUNK_KEEPING.format(share=f"{share:.0%}", **fields)
    return SHRUNK.format(**fields)


def grow_reason(workload: Workload, gpus: int, region: str) -> str:
    """Why an elastic workload grows to `gpus` GPUs."""
    fields = {"held": workload.held, "gpus": gpus, "model": workload.gpu_model}
    if workload.throughput:
        more = workload.rate(gpus) / workload.rate(workload.held) - 1
        unsure = more < PREDICTION_ERROR
        template = {
            (False, False): GROWN_MORE,
            (False, True): GROWN_MORE_IN,
            (True, False): GROWN_UNSURE,
            (True, True): GROWN_UNSURE_IN,
        }[unsure, bool(region)]
        return template.format(more=f"{more:.0%}", region=region, error=PLANNER_ERROR, **fields)
    return (GROWN_IN if region else GROWN).format(region=region, **fields)


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
        parts.append(SHRINKING.format(workloads=plural(len(shrunk), "elastic workload")))
    if evicted:
        count = sum(evicted.values())
        of = ", ".join(f"{name}: {n}" for name, n in sorted(evicted.items()))
        parts.append(PREEMPTING.format(workloads=plural(count, "workload"), queues=of))
    if stopping:
        parts.append(WAITING_FOR.format(workloads=plural(len(stopping), "preempted workload")))
    moves = parts[0]
    for part in parts[1:]:
        moves = BOTH.format(one=moves, other=part)
    fields = {"moves": moves}
    if claim.domain:
        fields["domain"] = describe(claim.level, claim.domain)
    if rule is not None:
        fields["cause"] = cause(ledger, rule, queue, workload)
    template = {
        (False, False): MAKING_ROOM,
        (True, False): MAKING_ROOM_IN,
        (False, True): MAKING_ROOM_WHY,
        (True, True): MAKING_ROOM_IN_WHY,
    }[bool(claim.domain), rule is not None]
    return template.format(**fields)


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
    return KEPT_OFF.format(
        no_room=no_room,
        nodes=plural(nodes, "node"),
        verb=IS if nodes == 1 else ARE,
        gangs=(GANG if len(held) == 1 else GANGS).format(owners=owners),
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
    span = duration(seconds)
    return (BUDGET_HELD if held else BUDGET).format(
        budget=budget.name,
        left=gpu_hours(left),
        window=budget.window,
        need=gpu_hours(need),
        gpus=gpus,
        model=gpu_model,
        span=TO_THE_END.format(duration=span, window=budget.window) if to_the_end else span,
        weighted=WEIGHTED.format(weight=f"{weight:g}") if weight != 1 else "",
        over=gpu_hours(need - left),
    )


def untimed_reason(budget: Budget, left: float) -> str:
    """Why a workload without a time limit waits under a hard budget."""
    return UNTIMED.format(budget=budget.name, left=gpu_hours(max(0.0, left)), window=budget.window)


def soft_budget_reason(budget: Budget, gpu_model: str) -> str:
    """Why a workload that would borrow waits while its soft budget is spent."""
    return SOFT_SPENT.format(
        budget=budget.name,
        window=budget.window,
        used=gpu_hours(budget.used),
        limit=gpu_hours(budget.limit),
        model=gpu_model,
    )


def gpu_hours(hours: float) -> str:
    """GPU-hours in words: whole ones with thousands separators, tenths below 100."""
    return f"{hours:,.0f}" if abs(hours) >= 100 else f"{hours:,.1f}".removesuffix(".0")


def duration(seconds: float) -> str:
    """A time limit in hours: "96 h", "1.5 h", "0.25 h"."""
    return HOURS.format(hours=f"{seconds / 3600:,.2f}".rstrip("0").rstrip("."))


# Which GPU model a workload that accepts several starts on, and why.
MODEL_FASTEST = phrase("{model}: the fastest of the GPU models it accepts ({times}x {slowest})")
MODEL_FASTER_FULL = phrase("{model}: {faster} would be {times}x faster but has no room now")
MODEL_FIRST = phrase("{model}: the first of the GPU models it accepts")
MODEL_FIRST_FULL = phrase("{model}: {first}, listed before it, has no room now")
MODEL_UNSURE = phrase(
    "{choice} (a difference within the planner's error of {error}, so either would do)"
)
# The waiting gang may be another tenant's, the moved jobs too: no figure of theirs is given.
DEFRAGMENTED = phrase(
    "moved within pod {pod} to node {node}, so that whole {model} nodes free up there for "
    "workload {workload}, which waits with enough GPUs free but scattered"
)
DEFRAGGING = phrase("running work within pod {pod} moves to free whole nodes for it")
MOVED = phrase(
    "moved from {old} to {model} GPUs, {times}x faster there: they were free and no work waits "
    "for them"
)
MODEL_AWAITED = phrase(
    "{model}: {times}x faster than the {free} free now; expected to start in {minutes} min and "
    "still end sooner there"
)
SIZE_AWAITED = phrase(
    "it waits for its {gpus} GPUs, expected free in {minutes} min: it ends sooner so than on "
    "fewer now"
)
MODEL_NONE_FREE = phrase("none of the GPU models it accepts ({models}) has room now; {cause}")
# A faster model left to waiting work that gains more there (`gains`): it starts on another,
# or waits. The other work may be another tenant's: its own gain is not given.
MODEL_LEFT = phrase(
    "{model}: {faster} has room but is left to workload {workload}, which gains more there "
    "than this one ({own}x faster than on {slower})"
)
MODEL_LEFT_WAITS = phrase(
    "{faster} has room but is left to workload {workload}, which gains more there than this one "
    "({own}x faster than on {slower}); {cause}"
)
# Speeds measured by the job's own earlier runs, not predicted by the planner.
MODEL_MEASURED = phrase("{choice}, as measured over {runs} earlier runs")
MODEL_MEASURED_ONE = phrase("{choice}, as measured over one earlier run")


def model_reason(workload: Workload, chosen: str) -> str:
    """Why `workload` starts on `chosen`, one of the GPU models it accepts (`Workload.models`,
    the best first), and where its speeds were measured, over how many of its runs (the
    planner's error is no measurement's)."""
    best, slowest = workload.models[0], workload.models[-1]
    speed, best_speed = workload.speed(chosen), workload.speed(best)
    if any(workload.speed(model) is None for model in workload.models):
        if chosen == best:
            return MODEL_FIRST.format(model=chosen)
        return MODEL_FIRST_FULL.format(model=chosen, first=best)
    if chosen == best:
        ratio = speed / workload.speed(slowest)
        choice = MODEL_FASTEST.format(model=chosen, times=f"{ratio:.1f}", slowest=slowest)
    else:
        ratio = best_speed / speed
        choice = MODEL_FASTER_FULL.format(model=chosen, faster=best, times=f"{ratio:.1f}")
    if workload.measured:
        template = MODEL_MEASURED_ONE if workload.measured == 1 else MODEL_MEASURED
        return template.format(choice=choice, runs=workload.measured)
    if ratio - 1 < PREDICTION_ERROR:
        return MODEL_UNSURE.format(choice=choice, error=PLANNER_ERROR)
    return choice


def none_free_reason(workload: Workload, cause: str) -> str:
    """Why a workload that accepts several GPU models waits: none has room, and what waiting
    for the best of them (`cause`) is about."""
    return MODEL_NONE_FREE.format(models=", ".join(workload.models), cause=cause)


def left_reason(left: Contender, chosen: str, cause: str | None = None) -> str:
    """Why a workload starts on `chosen`, or waits for it (`cause`: why it waits), having left
    a faster model to waiting work that gains more there."""
    fields = {
        "faster": left.faster,
        "workload": left.workload.id,
        "slower": left.slower,
        "own": f"{left.own_gain:.1f}",
    }
    if cause is None:
        return MODEL_LEFT.format(model=chosen, **fields)
    return MODEL_LEFT_WAITS.format(cause=cause, **fields)


def move_reason(workload: Workload, model: str) -> str:
    """Why a running workload moves to `model`, a faster one it accepts."""
    times = workload.speed(model) / workload.speed(workload.gpu_model)
    return MOVED.format(old=workload.gpu_model, model=model, times=f"{times:.1f}")


def awaited_reason(workload: Workload, model: str, free: str, start_in_s: float) -> str:
    """Why a workload waits for `model` although `free` has room now."""
    times = workload.speed(model) / workload.speed(free)
    minutes = max(1, math.ceil(start_in_s / 60))
    return MODEL_AWAITED.format(model=model, times=f"{times:.1f}", free=free, minutes=minutes)


def size_awaited_reason(reason: str, workload: Workload, start_in_s: float) -> str:
    """Why an elastic workload waits for its size although fewer GPUs are free: `reason`, and
    that it ends sooner once its size frees, in `start_in_s`."""
    minutes = max(1, math.ceil(start_in_s / 60))
    then = SIZE_AWAITED.format(gpus=workload.gpus, minutes=minutes)
    return AND_SO.format(reason=reason, then=then)


def defrag_reason(node: str, pod: str, gang: Workload) -> str:
    """Why a running workload moves to `node` within `pod`: so that `gang` finds whole nodes."""
    return DEFRAGMENTED.format(pod=pod, node=node, model=gang.gpu_model, workload=gang.id)


def defragged_reason(reason: str, pod: str) -> str:
    """A waiting gang's reason, and that running work moves to free whole nodes for it."""
    return AND_SO.format(reason=reason, then=DEFRAGGING.format(pod=pod))
