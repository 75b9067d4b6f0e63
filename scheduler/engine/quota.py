"""Quota accounting for one cycle: who uses how many GPUs, and whether a workload may add more.

Queues and cohorts form a tree (a queue's parent is its cohort, a cohort's its parent cohort),
accounted per GPU model the way Kueue's hierarchical cohorts are:

- a node keeps `kept` GPUs for itself: its guarantee, or more when a lending limit says so; the
  rest of its quota (`quota - kept`) is lent up to its parent, and a cohort's quota is its own
  nominal plus what its children lend it;
- a node's usage counts in its parent only where it exceeds what the node keeps;
- what a node may still use is its own unused kept quota plus what its parent has available,
  the latter capped by the node's borrowing limit.

A queue may always use its nominal quota (physical room permitting; reclaim makes the room).
Beyond it, it borrows: within its `borrowing_limit` and only what its cohort tree has idle.
A queue in no cohort cannot borrow.

Fair sharing: a queue's share is its weighted dominant resource share (DRS) of borrowed
capacity, as in Kueue: the largest, over GPU models, of GPUs borrowed over GPUs its root cohort
can lend, divided by the queue's weight. Where the snapshot says what a GPU of each model is
worth (`Snapshot.worth`), the share is of value instead: the worth of the GPUs the queue
borrows over the worth of all its root cohort can lend, so that borrowing 20 GPUs of a model
worth a fifth of another's counts a fifth as much, and borrowing on several models adds up. A
model the snapshot gives no worth counts as a typical one, the median of the models that have
one (the portal leaves out the models that have none, so one such model never turns weighing
off for the rest); only an empty `worth` counts each model apart.

A family quota (`FamilyQuota`: Hopper, over H800 and H20) sits above its models' quotas as a
cohort above its queues: the queue's GPUs of the family's models, in all, are within its nominal
quota only while within both their model's and the family's, and beyond the family's they are
borrowed (within the family's borrowing limit and what the cohort tree lends of that model).
While a queue holds more of a family than its quota, any of its GPUs of the family may be taken
back; fair sharing counts that excess once, at the worth of the family's cheapest model.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import Cohort, FamilyQuota, Queue, Quota
from scheduler.words import amount, phrase

# A node of the quota tree: ("q", queue id) or ("c", cohort name).
TreeNode = tuple[str, int | str]

NOT_IN_SNAPSHOT = phrase("queue {queue} is not in the snapshot")
NO_COHORT = phrase(
    "queue {queue} would exceed its {model} quota ({used}/{nominal} in use, job needs {gpus}; "
    "the queue is in no cohort, so it cannot borrow)"
)
COHORT_IDLE = phrase(
    "queue {queue} would exceed its {model} quota ({used}/{nominal} in use, job needs {gpus}; "
    "cohort {cohort} has {idle} idle to lend)"
)
AT_BORROWING_LIMIT = phrase(
    "queue {queue} is at its borrowing limit for {model} ({borrowed}/{limit} borrowed beyond "
    "its quota of {nominal}; the job needs {gpus}, which would make {would})"
)


@dataclass(frozen=True, slots=True)
class _Over:
    """What refuses more GPUs: a model's quota or a family's (`name`), the GPUs used of it, and
    the GPUs its cohort tree could give (None: its borrowing limit refuses first)."""

    name: str
    used: int
    quota: Quota | FamilyQuota
    available: int | None


class QuotaLedger:
    """GPUs in use per (queue id, GPU model), updated as the cycle admits and preempts."""

    def __init__(
        self,
        queues: Iterable[Queue],
        cohorts: Iterable[Cohort] = (),
        worth: Iterable[tuple[str, float]] = (),
    ) -> None:
        self._queues = {queue.id: queue for queue in queues}
        self._worth = dict(worth)
        # What a GPU of a model without a worth counts for: a typical one's (see the docstring).
        self._unknown_worth = statistics.median(self._worth.values()) if self._worth else 1.0
        self._lendable_worth: dict[TreeNode, float] = {}
        # Nominal quota per (queue id, GPU model) the queue has a quota for (asked most often).
        self._nominal = {
            (queue.id, quota.gpu_model): queue.quota(quota.gpu_model).nominal
            for queue in self._queues.values()
            for quota in queue.model_quotas
        }
        self._cohorts = {cohort.name: cohort for cohort in cohorts}
        for queue in self._queues.values():
            if queue.cohort is not None and queue.cohort not in self._cohorts:
                self._cohorts[queue.cohort] = Cohort(queue.cohort)
        self._parent: dict[TreeNode, TreeNode | None] = {}
        self._children: dict[TreeNode, list[TreeNode]] = defaultdict(list)
        self._link_tree()
        self.usage: Counter[tuple[int, str]] = Counter()
        # GPUs of work told to stop this cycle: still charged (so no one else counts on that
        # quota before the work is gone), but no longer borrowed work to reclaim.
        self.stopping: Counter[tuple[int, str]] = Counter()
        self._cohort_usage: Counter[tuple[TreeNode, str]] = Counter()
        # Memos of `_static` and `_height`: plain dicts, as a `functools.cache` of a bound
        # method would make each ledger a reference cycle, left to the cyclic collector.
        self._statics: dict[tuple[TreeNode, str], tuple[int, int, int | None]] = {}
        self._heights: dict[TreeNode, int] = {}
        self._members: dict[TreeNode, list[int]] = {}
        self._paths: dict[int, tuple[TreeNode, ...]] = {}
        self._branches: dict[tuple[int, int], tuple[TreeNode, TreeNode]] = {}
        self._chains: dict[tuple[int, str], tuple[list, TreeNode]] = {}  # see `_chain`
        self._availability: dict[tuple[int, str], tuple[int, int]] = {}  # `_available_to`
        # Per cohort tree, how often its usage changed, and the borrowers seen at a count.
        self._changes: dict[TreeNode, int] = {}
        self._borrowers: dict[tuple[TreeNode, str], tuple[int, list[tuple[Queue, int]]]] = {}
        self._ranks: dict[tuple, tuple[int, tuple[int, float]]] = {}  # see `borrowing_rank`

    def _link_tree(self) -> None:
        for queue in sorted(self._queues.values(), key=lambda q: q.id):
            parent = ("c", queue.cohort) if queue.cohort is not None else None
            self._parent["q", queue.id] = parent
            if parent is not None:
                self._children[parent].append(("q", queue.id))
        for name in sorted(self._cohorts):
            parent_name = self._cohorts[name].parent
            parent: TreeNode | None = None
            if parent_name is not None and not self._creates_cycle(name, parent_name):
                parent = ("c", parent_name)
                self._cohorts.setdefault(parent_name, Cohort(parent_name))
                self._children[parent].append(("c", name))
            # A link that would close a cycle is cut: that cohort becomes a root.
            self._parent["c", name] = parent
        for name in self._cohorts:
            self._parent.setdefault(("c", name), None)

    def _creates_cycle(self, name: str, parent: str | None) -> bool:
        """Whether linking cohort `name` under `parent` closes a cycle, following the links
        already made for cohorts linked earlier and the declared ones for the rest."""
        seen = {name}
        while parent is not None:
            if parent in seen:
                return True
            seen.add(parent)
            if ("c", parent) in self._parent:
                linked = self._parent["c", parent]
                parent = linked[1] if linked is not None else None  # type: ignore[assignment]
            else:
                cohort = self._cohorts.get(parent)
                parent = cohort.parent if cohort is not None else None
        return False

    # -- the tree ----------------------------------------------------------------------------

    def queue(self, queue_id: int) -> Queue:
        """The queue with this id, or Inadmissible when the snapshot has none."""
        try:
            return self._queues[queue_id]
        except KeyError:
            raise Inadmissible(NOT_IN_SNAPSHOT.format(queue=queue_id)) from None

    def queue_or_none(self, queue_id: int) -> Queue | None:
        """The queue with this id, or None."""
        return self._queues.get(queue_id)

    def queues(self) -> Iterable[Queue]:
        """Every queue of the snapshot."""
        return self._queues.values()

    def root(self, queue: Queue) -> TreeNode:
        """The root of the queue's cohort tree; the queue itself when it is in no cohort."""
        return self.path(queue)[-1]

    def members(self, queue: Queue) -> list[int]:
        """Ids of the queues in the queue's cohort tree (itself included), in id order."""
        root = self.root(queue)
        found = self._members.get(root)
        if found is None:
            found = sorted(q.id for q in self._queues.values() if self.root(q) == root)
            self._members[root] = found
        return found

    def _quota_of(self, node: TreeNode, gpu_model: str) -> Quota:
        kind, key = node
        if kind == "q":
            return self._queues[key].quota(gpu_model)  # type: ignore[index]
        return self._cohorts[key].quota(gpu_model)  # type: ignore[index]

    def _quotas_of(self, node: TreeNode) -> tuple[Quota, ...]:
        kind, key = node
        if kind == "q":
            return self._queues[key].model_quotas  # type: ignore[index]
        return self._cohorts[key].quotas  # type: ignore[index]

    def _static(self, node: TreeNode, gpu_model: str) -> tuple[int, int, int | None]:
        """(subtree quota, kept, borrowing limit) of a tree node for one GPU model."""
        found = self._statics.get((node, gpu_model))
        if found is None:
            found = self._statics[node, gpu_model] = self._compute_static(node, gpu_model)
        return found

    def _compute_static(self, node: TreeNode, gpu_model: str) -> tuple[int, int, int | None]:
        own = self._quota_of(node, gpu_model)
        quota = own.nominal
        for child in self._children.get(node, ()):
            child_quota, child_kept, _ = self._static(child, gpu_model)
            quota += child_quota - child_kept
        kept = own.guarantee
        if own.lending_limit is not None:
            kept = max(kept, quota - own.lending_limit)
        return quota, max(0, min(kept, quota)), own.borrowing_limit

    def _used(self, node: TreeNode, gpu_model: str) -> int:
        if node[0] == "q":
            return self.usage.get((node[1], gpu_model), 0)  # type: ignore[arg-type]
        return self._cohort_usage.get((node, gpu_model), 0)

    # -- usage -------------------------------------------------------------------------------

    def charge(self, queue_id: int, gpu_model: str, gpus: int) -> None:
        """Count `gpus` more (or, negative, fewer) GPUs of `gpu_model` as used by the queue."""
        chain = self._chains.get((queue_id, gpu_model))
        if chain is None:
            if queue_id not in self._queues:
                self.usage[queue_id, gpu_model] += gpus
                return
            chain = self._chains[queue_id, gpu_model] = self._chain(queue_id, gpu_model)
        links, root = chain
        delta = gpus
        for usage, key, kept in links:
            if not delta:
                break
            old = usage.get(key, 0)
            new = usage[key] = old + delta
            # What the node uses beyond what it keeps counts in its parent.
            delta = (new - kept if new > kept else 0) - (old - kept if old > kept else 0)
        self._changes[root] = self._changes.get(root, 0) + 1

    def _chain(
        self, queue_id: int, gpu_model: str
    ) -> tuple[list[tuple[Counter, tuple, int]], TreeNode]:
        """(usage counter, key, GPUs kept) of each tree node from the queue up to its root,
        and the root: where `charge` counts the queue's GPUs, and what each node keeps."""
        links = []
        node: TreeNode | None = ("q", queue_id)
        while node is not None:
            _, kept, _ = self._static(node, gpu_model)
            if node[0] == "q":
                links.append((self.usage, (node[1], gpu_model), kept))
            else:
                links.append((self._cohort_usage, (node, gpu_model), kept))
            node = self._parent[node]
        return links, self.root(self._queues[queue_id])

    def stop(self, queue_id: int, gpu_model: str, gpus: int) -> None:
        """Mark `gpus` of the queue's GPUs as work told to stop (still charged)."""
        self.stopping[queue_id, gpu_model] += gpus
        if queue_id in self._queues:
            self._changed(queue_id)

    def _changed(self, queue_id: int) -> None:
        root = self.root(self._queues[queue_id])
        self._changes[root] = self._changes.get(root, 0) + 1

    def release(self, queue_id: int, gpu_model: str, gpus: int) -> None:
        """Stop counting `gpus` GPUs of `gpu_model` as used by the queue."""
        self.charge(queue_id, gpu_model, -gpus)

    def available(self, node: TreeNode, gpu_model: str) -> int:
        """GPUs of `gpu_model` the tree node may still start using (Kueue's formula)."""
        quota, kept, limit = self._static(node, gpu_model)
        used = self._used(node, gpu_model)
        parent = self._parent[node]
        if parent is None:
            return quota - used
        from_parent = self.available(parent, gpu_model)
        if limit is not None:
            from_parent = min(from_parent, quota - kept - max(0, used - kept) + limit)
        return max(0, kept - used) + from_parent

    def ceiling(self, queue: Queue, gpu_model: str) -> int:
        """The most GPUs of `gpu_model` the queue could hold with nothing else charged to the
        ledger: its nominal quota, or all its cohort tree could lend it within its limits (and
        its family's)."""
        most = queue.quota(gpu_model).nominal
        if queue.cohort is not None:
            most = max(most, self.available(("q", queue.id), gpu_model))
        family = queue.family(gpu_model)
        if family is not None and queue.cohort is None:
            most = min(most, family.nominal)
        elif family is not None and family.borrowing_limit is not None:
            most = min(most, family.nominal + family.borrowing_limit)
        return most

    def path(self, queue: Queue) -> tuple[TreeNode, ...]:
        """The queue's node and its cohorts up to the root, lowest first."""
        found = self._paths.get(queue.id)
        if found is None:
            node: TreeNode | None = ("q", queue.id)
            nodes = []
            while node is not None:
                nodes.append(node)
                node = self._parent[node]
            found = self._paths[queue.id] = tuple(nodes)
        return found

    def branches(self, queue: Queue, other: Queue) -> tuple[TreeNode, TreeNode]:
        """(the queue's branch, the other's branch) just below where their paths meet: the
        two subtrees whose quota decides whether one may take back what the other uses."""
        key = (queue.id, other.id)
        found = self._branches.get(key)
        if found is None:
            mine = self.path(queue)
            index = {node: i for i, node in enumerate(mine)}
            theirs = self.path(other)
            for j, node in enumerate(theirs):
                if node in index:
                    found = (mine[index[node] - 1], theirs[j - 1])
                    break
            else:
                found = (mine[-1], theirs[-1])  # different trees
            self._branches[key] = found
        return found

    def fits_at(self, node: TreeNode, queue: Queue, gpu_model: str, gpus: int) -> bool:
        """Whether `node`'s subtree, with `gpus` more GPUs used by the queue below it, stays
        within the node's quota (own nominal plus what its children lend it)."""
        delta = gpus
        for step in self.path(queue):
            old = self._used(step, gpu_model)
            if step == node:
                return old + delta <= self._static(step, gpu_model)[0]
            _, kept, _ = self._static(step, gpu_model)
            delta = max(0, old + delta - kept) - max(0, old - kept)
        return False

    def lowest_fit(self, queue: Queue, gpu_model: str, gpus: int) -> tuple[str, int, int] | None:
        """(name, GPUs used, quota) of the lowest cohort on the queue's path whose subtree
        has quota for `gpus` more, or None."""
        for node in self.path(queue)[1:]:
            if self.fits_at(node, queue, gpu_model, gpus):
                return str(node[1]), self._used(node, gpu_model), self._static(node, gpu_model)[0]
        return None

    def over_quota(self, node: TreeNode, gpu_model: str, released: int = 0) -> bool:
        """Whether the subtree uses more than its quota (it borrows from above), with
        `released` GPUs fewer."""
        return self._staying(node, gpu_model) - released > self._static(node, gpu_model)[0]

    def _staying(self, node: TreeNode, gpu_model: str) -> int:
        """What the subtree uses of its quota, less the work told to stop this cycle."""
        if node[0] == "q":
            return self.staying(node[1], gpu_model)  # type: ignore[arg-type]
        used = 0
        for child in self._children.get(node, ()):
            _, kept, _ = self._static(child, gpu_model)
            used += max(0, self._staying(child, gpu_model) - kept)
        return used

    def level(self, queue: Queue, gpu_model: str, gpus: int) -> int:
        """How high in its tree the queue must go to find quota for `gpus` more (Kueue's
        borrowing level): 0 when its nominal quota has room, else the height of the lowest
        cohort on its path whose subtree has room (1 for a cohort of queues only), at most
        its root's."""
        if self.within_nominal(queue, gpu_model, gpus):
            return 0
        path = self.path(queue)
        for node in path[1:-1]:
            if self.fits_at(node, queue, gpu_model, gpus):
                return self._height(node)
        return max(1, self._height(path[-1]))

    def borrowing_rank(self, queue: Queue, gpu_model: str, gpus: float) -> tuple[int, float]:
        """(`level`, `share`) of the queue with `gpus` more GPUs of `gpu_model`; (0, 0.0) when
        they fit in its nominal quota. Worked out again only once the usage of the queue's
        cohort tree changed (both depend on nothing else): a queue's head is keyed after each
        of its decisions, and a head that waits changes no usage."""
        key = (queue.id, gpu_model, gpus)
        changes = self._changes.get(self.root(queue), 0)
        found = self._ranks.get(key)
        if found is None or found[0] != changes:
            level = self.level(queue, gpu_model, gpus)
            rank = (level, self.share(queue, gpu_model, gpus)) if level else (0, 0.0)
            found = self._ranks[key] = (changes, rank)
        return found[1]

    def _height(self, node: TreeNode) -> int:
        """A tree node's distance to its furthest leaf: 0 for a queue, 1 for a cohort of
        queues only."""
        found = self._heights.get(node)
        if found is None:
            found = self._heights[node] = self._compute_height(node)
        return found

    def _compute_height(self, node: TreeNode) -> int:
        children = self._children.get(node, ())
        heights = [self._height(child) + 1 for child in children if child[0] == "c"]
        return max([1 if children else 0, *heights])

    # -- admission checks --------------------------------------------------------------------

    def within_nominal(self, queue: Queue, gpu_model: str, gpus: int) -> bool:
        """Whether `gpus` more GPUs keep the queue (one of the ledger's) within its nominal
        quota (and its family's). `nominal_room`, worked out here for a queue without family
        quotas (the common case): the cycle asks this for nearly every head it keys."""
        if queue.families:
            return gpus <= self.nominal_room(queue, gpu_model)
        key = (queue.id, gpu_model)
        return gpus <= self._nominal.get(key, 0) - self.usage.get(key, 0)

    def nominal_room(self, queue: Queue, gpu_model: str) -> int:
        """GPUs of `gpu_model` the queue may still start within its nominal quota and its
        family's (negative: it borrows that many)."""
        key = (queue.id, gpu_model)
        room = self._nominal.get(key, 0) - self.usage.get(key, 0)
        family = queue.family(gpu_model) if queue.families else None
        if family is not None:
            room = min(room, family.nominal - self._family_used(queue, family))
        return room

    def _family_used(self, queue: Queue, family: FamilyQuota) -> int:
        return sum(self.usage.get((queue.id, model), 0) for model in family.models)

    def staying(self, queue_id: int, gpu_model: str) -> int:
        """GPUs the queue uses, less those of its work told to stop this cycle."""
        key = (queue_id, gpu_model)
        return self.usage.get(key, 0) - self.stopping.get(key, 0)

    def borrowers(self, queue: Queue, gpu_model: str) -> list[tuple[Queue, int]]:
        """(queue, GPUs it uses less those told to stop) of the queues of the queue's cohort
        tree (itself included) that borrow `gpu_model` GPUs, in id order; listed again only
        after the tree's usage changed."""
        root = self.root(queue)
        changes = self._changes.get(root, 0)
        found = self._borrowers.get((root, gpu_model))
        if found is None or found[0] != changes:
            listed = []
            for queue_id in self.members(queue):
                member = self._queues[queue_id]
                if self.borrowing(member, gpu_model) > 0:
                    listed.append((member, self.staying(queue_id, gpu_model)))
            found = self._borrowers[root, gpu_model] = (changes, listed)
        return found[1]

    def borrowing(self, queue: Queue, gpu_model: str, released: int = 0) -> int:
        """GPUs of `gpu_model` the queue uses beyond its quota, not counting work told to stop,
        with `released` fewer."""
        return self._excess(queue, gpu_model, gpu_model, -released, self.staying)

    def _excess(self, queue: Queue, model: str, gpu_model: str | None, extra: int, count) -> int:
        """GPUs of `model` the queue holds (`count(queue id, model)`, with `extra` more of
        `gpu_model`) beyond the model's quota, or, while it holds more of the model's family
        than the family's quota, up to all it holds of the model."""
        held = count(queue.id, model) + (extra if model == gpu_model else 0)
        over = held - queue.quota(model).nominal
        family = queue.family(model) if queue.families else None
        if family is not None:
            family_held = sum(count(queue.id, m) for m in family.models)
            family_held += extra if gpu_model in family.models else 0
            over = max(over, min(held, family_held - family.nominal))
        return max(0, over)

    def _held(self, queue_id: int, gpu_model: str) -> int:
        return self.usage.get((queue_id, gpu_model), 0)

    def allows(self, queue: Queue, gpu_model: str, gpus: int) -> bool:
        """Whether the queue may use `gpus` more GPUs of `gpu_model` (`refusal` without the
        reason)."""
        return self._over(queue, gpu_model, gpus) is None

    def refusal(self, queue: Queue, gpu_model: str, gpus: int) -> str | None:
        """Why the queue may not use `gpus` more GPUs of `gpu_model`, or None when it may."""
        over = self._over(queue, gpu_model, gpus)
        if over is None:
            return None
        used, available, nominal = over.used, over.available, over.quota.nominal
        fields = {"queue": queue.name, "model": over.name, "nominal": nominal}
        fields.update(used=amount(used), gpus=amount(gpus))  # shares: 0.43 of a GPU
        if queue.cohort is None:
            return NO_COHORT.format(**fields)
        if available is None:
            return AT_BORROWING_LIMIT.format(
                borrowed=amount(max(0, used - nominal)),
                limit=over.quota.borrowing_limit,
                would=amount(used + gpus - nominal),
                **fields,
            )
        idle = amount(max(0, available - max(0, nominal - used)))
        return COHORT_IDLE.format(cohort=queue.cohort, idle=idle, **fields)

    def _over(self, queue: Queue, gpu_model: str, gpus: int) -> _Over | None:
        """None when the queue may use `gpus` more GPUs of `gpu_model`; else what refuses: the
        model's quota or its family's."""
        key = (queue.id, gpu_model)
        used = self.usage.get(key, 0)
        if used + gpus <= self._nominal.get(key, 0):
            over = None
        else:
            over = self._borrow(queue, gpu_model, gpus, gpu_model, used, queue.quota(gpu_model))
        family = queue.family(gpu_model) if queue.families else None
        if over is None and family is not None:
            used = self._family_used(queue, family)
            over = self._borrow(queue, gpu_model, gpus, family.family, used, family)
        return over

    def _borrow(
        self, queue: Queue, gpu_model: str, gpus: int, name: str, used: int, quota
    ) -> _Over | None:
        """None when `gpus` more keep `used` GPUs within `quota` (a model's or a family's), or
        the queue may borrow what they take beyond it; else why not."""
        borrowed_after = used + gpus - quota.nominal
        if borrowed_after <= 0:
            return None
        if queue.cohort is None:
            return _Over(name, used, quota, 0)
        limit = quota.borrowing_limit
        if limit is not None and borrowed_after > limit:
            return _Over(name, used, quota, None)
        available = self._available_to(queue, gpu_model)
        if isinstance(quota, FamilyQuota):
            # Beyond its family's quota it borrows what others lend, never its own idle quota
            # of the model (which its cohort counts as lendable).
            key = (queue.id, gpu_model)
            available -= max(0, self._nominal.get(key, 0) - self.usage.get(key, 0))
        return None if gpus <= available else _Over(name, used, quota, available)

    def _available_to(self, queue: Queue, gpu_model: str) -> int:
        """`available` for a queue, worked out again only once its cohort tree's usage changed
        (a queue refused is mostly asked again before anything changed)."""
        key = (queue.id, gpu_model)
        changes = self._changes.get(self.root(queue), 0)
        found = self._availability.get(key)
        if found is None or found[0] != changes:
            found = self._availability[key] = (changes, self.available(("q", queue.id), gpu_model))
        return found[1]

    # -- fair sharing ------------------------------------------------------------------------

    def share(self, queue: Queue, gpu_model: str | None = None, gpus: int = 0) -> float:
        """The queue's weighted dominant resource share of borrowed capacity (of its worth, where
        models have one), with `gpus` more GPUs of `gpu_model` counted; 0 for a queue that
        borrows nothing."""
        if self._worth:
            return self._worth_share(queue, gpu_model, gpus)
        dominant = 0.0
        seen = False
        for quota in queue.model_quotas:
            seen = seen or quota.gpu_model == gpu_model
            dominant = max(dominant, self._borrowed_share(queue, quota.gpu_model, gpu_model, gpus))
        if gpu_model is not None and not seen:
            dominant = max(dominant, self._borrowed_share(queue, gpu_model, gpu_model, gpus))
        if dominant == 0:
            return 0.0
        return dominant / queue.weight if queue.weight > 0 else float("inf")

    def _worth_share(self, queue: Queue, gpu_model: str | None, gpus: int) -> float:
        """The worth of what the queue borrows over the worth of what its root cohort can lend,
        over its weight (a model without a worth counts `_unknown_worth` a GPU)."""
        models = {quota.gpu_model for quota in queue.model_quotas} | {gpu_model} - {None}
        borrowed = 0.0
        over_model: dict[str, int] = {}
        for model in models:
            extra = gpus if model == gpu_model else 0
            over = self.usage.get((queue.id, model), 0) + extra - queue.quota(model).nominal
            over_model[model] = max(0, over)
            borrowed += over_model[model] * self._worth.get(model, self._unknown_worth)
        for family in queue.families:
            held = self._family_used(queue, family) + (gpus if gpu_model in family.models else 0)
            rest = held - family.nominal - sum(over_model.get(m, 0) for m in family.models)
            if rest > 0:
                borrowed += rest * min(
                    self._worth.get(m, self._unknown_worth) for m in family.models
                )
        if borrowed == 0:
            return 0.0
        if queue.weight <= 0:
            return float("inf")
        return borrowed / self._lendable(self.root(queue)) / queue.weight

    def _lendable(self, root: TreeNode) -> float:
        """The worth of the GPUs a root cohort can lend, over every model its tree has quota of
        (at least one GPU's worth)."""
        found = self._lendable_worth.get(root)
        if found is None:
            models = set()
            for node in (root, *self._descendants(root)):
                models |= {quota.gpu_model for quota in self._quotas_of(node)}
            unknown = self._unknown_worth
            value = sum(self._static(root, m)[0] * self._worth.get(m, unknown) for m in models)
            found = self._lendable_worth[root] = max(1.0, value) if root[0] == "c" else 1.0
        return found

    def _descendants(self, node: TreeNode) -> list[TreeNode]:
        found = []
        for child in self._children.get(node, ()):
            found += [child, *self._descendants(child)]
        return found

    def _borrowed_share(self, queue: Queue, model: str, gpu_model: str | None, gpus: int) -> float:
        """GPUs of `model` the queue borrows (with `gpus` more of `gpu_model`), over what its
        root cohort can lend."""
        borrowed = self._excess(queue, model, gpu_model, gpus, self._held)
        if borrowed <= 0:
            return 0.0
        root = self.root(queue)
        lendable = max(1, self._static(root, model)[0]) if root[0] == "c" else 1
        return borrowed / lendable
