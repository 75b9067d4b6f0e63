"""Which waiting work gains most on a GPU model, for a cycle's choice of model (`Cycle.decide`).

Gavel's effective throughput and Sia's goodput are the cluster's, not one job's: a fast model
does the most good running the work that runs the most times faster there than on the slower
model it would take instead. So a workload that could start on a faster model leaves it to
waiting work that gains more there: whose speed on the faster model over its speed on the
workload's next one is larger than the workload's own by more than LEAVE_MARGIN. The workload
starts on its next model with room, or waits, never for a model it left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

from scheduler.engine.model import Workload
from scheduler.engine.quota import QuotaLedger
from scheduler.parallelism import PREDICTION_ERROR

# A waiting workload's gain must exceed the other's by more than the planner's error: within
# it, the two gains are the same as far as anyone knows.
LEAVE_MARGIN = 1 + PREDICTION_ERROR


@dataclass(frozen=True)
class Contender:
    """Waiting work a faster model is left to, and the gain the leaving work has there: its
    speed on the faster model over its speed on the slower one (the contender's is larger)."""

    workload: Workload
    faster: str
    slower: str
    own_gain: float


class Gains:
    """The pending work of a cycle that accepts several GPU models, ranked per region and pair
    of models (built when first asked) by its gain there, the largest first; work without a
    speed on both models is not ranked. Work decided this cycle (`decided`) is no longer a
    contender."""

    def __init__(self, pending: list[Workload], ledger: QuotaLedger):
        self._pending = pending
        self._ledger = ledger  # its queues' regions (no method of the cycle: no reference cycle)
        self._ranked: dict[tuple, list[tuple[float, int, Workload]]] = {}
        self._first: dict[tuple, int] = {}  # per ranking, where its undecided work begins
        self.decided: set[int] = set()

    def contender(
        self,
        workload: Workload,
        region: str,
        faster: str,
        slower: str,
        may_start: Callable[[Workload], bool],
    ) -> Contender | None:
        """The undecided waiting workload of `region` with the largest gain on `faster` over
        `slower`, above `workload`'s by more than LEAVE_MARGIN, for which `may_start` (on
        `faster`); None when there is none, or `workload`'s speeds are not all known."""
        if None in map(workload.speed, workload.models):
            return None
        own = workload.speed(faster) / workload.speed(slower)
        key = (region, faster, slower)
        ranked = self._ranked.get(key)
        if ranked is None:
            ranked = self._ranked[key] = self._rank(region, faster, slower)
        first = self._first.get(key, 0)
        while first < len(ranked) and ranked[first][1] in self.decided:
            first += 1
        self._first[key] = first
        for negative, workload_id, other in islice(ranked, first, None):
            if -negative <= own * LEAVE_MARGIN:
                return None
            if workload_id not in self.decided and may_start(other.on(faster)):
                return Contender(other, faster, slower, own)
        return None

    def _rank(self, region: str, faster: str, slower: str) -> list:
        """(-gain, id, workload) of the pending work of `region` with a speed on both models,
        in order."""
        ranked = []
        for other in self._pending:
            if faster not in other.accepts or slower not in other.accepts or other.fraction:
                continue
            fast, slow = other.speed(faster), other.speed(slower)
            if fast is None or slow is None:
                continue
            queue = self._ledger.queue_or_none(other.queue_id)
            if queue is not None and queue.region == region:
                ranked.append((-fast / slow, other.id, other))
        ranked.sort()
        return ranked


def worth(workload: Workload, gpu_model: str, gpus: int) -> float:
    """Its throughput on `gpus` GPUs of `gpu_model`, in what one GPU of its slowest model does
    for it alone: its curve's (`Workload.rate`; GPU count without one) over its rate on one GPU,
    times its speed on `gpu_model` over that on its slowest model where all are known. Sia's
    goodput is normalised the same way, so that one job's first GPU and another's sixteenth
    compare: the first does a whole GPU's work, the sixteenth what it adds."""
    alone = workload.rate(1)
    value = workload.rate(gpus) / alone if alone > 0 else float(gpus)
    speeds = [workload.speed(model) for model in workload.models]
    speed = workload.speed(gpu_model)
    if speed is not None and None not in speeds and min(speeds) > 0:
        value *= speed / min(speeds)
    return value
