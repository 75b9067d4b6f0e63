"""The inference autoscaler: how many replicas a service should run for its load.

Knative's KPA semantics (knative.dev, "Configuring the autoscaler", "Kubernetes Pod
Autoscaler"), used alike by the portal (every couple of seconds) and the simulator:

- the load is the number of requests in flight across the service, sampled; the wanted count is
  ceil(average load / target concurrency per replica) over a window;
- the stable window (60 s) decides normally; the panic window (6 s) is watched too: when its
  wanted count reaches `panic_threshold` (2.0) times the replicas ready, the service panics and
  for a stable window from then on scales by the panic window and never down;
- one decision changes the count by at most `max_scale_up_rate` times the ready replicas (1000)
  and at most divides it by `max_scale_down_rate` (2);
- a scale-down waits `scale_down_delay_s`: the count is the highest wanted over that window;
- to zero: only where allowed (and `min_replicas` is 0), once it has wanted none for
  `scale_to_zero_grace_s` (30 s), which takes a stable window without a request; from zero,
  one request wakes one replica (Knative's activator does the same).

Bounds come last: never below `min_replicas`, never above `max_replicas`. Time is an argument;
the state (samples, panic, recommendations) is a plain dict so the portal can keep it in a row.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from scheduler.words import phrase

# Why the service wants the replicas it wants.
PANIC = phrase("panic: {window} s of load at {times}x capacity")
STABLE = phrase("{window} s of load")
IDLE = phrase("idle, {grace} s before scaling to zero")
AT_MINIMUM, AT_MAXIMUM = phrase("at its minimum"), phrase("at its maximum")


@dataclass(frozen=True)
class Settings:
    """One service's autoscaling knobs; defaults are Knative's."""

    target: float  # requests in flight per replica
    min_replicas: int = 0
    max_replicas: int = 100
    scale_to_zero: bool = False
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    scale_down_delay_s: float = 0.0
    scale_to_zero_grace_s: float = 30.0

    def __post_init__(self) -> None:
        if self.target <= 0:
            raise ValueError("target concurrency must be above zero")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError("replicas: need 0 <= min <= max")
        if self.panic_window_s > self.stable_window_s:
            raise ValueError("the panic window must not be longer than the stable window")


@dataclass(frozen=True)
class Decision:
    """What one evaluation wants: the replica count, whether the service is in panic, why."""

    replicas: int
    panic: bool
    reason: str


class Autoscaler:
    """One service's autoscaler: `observe` load samples, `decide` the replica count."""

    def __init__(self, settings: Settings, state: dict[str, Any] | None = None) -> None:
        self.settings = settings
        state = state or {}
        self.samples: deque[tuple[float, float]] = deque(map(tuple, state.get("samples", ())))
        self.panic_until: float | None = state.get("panic_until")
        self.panic_high: int = state.get("panic_high", 0)  # the most it wanted in this panic
        self.idle_since: float | None = state.get("idle_since")  # since it wanted none
        self.wanted: deque[tuple[float, int]] = deque(map(tuple, state.get("wanted", ())))

    def state(self) -> dict[str, Any]:
        """Everything it remembers, as JSON-friendly values."""
        return {
            "samples": [list(s) for s in self.samples],
            "panic_until": self.panic_until,
            "panic_high": self.panic_high,
            "idle_since": self.idle_since,
            "wanted": [list(w) for w in self.wanted],
        }

    def observe(self, now: float, in_flight: float) -> None:
        """Record the requests in flight across the service at `now`."""
        self.samples.append((now, max(0.0, in_flight)))
        while self.samples and self.samples[0][0] <= now - self.settings.stable_window_s:
            self.samples.popleft()

    def decide(self, now: float, ready: int) -> Decision:
        """The replica count wanted at `now`, with `ready` replicas serving."""
        s = self.settings
        stable = self._limited(self._pods(now, s.stable_window_s), ready)
        hot_pods = self._pods(now, s.panic_window_s)
        hot = self._limited(hot_pods, ready)
        if ready and hot_pods >= s.panic_threshold * ready:
            if self.panic_until is None:
                self.panic_high = ready
            self.panic_until = now + s.stable_window_s
        elif self.panic_until is not None and now >= self.panic_until:
            self.panic_until = None
        if self.panic_until is not None:  # never down while in panic
            self.panic_high = wanted = max(hot, self.panic_high)
            reason = PANIC.format(window=f"{s.panic_window_s:g}", times=f"{s.panic_threshold:g}")
        else:
            wanted, reason = stable, STABLE.format(window=f"{s.stable_window_s:g}")
        wanted = self._delayed(now, wanted)
        if wanted:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        if not wanted and ready and now - self.idle_since < s.scale_to_zero_grace_s:
            wanted, reason = 1, IDLE.format(grace=f"{s.scale_to_zero_grace_s:g}")
        low = s.min_replicas if s.scale_to_zero else max(s.min_replicas, 1)
        if wanted < low:
            return Decision(low, False, AT_MINIMUM)
        if wanted > s.max_replicas:
            return Decision(s.max_replicas, self.panic_until is not None, AT_MAXIMUM)
        return Decision(wanted, self.panic_until is not None, reason)

    def _limited(self, pods: float, ready: int) -> int:
        """Whole replicas, within the rates one decision may move by (from zero: any count)."""
        wanted = math.ceil(round(pods, 9))
        if not ready:
            return wanted
        s = self.settings
        up, down = math.ceil(ready * s.max_scale_up_rate), math.floor(ready / s.max_scale_down_rate)
        return min(max(wanted, down), up)

    def _pods(self, now: float, window: float) -> float:
        """Replicas the average load over the window would fill at the target."""
        samples = [load for t, load in self.samples if t > now - window]
        return sum(samples) / len(samples) / self.settings.target if samples else 0.0

    def _delayed(self, now: float, wanted: int) -> int:
        """The highest count wanted within the scale-down delay (Knative's max over it)."""
        delay = self.settings.scale_down_delay_s
        if delay <= 0:
            return wanted
        self.wanted.append((now, wanted))
        while self.wanted[0][0] <= now - delay:
            self.wanted.popleft()
        return max(w for _, w in self.wanted)
