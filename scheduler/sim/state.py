"""The simulated cluster's allocations, and the engine snapshot built from them cheaply.

GPUs in MIG mode keep their instances (`Allocations.layouts`) as a real GPU does: a MIG job
takes an idle instance of its profile, else one added beside the others, else the GPU is
re-sliced to it, as the agent does (`Machine.mig_instance`); a GPU with an instance in use is
never re-sliced. Instances stay after their job ends, until the GPU is re-sliced, or until a
whole-GPU job or a share takes it and MIG is turned off on it (`Machine.mig_off`).

Node and workload objects are frozen, so they are rebuilt only when they change: a node when
GPUs on it are taken or given back, a workload when its job starts, stops, shrinks or completes
a checkpoint. A snapshot is then two tuples of the cached objects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from scheduler.checkpointing import PolicyKind
from scheduler.engine import Budget, Node, Placement, Snapshot, Workload
from scheduler.engine.model import SLICES
from scheduler.mig import fits
from scheduler.sim.jobs import Job, Phase
from scheduler.sim.policies import SchedulingPolicy
from scheduler.sim.spec import ClusterSpec


class SimulationError(RuntimeError):
    """The simulation reached an impossible state (a bug): e.g. a GPU given out twice."""


class Allocations:
    """Free GPUs per node, with a count of nodes per free-GPU count for each GPU model."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.nodes = {node.id: node for node in spec.nodes}
        self.free: dict[int, set[int]] = {node.id: set(range(node.gpus)) for node in spec.nodes}
        self._index = {node.id: i for i, node in enumerate(spec.nodes)}
        self._objects: list[Node] = list(spec.nodes)
        self._changed: set[int] = set()
        self.closed: set[int] = set(spec.spares)  # nodes that take no work: spares, and down
        self._changed.update(self.closed)
        self.used: Counter[str] = Counter()  # GPUs in use per model (shared ones whole)
        self.shares: dict[tuple[int, int], dict[int, int]] = {}  # (node, GPU) -> job -> eighths
        self.instances: dict[tuple[int, int], dict[int, str]] = {}  # (node, GPU) -> job -> profile
        self.layouts: dict[tuple[int, int], tuple[str, ...]] = {}  # GPUs in MIG mode: profiles
        self.mig_profiles = spec.mig_profiles
        # Nodes per (model, free GPUs, node size): what fragmentation is measured from.
        self.by_free: Counter[tuple[str, int, int]] = Counter(
            (node.gpu_model, node.gpus, node.gpus) for node in spec.nodes
        )

    def take(
        self, placements: Iterable[Placement], owner: int, slices: int = 0, mig: str = ""
    ) -> None:
        """Mark GPUs used by job `owner` (a share job: `slices` eighths of its one GPU; a MIG
        job: an instance of profile `mig` of it); SimulationError if one is not free (a shared
        one: if the share does not fit; one in MIG mode: if it must be re-sliced in use)."""
        if slices:
            self._take_share(placements, owner, slices)
            return
        if mig:
            self._take_instance(placements, owner, mig)
            return
        placements = list(placements)
        self._take_gpus(placements, owner)
        for placement in placements if self.layouts else ():  # MIG turned off on them
            for index in placement.gpu_indices:
                self.layouts.pop((placement.node_id, index), None)

    def _take_gpus(self, placements: Iterable[Placement], owner: int) -> None:
        for placement in placements:
            free = self.free.get(placement.node_id)
            wanted = set(placement.gpu_indices)
            if free is None or not wanted <= free or len(wanted) != len(placement.gpu_indices):
                raise SimulationError(
                    f"job {owner} was given GPUs {placement.gpu_indices} of node "
                    f"{placement.node_id}, which are not all free"
                )
            self._change(placement.node_id, lambda f, w=wanted: f.difference_update(w))

    def _take_share(self, placements: Iterable[Placement], owner: int, slices: int) -> None:
        """A share job's eighths of its GPU: the GPU leaves the free ones with its first."""
        [placement] = placements
        [index] = placement.gpu_indices
        holders = self.shares.get((placement.node_id, index))
        if holders is None:
            self.take([placement], owner)
            holders = self.shares[placement.node_id, index] = {}
        if sum(holders.values()) + slices > SLICES:
            raise SimulationError(
                f"job {owner} was given {slices}/{SLICES} of GPU {index} of node "
                f"{placement.node_id}, which has {SLICES - sum(holders.values())}/{SLICES} free"
            )
        holders[owner] = slices

    def _take_instance(self, placements: Iterable[Placement], owner: int, mig: str) -> None:
        """A MIG job's instance: an idle one of its profile, else one added beside the others,
        else the GPU re-sliced to it; the GPU leaves the free ones with its first MIG job."""
        [placement] = placements
        gpu = (placement.node_id, placement.gpu_indices[0])
        holders = self.instances.get(gpu)
        if holders is None:
            self._take_gpus([placement], owner)
            holders = self.instances[gpu] = {}
        layout = self.layouts.get(gpu, ())
        idle = list(layout)
        for name in holders.values():
            idle.remove(name)
        if mig not in idle:
            profiles = self.mig_profiles[self.nodes[gpu[0]].gpu_model]
            if fits(profiles[name] for name in (*layout, mig)):
                self.layouts[gpu] = (*layout, mig)
            elif holders:
                raise SimulationError(
                    f"job {owner} was given a {mig} instance of GPU {gpu[1]} of node {gpu[0]}, "
                    f"which would re-slice it while its instances {layout} are in use"
                )
            else:
                self.layouts[gpu] = (mig,)
        holders[owner] = mig

    def close(self, node_id: int, closed: bool = True) -> None:
        """Take the node out of service (a spare, or a node a job left), or put it back."""
        (self.closed.add if closed else self.closed.discard)(node_id)
        self._changed.add(node_id)

    def give(self, placements: Iterable[Placement], owner: int | None = None) -> None:
        """Mark GPUs free again; a shared GPU once its last share or MIG job (`owner`) leaves
        (its MIG instances stay)."""
        for placement in placements:
            freed = []
            for index in placement.gpu_indices:
                gpu = (placement.node_id, index)
                table = self.shares if gpu in self.shares else self.instances
                holders = table.get(gpu)
                if holders is None:
                    freed.append(index)
                    continue
                if owner not in holders:
                    raise SimulationError(f"job {owner} gives back a share it does not hold")
                del holders[owner]
                if not holders:
                    del table[gpu]
                    freed.append(index)
            self._change(placement.node_id, lambda f, g=freed: f.update(g))

    def _change(self, node_id: int, edit) -> None:
        node = self.nodes[node_id]
        free = self.free[node_id]
        before = len(free)
        edit(free)
        after = len(free)
        self.used[node.gpu_model] += before - after
        self.by_free[node.gpu_model, before, node.gpus] -= 1
        self.by_free[node.gpu_model, after, node.gpus] += 1
        self._changed.add(node_id)

    def node_objects(self) -> tuple[Node, ...]:
        """Engine nodes with their current free GPUs; only changed ones are rebuilt."""
        for node_id in self._changed:
            old = self.nodes[node_id]
            self._objects[self._index[node_id]] = Node(
                old.id,
                old.name,
                old.gpu_model,
                old.datacenter,
                old.pod,
                old.leaf,
                old.gpus,
                tuple(sorted(self.free[node_id])),
                old.schedulable and node_id not in self.closed,
                old.region,
            )
        self._changed.clear()
        return tuple(self._objects)


class Workloads:
    """The engine's view of every job that is pending or running, under one policy."""

    def __init__(
        self,
        spec: ClusterSpec,
        policy: SchedulingPolicy,
        time_limits: bool = False,
        grow_every_s: float = 300.0,
        move_every_s: float = 3600.0,
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.time_limits = time_limits
        self.grow_every_s = grow_every_s
        self.move_every_s = move_every_s
        self._objects: dict[int, Workload] = {}
        self._changed: dict[int, Job] = {}

    def changed(self, job: Job) -> None:
        """The job's state changed: rebuild its workload for the next snapshot."""
        self._changed[job.id] = job

    def hold(self, stopping: Workload) -> None:
        """Show GPUs about to be free (a shrunk job's, while it saves) as a stopping workload."""
        self._objects[stopping.id] = stopping

    def drop(self, workload_id: int) -> None:
        del self._objects[workload_id]

    def snapshot(
        self,
        allocations: Allocations,
        budgets: tuple[Budget, ...] = (),
        defrag: tuple[tuple[str, int], ...] = (),
    ) -> Snapshot:
        """The engine's snapshot; `budgets` apply to policies that keep the spec's queues;
        `defrag`: the pods due for defragmentation and their moves left."""
        for job_id, job in self._changed.items():
            if job.phase == Phase.DONE:
                self._objects.pop(job_id, None)
            else:
                self._objects[job_id] = self.workload(job)
        self._changed.clear()
        return Snapshot(
            allocations.node_objects(),
            self.policy.queues,
            tuple(self._objects.values()),
            self.policy.cohorts,
            self.grow_every_s,
            budgets if self.policy.fifo_of is None else (),
            move_every_s=self.move_every_s,
            mig_profiles=self.spec.mig_profiles,
            mig_layouts=dict(allocations.layouts),
            defrag=defrag,
            worth=self.spec.model_worth,
        )

    def workload(self, job: Job) -> Workload:
        """The engine's view of one job as it stands."""
        spec = job.spec
        running = job.running
        elastic = spec.min_gpus is not None and spec.min_gpus < spec.gpus
        # The trace duration as the user's time limit: an exact estimate, for backfill.
        limit = spec.duration_s if self.time_limits else None
        return Workload(
            spec.id,
            self.policy.queue_id(spec, self.spec),
            job.gpu_model if running else spec.gpu_model,
            job.held if running and not spec.fractional else spec.gpus,
            spec.submit_s,
            slices=spec.slices,
            mig=spec.mig.name if spec.mig else "",
            mig_charge=spec.share if spec.mig else 0.0,
            priority=self.policy.priority(spec),
            placements=job.placements,
            min_gpus=spec.min_gpus if elastic else None,
            max_gpus=spec.gpus if elastic else None,
            started_at=job.started_at,
            last_checkpoint_at=job.last_checkpoint_at,
            saves=job.ckpt.kind is not PolicyKind.NONE,
            time_limit_s=limit,
            throughput=job.throughput,
            resized_at=job.resized_at,
            preempting=job.phase == Phase.STOPPING,
            accepts=spec.accepts,
            speeds=spec.speeds if self.policy.speeds else (),
            movable=spec.movable,
        )
