"""Quota accounting for one cycle: who uses how many GPUs, and whether a workload may add more.

A queue may always use its nominal quota. Beyond it, a queue in a cohort may borrow what the
other members leave idle: each lends `min(nominal - usage, lending_limit)` of a GPU model, never
less than zero, and the cohort's total borrowing never exceeds the total lent. A queue's own
borrowing stays within its `borrowing_limit`. A queue in no cohort cannot borrow.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import Queue


class QuotaLedger:
    """GPUs in use per (queue id, GPU model), updated as the cycle admits workloads."""

    def __init__(self, queues: Iterable[Queue]) -> None:
        self._queues = {queue.id: queue for queue in queues}
        self._cohorts: dict[str, list[Queue]] = defaultdict(list)
        for queue in self._queues.values():
            if queue.cohort is not None:
                self._cohorts[queue.cohort].append(queue)
        self.usage: Counter[tuple[int, str]] = Counter()

    def queue(self, queue_id: int) -> Queue:
        """The queue with this id, or Inadmissible when the snapshot has none."""
        try:
            return self._queues[queue_id]
        except KeyError:
            raise Inadmissible(f"queue {queue_id} is not in the snapshot") from None

    def charge(self, queue_id: int, gpu_model: str, gpus: int) -> None:
        """Count `gpus` more GPUs of `gpu_model` as used by the queue."""
        self.usage[(queue_id, gpu_model)] += gpus

    def check(self, queue: Queue, gpu_model: str, gpus: int) -> None:
        """Raise Inadmissible unless the queue may use `gpus` more GPUs of `gpu_model`."""
        quota = queue.quota(gpu_model)
        used = self.usage[(queue.id, gpu_model)]
        borrowed_after = used + gpus - quota.nominal
        if borrowed_after <= 0:
            return
        over_quota = (
            f"queue {queue.name} would exceed its {gpu_model} quota "
            f"({used}/{quota.nominal} in use, job needs {gpus}"
        )
        if queue.cohort is None:
            raise Inadmissible(f"{over_quota}; the queue is in no cohort, so it cannot borrow)")
        limit = quota.borrowing_limit
        if limit is not None and borrowed_after > limit:
            raise Inadmissible(
                f"queue {queue.name} would borrow {borrowed_after} {gpu_model} GPUs beyond its "
                f"quota of {quota.nominal}, over its borrowing limit of {limit}"
            )
        idle = self.idle_to_lend(queue, gpu_model)
        newly_borrowed = borrowed_after - self._borrowed(queue, gpu_model)
        if newly_borrowed > idle:
            raise Inadmissible(f"{over_quota}; cohort {queue.cohort} has {idle} idle to lend)")

    def idle_to_lend(self, queue: Queue, gpu_model: str) -> int:
        """GPUs of `gpu_model` the other members of the queue's cohort can still lend it.

        What the others lend, less what every member already borrows: a GPU lent once is not
        idle any more.
        """
        members = self._cohorts[queue.cohort] if queue.cohort is not None else []
        lent = sum(self._lendable(other, gpu_model) for other in members if other.id != queue.id)
        borrowed = sum(self._borrowed(member, gpu_model) for member in members)
        return max(0, lent - borrowed)

    def _borrowed(self, queue: Queue, gpu_model: str) -> int:
        """GPUs the queue uses beyond its nominal quota."""
        return max(0, self.usage[(queue.id, gpu_model)] - queue.quota(gpu_model).nominal)

    def _lendable(self, queue: Queue, gpu_model: str) -> int:
        """Unused nominal quota the queue lends to its cohort, capped by its lending limit."""
        quota = queue.quota(gpu_model)
        unused = quota.nominal - self.usage[(queue.id, gpu_model)]
        if quota.lending_limit is not None:
            unused = min(unused, quota.lending_limit)
        return max(0, unused)
