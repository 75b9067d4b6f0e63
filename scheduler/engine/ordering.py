"""The order in which a cycle considers pending workloads.

Inside a queue, workloads wait in `queue_order`, except that in a best-effort FIFO queue a
workload that fits in the queue's nominal quota goes before those of its priority that must
borrow (a queue's own quota first, as across queues; a higher priority still goes first, or it
would preempt the workload back). Across queues, the cycle repeatedly takes the best head
(`head_key`), so the order adapts as admissions change who borrows how much.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable
from operator import itemgetter

from scheduler.engine.model import Queue, Strategy, Workload
from scheduler.engine.quota import QuotaLedger


def queue_order(workload: Workload, queue_priority: int = 0) -> tuple[int, int, float, int]:
    """Sort key for pending workloads, first considered first.

    Criteria, in order:
    1. higher priority of the workload's queue first (operators set it, so a tenant cannot jump
       other tenants' work by marking its own jobs critical);
    2. higher workload `priority` first;
    3. earlier `submitted_at` first;
    4. lower `id` first, so equal priority and submit time still give one order.
    """
    return (-queue_priority, -workload.priority, workload.submitted_at, workload.id)


def head_key(
    ledger: QuotaLedger, queue: Queue, workload: Workload, order: tuple, fits: bool = False
) -> tuple:
    """Sort key for the heads of the queues, the first taken first.

    Criteria, in order:
    1. a head that fits in its queue's nominal quota before one that must borrow (a queue's
       own quota is never a matter of fair sharing), and in nested cohorts one that borrows
       from a lower cohort before one that must go higher (Kueue's borrowing level);
    2. among borrowing heads only: the lower weighted dominant resource share (DRS) the queue
       would have with the head admitted, so borrowing goes first to the queue that borrows
       least for its weight (fair sharing, as in Kueue);
    3. then `queue_order` (`order`, the workload's): queue priority, workload priority, submit
       time, id.

    `fits`: the caller knows the head fits in its queue's nominal quota.
    """
    if fits:
        return (0, 0.0, *order)
    return (*ledger.borrowing_rank(queue, workload.gpu_model, workload.share), *order)


class Heads:
    """Pending workloads, one FIFO per queue, handed out head by head in `head_key` order.

    A queue's head is its first workload in `queue_order`; in a best-effort FIFO queue whose
    first workload must borrow, its first one of the same priority that fits in the nominal
    quota, if any (so room reclaimed for that one comes back to it at the next cycle before
    any borrower takes it). Keys are computed when a queue is (re)pushed; `refresh` re-pushes
    queues whose usage changed, and stale entries are skipped when popped.
    """

    def __init__(self, ledger: QuotaLedger, workloads: Iterable[Workload]) -> None:
        self._ledger = ledger
        waiting: dict[int, list[Workload]] = defaultdict(list)
        for workload in workloads:
            waiting[workload.queue_id].append(workload)
        # Per queue, (`queue_order`, workload) of its pending work, reversed so that the head
        # is popped from the end; the order is kept for the head's key.
        self._fifo: dict[int, list[tuple[tuple, Workload]]] = {}
        self._queues = {queue_id: ledger.queue_or_none(queue_id) for queue_id in waiting}
        # Queue id -> where its head is in its FIFO, and whether it fits the nominal quota.
        self._head: dict[int, tuple[int, bool]] = {}
        # Per queue, GPU model -> the fewest GPUs a pending workload asks: a lower bound as
        # workloads leave, which spares looking for one within the nominal quota in vain.
        self._fewest: dict[int, dict[str, int]] = defaultdict(dict)
        # Queues none of whose pending work fits in the nominal quota any more (usage only
        # grows within a cycle, so they stay so).
        self._borrowing: set[int] = set()
        # Per queue, how many workloads just before its head in its FIFO were found not to fit
        # in the nominal quota (they stay so too): a search for a head that fits goes on below
        # them, so that it looks at each workload of the queue at most once a cycle.
        self._misfits: dict[int, int] = {}
        for queue_id, members in waiting.items():
            fewest = self._fewest[queue_id]
            for workload in members:
                if workload.gpus < fewest.get(workload.gpu_model, 1 << 62):
                    fewest[workload.gpu_model] = workload.gpus
            queue = self._queues[queue_id]
            priority = queue.priority if queue is not None else 0
            ordered = [(queue_order(w, priority), w) for w in members]
            self._fifo[queue_id] = sorted(ordered, key=itemgetter(0), reverse=True)
        self._version: dict[int, int] = defaultdict(int)
        self._heap: list[tuple[tuple, int, int, Queue]] = []  # key, queue id, version, queue
        self._current: int | None = None  # the queue whose head was handed out last
        # Whether some queue sits in a nested cohort, where keys may go stale (see `next`).
        self._nested = any(len(ledger.path(q)) > 2 for q in ledger.queues())
        for queue_id in sorted(self._fifo):
            self._push(queue_id)

    def _push(self, queue_id: int) -> None:
        entry = self._entry(queue_id)
        if entry is not None:
            heapq.heappush(self._heap, entry)

    def _entry(self, queue_id: int) -> tuple[tuple, int, int, Queue] | None:
        """A fresh heap entry for the queue's head; older entries of the queue go stale."""
        members = self._fifo.get(queue_id)
        queue = self._queues.get(queue_id)
        if not members or queue is None:
            return None
        version = self._version[queue_id] = self._version[queue_id] + 1
        index, fits = self._head[queue_id] = self._head_index(queue, members)
        order, head = members[index]
        key = head_key(self._ledger, queue, head, order, fits)
        return (key, queue_id, version, queue)  # (key, id, version) differ: never a queue compared

    def _head_index(self, queue: Queue, members: list[tuple[tuple, Workload]]) -> tuple[int, bool]:
        """Where the queue's head is in its (reversed) FIFO: the last entry, or in a best-effort
        queue whose first workload must borrow, the first of its priority that fits in the
        nominal quota; and whether the head fits in it."""
        ledger, first = self._ledger, members[-1][1]
        if queue.id in self._borrowing:
            return -1, False
        if ledger.within_nominal(queue, first.gpu_model, first.share):
            return -1, True
        if queue.strategy == Strategy.STRICT_FIFO or len(members) == 1:
            return -1, False
        for model, gpus in self._fewest[queue.id].items():
            if ledger.within_nominal(queue, model, gpus):
                break
        else:
            self._borrowing.add(queue.id)
            return -1, False
        # All misfits found earlier are of the first's priority (those of a lower one end a
        # search), so that past them the search goes on as if it had looked at them again.
        index = len(members) - 2 - self._misfits.get(queue.id, 0)
        while index >= 0 and members[index][1].priority == first.priority:
            workload = members[index][1]
            if ledger.within_nominal(queue, workload.gpu_model, workload.share):
                break
            index -= 1
        self._misfits[queue.id] = len(members) - 2 - index
        if index >= 0 and members[index][1].priority == first.priority:
            return index, True
        return -1, False

    def unknown(self) -> list[Workload]:
        """Workloads of queues missing from the snapshot, in id order; they never head."""
        return sorted(
            (
                w
                for qid, members in self._fifo.items()
                if self._queues[qid] is None
                for _, w in members
            ),
            key=lambda w: w.id,
        )

    def next(self) -> tuple[Queue, Workload, bool] | None:
        """The best head, taken out of its queue, with whether it fits in its queue's nominal
        quota (only its queue's own decisions change that); None when every queue is empty.

        The queue of the previous head is re-keyed first, now that its head was decided. Keys
        only grow within a cycle (usage only grows), but other queues' admissions can raise a
        key in nested cohorts (the borrowing level), so a head is keyed afresh when taken and
        put back if its key grew.
        """
        entry = None
        if self._current is not None:
            entry = self._entry(self._current)
            self._current = None
        while self._heap or entry is not None:
            if entry is not None:
                # Re-key the last queue and take the best head in one heap operation.
                key, queue_id, version, queue = heapq.heappushpop(self._heap, entry)
                entry = None
            else:
                key, queue_id, version, queue = heapq.heappop(self._heap)
            if version != self._version[queue_id] or not self._fifo[queue_id]:
                continue
            if self._nested:
                fresh = self._entry(queue_id)
                if fresh is not None and fresh[0] > key:
                    entry = fresh
                    continue
            index, fits = self._head[queue_id]
            _, workload = self._fifo[queue_id].pop(index)
            if index == -1 and self._misfits.get(queue_id):
                self._misfits[queue_id] -= 1  # the first misfit is the queue's first now
            self._current = queue_id
            return queue, workload, fits
        return None

    def refresh(self, queue_ids: Iterable[int]) -> None:
        """Recompute the keys of these queues (their usage changed)."""
        for queue_id in sorted(set(queue_ids)):
            if queue_id in self._fifo and queue_id != self._current:
                self._push(queue_id)

    def drain(self, queue_id: int) -> list[Workload]:
        """Take every remaining workload of a queue out, in queue order."""
        members = self._fifo.get(queue_id, [])
        self._fifo[queue_id] = []
        self._misfits.pop(queue_id, None)
        self._version[queue_id] += 1
        return [workload for _, workload in reversed(members)]
