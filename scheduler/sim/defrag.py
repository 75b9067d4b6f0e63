"""Scheduled defragmentation in the simulator, as an operator sets it per pod in the portal
(`portal.workloads.defrag`): which pods are due for the engine's pass (`Snapshot.defrag`) and
how many moves each may still make, counted over the last simulated hour.

A pod is due for an hour from its daily time (`Defrag.at_s`, seconds after midnight; the
trace's time 0 is a midnight) and, with `when_scattered`, at any time (the engine moves jobs
only where a waiting gang has the free GPUs in the pod but not the whole nodes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

RUN_S = 3600.0  # a daily run lasts an hour; moves are counted over the last hour
DAY_S = 86400.0


@dataclass(frozen=True)
class Defrag:
    """Defragmentation turned on for `pods` (as the cluster spec names them; (): every pod)."""

    pods: tuple[str, ...] = ()
    moves_per_hour: int = 4  # at most this many jobs moved in any hour, per pod
    when_scattered: bool = True  # due at any time
    at_s: float | None = None  # due for an hour from this time of each day; None: no daily run

    def __post_init__(self) -> None:
        if self.moves_per_hour < 0:
            raise ValueError("defragmentation: moves per hour must be 0 or more")
        if self.at_s is not None and not 0 <= self.at_s < DAY_S:
            raise ValueError("defragmentation: the daily time must be within a day (0 to 86399 s)")
        if self.at_s is None and not self.when_scattered:
            raise ValueError(
                "defragmentation: say when: a time of day, or when free GPUs are scattered"
            )

    def in_window(self, now: float) -> bool:
        """Whether `now` falls in the hour from the daily time."""
        return self.at_s is not None and (now - self.at_s) % DAY_S < RUN_S


def parse_when(text: str) -> tuple[bool, float | None]:
    """(when scattered, daily time in seconds) from `scattered`, `HH:MM` or both, comma
    separated: `scattered,02:00`."""
    scattered, at = False, None
    for part in (p.strip() for p in text.split(",")):
        if part == "scattered":
            scattered = True
            continue
        hours, _, minutes = part.partition(":")
        if not (hours.isdigit() and minutes.isdigit() and int(hours) < 24 and int(minutes) < 60):
            raise ValueError(f"defragmentation: {part!r} is neither scattered nor a time HH:MM")
        at = int(hours) * 3600.0 + int(minutes) * 60.0
    return scattered, at


class DefragMeter:
    """The moves made in each pod over the last hour, and what the engine is told from them."""

    def __init__(self, defrag: Defrag, pods: Iterable[str]) -> None:
        self.defrag = defrag
        self.pods = defrag.pods or tuple(dict.fromkeys(pods))
        self._made: dict[str, deque[float]] = {pod: deque() for pod in self.pods}

    def moved(self, pod: str, now: float) -> None:
        self._made[pod].append(now)

    def due(self, now: float) -> tuple[tuple[str, int], ...]:
        """(pod, moves it may still make) of each pod due now."""
        defrag = self.defrag
        if not (defrag.when_scattered or defrag.in_window(now)):
            return ()
        self._forget(now)
        return tuple(
            (pod, max(0, defrag.moves_per_hour - len(self._made[pod]))) for pod in self.pods
        )

    def next_change(self, now: float) -> float | None:
        """When what `due` says next changes after `now`: a daily run begins, or a move
        leaves the last hour (None: never)."""
        self._forget(now)
        times = [made[0] + RUN_S for made in self._made.values() if made]
        at = self.defrag.at_s
        if at is not None:
            times.append(now - (now - at) % DAY_S + DAY_S)
        return min((t for t in times if t > now), default=None)

    def _forget(self, now: float) -> None:
        """Drop the moves older than an hour."""
        for made in self._made.values():
            while made and made[0] <= now - RUN_S:
                made.popleft()
