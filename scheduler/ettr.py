"""Effective training time: a job's wall time split into what it was doing, from its events.

A job's timeline is cut into spans of six phases: queued, starting, productive, checkpoint
stall, lost (running whose work a fault threw away: recomputed after the restart) and
recovering. ETTR is productive time over the wall time since the job was first admitted
(time queued before the first admission is the queue's business, not the job's), and goodput
the same ratio in GPU-hours. Pure: times are seconds on any clock, supplied by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    PRODUCTIVE = "productive"
    CHECKPOINT_STALL = "checkpoint_stall"
    LOST = "lost"
    RECOVERING = "recovering"


# The phase each workload state stands for; terminal states end the timeline.
STATE_PHASES = {
    "pending": Phase.QUEUED,
    "admitted": Phase.STARTING,
    "starting": Phase.STARTING,
    "running": Phase.PRODUCTIVE,
    "preempting": Phase.RECOVERING,
    "recovering": Phase.RECOVERING,
}


@dataclass(frozen=True)
class Span:
    """`phase` from `start` to `end` (seconds)."""

    phase: Phase
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def split(
    states: Sequence[tuple[float, str]],
    until: float,
    stalls: Iterable[tuple[float, float]] = (),
    losses: Iterable[tuple[float, float]] = (),
) -> list[Span]:
    """The job's spans in time order.

    `states`: (time, state entered), in time order, from submission on; the job ends at its
    first terminal state, or at `until`. `stalls`: (start, seconds) a checkpoint stood training
    still. `losses`: (fault time, seconds of work lost), the running time just before the fault
    that the restart redoes. Stalls and losses reclassify productive time only.
    """
    spans = _state_spans(states, until)
    for start, seconds in stalls:
        spans = _carve(spans, start, start + seconds, Phase.CHECKPOINT_STALL)
    for fault_at, seconds in losses:
        spans = _carve(spans, fault_at - seconds, fault_at, Phase.LOST)
    return spans


def _state_spans(states: Sequence[tuple[float, str]], until: float) -> list[Span]:
    spans = []
    for (at, state), (next_at, _) in zip(states, [*states[1:], (until, "")], strict=True):
        phase = STATE_PHASES.get(state)
        if phase is None:  # a terminal state: nothing after it counts
            break
        end = min(next_at, until)
        if end > at:
            spans.append(Span(phase, at, end))
    return spans


def _carve(spans: list[Span], start: float, end: float, phase: Phase) -> list[Span]:
    """Relabel the productive part of [start, end) as `phase`."""
    carved = []
    for span in spans:
        lo, hi = max(span.start, start), min(span.end, end)
        if span.phase != Phase.PRODUCTIVE or lo >= hi:
            carved.append(span)
            continue
        pieces = [(span.start, lo, span.phase), (lo, hi, phase), (hi, span.end, span.phase)]
        carved += [Span(p, a, b) for a, b, p in pieces if b > a]
    return carved


def totals(
    spans: Iterable[Span], since: float | None = None, until: float | None = None
) -> dict[Phase, float]:
    """Seconds per phase, counting only what falls inside [since, until) when given, and only
    from the job's first admission on."""
    spans = list(spans)
    first = first_admission(spans)
    result = dict.fromkeys(Phase, 0.0)
    if first is None:
        return result
    lo = first if since is None else max(first, since)
    for span in spans:
        a, b = max(span.start, lo), span.end if until is None else min(span.end, until)
        if b > a:
            result[span.phase] += b - a
    return result


def pieces(
    spans: Iterable[Span], since: float, width: float, buckets: int
) -> Iterator[tuple[int, Phase, float]]:
    """(slice, phase, seconds) of the spans from the job's first admission on, cut at the
    edges of `buckets` consecutive slices of `width` seconds from `since`: one pass over the
    spans, whatever the number of slices."""
    spans = list(spans)
    first = first_admission(spans)
    if first is None:
        return
    for span in spans:
        a, b = max(span.start, first, since), min(span.end, since + width * buckets)
        i = int((a - since) // width)
        while a < b and i < buckets:
            edge = min(b, since + width * (i + 1))
            if edge > a:
                yield i, span.phase, edge - a
            a, i = edge, i + 1


def first_admission(spans: Iterable[Span]) -> float | None:
    """When the job first left the queue, or None if it never did."""
    return next((s.start for s in spans if s.phase != Phase.QUEUED), None)


def ratio(seconds: dict[Phase, float]) -> float | None:
    """ETTR of `totals`: productive over all; None when there is no time to judge."""
    wall = sum(seconds.values())
    return seconds[Phase.PRODUCTIVE] / wall if wall > 0 else None
