"""What changes for the running work (`Resizing`, a part of `cycle.Cycle`). In step 5, once every
waiting workload was decided: elastic work grows into free GPUs no waiting work could use, work
that accepts several GPU models moves to a faster one whose GPUs are free, and in pods due for
defragmentation small work moves so that whole nodes free up for waiting gangs. In step 4, for
a waiting workload that can start nowhere: elastic work of its queue and priority shrinks where
its GPUs do more for the newcomer (`shrink_for`). Never by preempting, each change restarting
its workload from a save.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from scheduler.engine.budget import seconds_left
from scheduler.engine.capacity import Pool
from scheduler.engine.defrag import MOVES_PER_CYCLE, empty_nodes
from scheduler.engine.errors import Inadmissible, refusal
from scheduler.engine.explain import defrag_reason, defragged_reason, grow_reason, move_reason
from scheduler.engine.gains import LEAVE_MARGIN, worth
from scheduler.engine.model import Grow, Move, Queue, TopologyLevel, Workload
from scheduler.engine.moves import Claim, MoveKind, Rule
from scheduler.engine.moves import Move as Step
from scheduler.engine.topology import Domain, widest_level

# A running workload moves to another GPU model only where it runs at least this much faster:
# the move restarts it from a save, minutes of a large job's time.
MOVE_GAIN = 1.25


class Resizing:
    """The running work's changes of a cycle, as `Cycle` methods: they read the cycle's state
    (its capacity, ledger, budgets, running and waiting work) and add to its plan."""

    def grow(self) -> None:
        """Give free GPUs to running elastic workloads below their most, in pools where no work
        waits: never by preempting, a workload at most every `Snapshot.grow_every_s` (each resize
        restarts it) and only when it saved within that time (it resumes from that save), the most
        gained per GPU first (`_gain_per_gpu`: what one more GPU does for it, in what one GPU does
        for it alone, Sia's goodput), then the higher priority, then the lower id. A one-node
        workload grows within its node, a multi-node one by whole nodes within the domain its
        topology allows."""
        waiting = self.waiting_pools()
        if waiting.issuperset(self.capacity.pool_keys()):
            return  # work waits in every pool: no workload grows (the common case)
        changed = {p.workload_id for p in self.preemptions} | {s.workload_id for s in self.shrinks}
        candidates = []
        for workload in self.running:
            if not workload.is_elastic:
                continue
            queue = self.ledger.queue_or_none(workload.queue_id)
            if queue is None or (queue.region, workload.gpu_model) in waiting:
                continue
            if workload.id in changed or not self._may_grow(workload):
                continue
            try:
                node = self.capacity.pool(queue.region, workload.gpu_model).node_size
            except Inadmissible:
                continue  # its queue's region has no such GPUs (any more)
            gain = _gain_per_gpu(workload, node)
            candidates.append((-gain, -workload.priority, workload.id, workload, queue))
        for *_, workload, queue in sorted(candidates, key=lambda c: c[:3]):
            self._grow(self.capacity.pool(queue.region, workload.gpu_model), queue, workload)

    def waiting_pools(self) -> set[tuple[str | None, str]]:
        """(region, GPU model) of every pool some waiting work could start in."""
        wanted = {(w.queue_id, w.accepts or (w.gpu_model,)) for w, _ in self._waiting.values()}
        found = set()
        for queue_id, models in wanted:
            queue = self.ledger.queue_or_none(queue_id)
            found.update((queue.region if queue else None, model) for model in models)
        return found

    def move(self) -> None:
        """Move running work that accepts several GPU models, and knows its speed on each, to a
        model at least MOVE_GAIN times faster where the GPUs are free, its quota and budgets
        allow and no waiting work could use them: never by preempting, a workload at most
        every `Snapshot.move_every_s`, and only one that saves (it restarts from a save it
        is asked for first). The oldest first."""
        waiting = None
        changed = {p.workload_id for p in self.preemptions} | {s.workload_id for s in self.shrinks}
        changed |= {g.workload_id for g in self.grows}
        for workload in self.running:
            if len(workload.accepts) < 2 or workload.speed(workload.gpu_model) is None:
                continue
            if workload.id in changed or not self._may_move(workload):
                continue
            queue = self.ledger.queue_or_none(workload.queue_id)
            if queue is None:
                continue
            waiting = self.waiting_pools() if waiting is None else waiting
            self._move(queue, workload, waiting)

    def _may_move(self, workload: Workload) -> bool:
        times = [t for t in (workload.started_at, workload.resized_at) if t is not None]
        if workload.preempting or not workload.saves or not workload.movable or not times:
            return False
        return self.now - max(times) >= self.move_every_s

    def _move(self, queue: Queue, workload: Workload, waiting: set) -> None:
        now_speed = workload.speed(workload.gpu_model)
        for model in workload.models:
            speed = workload.speed(model)
            if speed is None or speed < MOVE_GAIN * now_speed:
                continue
            if (queue.region, model) in waiting:
                continue
            moved = replace(workload, gpu_model=model, gpus=workload.held, placements=())
            if not self._free_now(queue, moved):
                continue
            pool = self.capacity.pool(queue.region, model)
            placements, self._found = self._found[3], None
            for placement in placements:
                pool.take(placement, workload.tenant)
            self.ledger.charge(queue.id, model, workload.held)
            self.budgets.charge(queue.id, model, workload.held, seconds_left(workload, self.now))
            reason = move_reason(workload, model)
            self.moves.append(Move(workload.id, model, placements, reason))
            return

    def defragment(self) -> None:
        """In each pod due for defragmentation (`Snapshot.defrag`), by name, move small running
        work to other nodes of the pod so that whole nodes free up for the gangs waiting there
        that their quota and budgets allow, in their decision order, within the pod's moves
        and MOVES_PER_CYCLE (`defrag.empty_nodes`): only work that saves, may move
        (`_may_move`), runs on one node and did not change this cycle, never by preempting.
        Each move restarts from a save. A gang's shape that found no moves in a pod is not
        looked at again there this cycle (fewer moves and GPUs are left for the next)."""
        gangs = self._waiting_gangs() if self.defrag else []
        if not gangs:
            return
        occupants = self._may_defragment()
        emptied: set[int] = set()
        failed: set[tuple] = set()
        for pod, budget in sorted(self.defrag):
            for pool, gang in gangs:
                budget = min(budget, MOVES_PER_CYCLE - len(self.moves))
                domain = _pod_domain(pool, pod)
                shape = (pool.gpu_model, domain, gang.gpus, widest_level(gang))
                if (
                    budget <= 0
                    or domain is None
                    or (shape in failed and not pool.held_nodes(gang.id))
                ):
                    continue
                with pool.lent(gang.id):  # its own reservation's GPUs are room for the moves
                    moves = empty_nodes(pool, domain, gang, occupants, budget, emptied)
                if moves is None:
                    failed.add(shape)
                    continue
                for job, placement in moves:
                    reason = defrag_reason(pool.node(placement.node_id).name, pod, gang)
                    self.moves.append(Move(job.id, job.gpu_model, (placement,), reason, pod))
                budget -= len(moves)
                waiting, why = self._waiting[gang.id]
                self._waiting[gang.id] = (waiting, defragged_reason(why, pod))

    def _waiting_gangs(self) -> list[tuple[Pool, Workload]]:
        """Waiting work of whole nodes, with its pool, that its quota and budgets allow and
        that made no room by preemption."""
        claimed = {p.for_workload_id for p in self.preemptions}
        gangs = []
        for workload, _ in self._waiting.values():
            queue = self.ledger.queue_or_none(workload.queue_id)
            if queue is None or workload.fraction or workload.id in claimed:
                continue
            try:
                pool = self.capacity.pool(queue.region, workload.gpu_model)
            except Inadmissible:
                continue
            if workload.gpus >= pool.node_size and self._allowed(queue, workload):
                gangs.append((pool, workload))
        return gangs

    def _may_defragment(self) -> dict[int, list[Workload]]:
        """Per node, the running work there that a defragmentation may move."""
        changed = {p.workload_id for p in self.preemptions} | {s.workload_id for s in self.shrinks}
        changed |= {g.workload_id for g in self.grows} | {m.workload_id for m in self.moves}
        found: dict[int, list[Workload]] = defaultdict(list)
        for workload in self.running:
            if workload.fraction or len(workload.placements) != 1 or workload.id in changed:
                continue
            if self._may_move(workload):
                found[workload.placements[0].node_id].append(workload)
        return found

    def _may_grow(self, workload: Workload) -> bool:
        """Whether a running elastic workload may grow now."""
        most = workload.gpus if workload.max_gpus is None else workload.max_gpus
        return workload.held < most and self._may_resize(workload)

    def _may_resize(self, workload: Workload) -> bool:
        """Whether a running workload may be resized now: not stopping, not within
        `Snapshot.grow_every_s` of its start or last resize, and only one that saves (a resize
        restarts it from a save it is asked for first)."""
        if workload.preempting:
            return False
        times = [t for t in (workload.started_at, workload.resized_at) if t is not None]
        if not times or self.now - max(times) < self.grow_every_s:
            return False
        return workload.saves

    def shrink_for(self, pool: Pool, queue: Queue, workload: Workload) -> bool:
        """Make room for a waiting workload that can start on no free GPUs, nor have room made
        by preemption, by shrinking one running elastic workload of its queue, GPU model and
        priority on one node, where the GPUs do more for the newcomer than for it: the
        newcomer's throughput there (`gains.worth`: in what one GPU does for a job alone, so
        one job's first GPU and another's sixteenth compare, as Sia's goodput) above what the
        shrunk one loses by more than the planner's error (LEAVE_MARGIN). Sizes that fit on
        one node only: an elastic newcomer from the most of its size a node holds down to
        its fewest, another at its size. The shrunk one keeps its fewest GPUs at least, saves
        first and is resized at most every `Snapshot.grow_every_s` (`_may_resize`), by one
        shrink a cycle; the shrink that gains most wins (then the lower id, the larger size).
        The newcomer waits for the GPUs as for any room made (`apply_claim`). True if room
        was made."""
        victims = self._yielders().get((queue.id, workload.gpu_model, workload.priority))
        if not victims or workload.fraction:
            return False
        node_size = pool.node_size
        if workload.is_elastic:
            sizes = range(min(workload.gpus, node_size), workload.fewest_gpus - 1, -1)
        elif workload.gpus <= node_size:
            sizes = range(workload.gpus, workload.gpus - 1, -1)
        else:
            return False  # a gang of whole nodes: no shrink on one node makes its room
        kind = (queue.id, workload.gpu_model, workload.priority, sizes, workload.tenant)
        kind += (workload.throughput, workload.speeds)
        if not sizes or kind in self._no_yield:
            return False
        spoken = {p.workload_id for p in self.preemptions} | {s.workload_id for s in self.shrinks}
        best = None
        for victim in victims:
            if victim.id in spoken:
                continue
            found = self._yield(pool, queue, workload, victim, sizes)
            if found is not None and (best is None or found < best):
                best = found
        if best is None:
            self._no_yield.add(kind)
            return False
        _, _, gpus, node_id, freed, victim = best
        gpus = -gpus
        if self.budgets and not self._budget_allows(queue, workload, gpus, workload.time_limit_s):
            return False
        step = Step(MoveKind.SHRINK, Rule.GAIN, victim, {node_id: freed})
        claim = Claim([step], TopologyLevel.LEAF, pool.domains_of(node_id)[-1], (node_id,))
        self.apply_claim(pool, queue, replace(workload, gpus=gpus), claim)
        return True

    def _yield(
        self, pool: Pool, queue: Queue, workload: Workload, victim: Workload, sizes: range
    ) -> tuple | None:
        """The victim's best shrink for the workload, as (lost less gained, victim id, the
        workload's GPUs negated, node, GPUs given back, victim), or None: a one-node victim
        gives back GPUs of its node, a multi-node one its last node."""
        held, last = victim.held, victim.placements[-1]
        node_id = last.node_id
        if len(victim.placements) == 1:
            spare = held - victim.fewest_gpus
            whole = None
        else:
            spare = whole = len(last.gpu_indices)
            if held - whole < victim.fewest_gpus:
                return None
        if (
            pool.node(node_id) is None
            or node_id in pool.held_by
            or not pool.offered(node_id, workload.tenant)
        ):
            return None
        free = len(pool.free(node_id))
        model = workload.gpu_model
        before = worth(victim, model, held)
        best = None
        for gpus in sizes:
            need = gpus - free
            if need <= 0 or need > spare:
                continue
            freed = need if whole is None else whole
            lost = before - worth(victim, model, held - freed)
            gained = worth(workload, model, gpus)
            if gained <= lost * LEAVE_MARGIN or not self.ledger.allows(queue, model, gpus - freed):
                continue
            found = (lost - gained, victim.id, -gpus, node_id, freed, victim)
            if best is None or found < best:
                best = found
        return best

    def _yielders(self) -> dict[tuple[int, str, int], list[Workload]]:
        """Per (queue id, GPU model, priority), the running elastic work above its fewest GPUs
        that may be resized now (`_may_resize`), by id: what `shrink_for` may shrink. Made
        when first asked, once a cycle."""
        if self._shrinkable is None:
            self._shrinkable = defaultdict(list)
            for workload in self.running:
                if (
                    workload.min_gpus is not None  # else its fewest is its size
                    and not workload.fraction
                    and workload.held > workload.fewest_gpus
                    and self._may_resize(workload)
                ):
                    key = (workload.queue_id, workload.gpu_model, workload.priority)
                    self._shrinkable[key].append(workload)
        return self._shrinkable

    def _grow(self, pool: Pool, queue: Queue, workload: Workload) -> None:
        most = workload.gpus if workload.max_gpus is None else workload.max_gpus
        added = pool.growth(workload, most - workload.held)
        seconds = seconds_left(workload, self.now)
        while added:
            extra = sum(len(p.gpu_indices) for p in added)
            if self.ledger.allows(queue, workload.gpu_model, extra) and (
                not self.budgets or self._budget_allows(queue, workload, extra, seconds)
            ):
                break
            added = added[:-1] if len(added) > 1 else pool.growth(workload, extra - 1)
        if not added:
            return
        for placement in added:
            pool.take(placement, workload.tenant)
        extra = sum(len(p.gpu_indices) for p in added)
        self.ledger.charge(queue.id, workload.gpu_model, extra)
        self.budgets.charge(queue.id, workload.gpu_model, extra, seconds)
        reason = grow_reason(workload, workload.held + extra, queue.region)
        self.grows.append(Grow(workload.id, workload.held + extra, added, reason))

    def _budget_allows(
        self, queue: Queue, workload: Workload, extra: int, seconds: float | None
    ) -> bool:
        borrows = not self.ledger.within_nominal(queue, workload.gpu_model, extra)
        return refusal(self.budgets.check, queue, workload, extra, seconds, borrows) is None


def _gain_per_gpu(workload: Workload, node: int) -> float:
    """What one more step (a node, or a GPU within one) adds per GPU, in what one GPU of its
    slowest model does for it alone (`gains.worth`): so one job's fifth GPU and another's
    compare, whatever each already does per GPU."""
    held, model = workload.held, workload.gpu_model
    step = 1 if held < node and len(workload.placements) == 1 else node
    return (worth(workload, model, held + step) - worth(workload, model, held)) / step


def _pod_domain(pool: Pool, pod: str) -> Domain | None:
    """The domain of the pool's nodes in `pod` (as nodes name it), or None when it has none."""
    return next((domain for domain in pool.domains_at(2) if domain[1] == pod), None)
