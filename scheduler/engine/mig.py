"""MIG instances: which GPU a MIG job takes, and whether its layout must change for it.

A MIG job (`Workload.mig`) takes one MIG instance of one GPU of a model with MIG. The snapshot
holds each GPU's MIG instances now (`Snapshot.mig_layouts`); running MIG jobs hold some of them.
A GPU holding MIG jobs is not free to other work (the snapshot lists it as taken, like any held
GPU). A free GPU in MIG mode (`spare`) is kept for MIG jobs alone while one of its model waits
that its quota lets start: the cycle takes it out of its pool. Where none waits it is free to
any work, and the agent turns MIG off on it when a whole-GPU job or a share starts there
(`Machine.mig_off`), so a GPU once sliced does not stay lost to whole-GPU work; such work takes
a GPU not in MIG mode of the same node first (`sliced_last`).

A MIG job goes, in this order of preference, to:

1. an idle instance of its profile (the layout stays as it is);
2. a GPU holding MIG jobs whose free slots can take one more instance of its profile (one is
   added; the busy ones are untouched);
3. a free GPU in MIG mode: its idle instances are kept where the new one fits beside them, else
   the GPU is re-sliced (all its instances are idle: no job holds the GPU);
4. a free GPU not in MIG mode (best-fit, as a one-GPU job), which the agent switches to MIG.

A GPU whose instances are in use is never re-sliced. The agent does what the placement implies
when it starts the job (`scheduler.agent.backends.MigSlicer`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from scheduler.engine.capacity import Pool
from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import Node, Placement, Snapshot, Workload
from scheduler.mig import Profile, fits
from scheduler.words import phrase

NO_MIG_ROOM = phrase(
    "no {model} GPU has room for a {profile} MIG instance beside the instances in use, and no "
    "{model} GPU is free"
)
NO_MIG_PROFILE = phrase("{model} GPUs have no MIG profile {profile}")

Gpu = tuple[int, int]  # (node id, GPU index)


class MigInstances:
    """The GPUs in MIG mode of the cycle, the instances held on them, and where MIG jobs go."""

    def __init__(
        self, running: Iterable[Workload], waiting: Iterable[Workload], snapshot: Snapshot
    ) -> None:
        self.profiles = snapshot.mig_profiles
        self.layouts: dict[Gpu, tuple[str, ...]] = dict(snapshot.mig_layouts)
        self.held: defaultdict[Gpu, list[str]] = defaultdict(list)
        models: dict[Gpu, str] = {}
        busy: set[Gpu] = set()
        for workload in running:
            if self.layouts:  # which GPUs in MIG mode are busy (none, in a fleet without MIG)
                for placement in workload.placements:
                    busy.update((placement.node_id, index) for index in placement.gpu_indices)
            for placement in workload.placements if workload.mig else ():
                gpu = (placement.node_id, placement.gpu_indices[0])
                self.held[gpu].append(workload.mig)
                models[gpu] = workload.gpu_model
        # The free GPUs in MIG mode of the models `waiting` MIG jobs want, kept for them (the
        # cycle takes them from its pools); the others are free to any work.
        wanted = {workload.gpu_model for workload in waiting if workload.mig}
        model_of = {node.id: node.gpu_model for node in snapshot.nodes} if wanted else {}
        self.spare: set[Gpu] = {
            gpu for gpu in set(self.layouts) - busy if model_of.get(gpu[0]) in wanted
        }
        for gpu, model in models.items():
            self._catch_up(gpu, self.profiles.get(model, {}))

    def _catch_up(self, gpu: Gpu, profiles: Mapping[str, Profile]) -> None:
        """A GPU's layout as its agent last reported it may lag its bookings: a job started
        since holds an instance the report lacks. That instance is added where it fits beside
        the reported ones; else the GPU was re-sliced since, and its instances are those held."""
        missing = list(self.held[gpu])
        for name in self.layouts.get(gpu, ()):
            if name in missing:
                missing.remove(name)
        if not missing:
            return
        layout = (*self.layouts.get(gpu, ()), *missing)
        known = all(name in profiles for name in layout)
        fitting = known and fits(profiles[name] for name in layout)
        self.layouts[gpu] = layout if fitting else tuple(self.held[gpu])

    def unknown(self, workload: Workload) -> str | None:
        """Why the MIG job can never run (its model has no such profile), or None."""
        if workload.mig in self.profiles.get(workload.gpu_model, {}):
            return None
        return NO_MIG_PROFILE.format(model=workload.gpu_model, profile=workload.mig)

    def find(self, pool: Pool, workload: Workload) -> Placement:
        """The GPU the MIG job takes (takes nothing), or Inadmissible with the reason."""
        model, name = workload.gpu_model, workload.mig
        profiles = self.profiles[model]
        mine = list(self._gpus(pool, workload))
        idle = [(gpu, node) for gpu, node in mine if name in self._idle(gpu)]
        held = [(gpu, node) for gpu, node in mine if gpu in self.held]
        fitting = [(g, n) for g, n in held if fits(self._layout(g, profiles, profiles[name]))]
        free = [(gpu, node) for gpu, node in mine if gpu not in self.held]
        # Ties: by node name, then GPU index.
        for candidates in (idle, fitting, free):
            if candidates:
                (node_id, index), _ = min(candidates, key=lambda c: (c[1].name, c[0][1]))
                return Placement(node_id, (index,))
        try:
            [placement] = pool.find(workload, 1)
        except Inadmissible:
            raise Inadmissible(NO_MIG_ROOM.format(model=model, profile=name)) from None
        return Placement(placement.node_id, placement.gpu_indices[:1])

    def sliced_last(self, pool: Pool, placements: tuple[Placement, ...]) -> tuple[Placement, ...]:
        """The placements of whole-GPU work or a share, each GPU in MIG mode swapped for a free
        GPU of its node that is not, where the node has one: a sliced GPU is turned back (its
        instances destroyed, MIG off) only where no other GPU of its node will do, so that MIG
        jobs find it sliced later."""
        if not self.layouts:
            return placements
        return tuple(self._sliced_last(pool, placement) for placement in placements)

    def _sliced_last(self, pool: Pool, placement: Placement) -> Placement:
        node_id, chosen = placement.node_id, placement.gpu_indices
        sliced = [index for index in chosen if (node_id, index) in self.layouts]
        if not sliced:
            return placement
        whole = sorted(
            index
            for index in pool.free(node_id)
            if index not in chosen and (node_id, index) not in self.layouts
        )
        swapped = dict(zip(sliced, whole, strict=False))
        if not swapped:
            return placement
        return Placement(node_id, tuple(sorted(swapped.get(index, index) for index in chosen)))

    def take(self, pool: Pool, placement: Placement, workload: Workload) -> None:
        """Hold an instance for the MIG job on its GPU: an idle one of its profile, else one
        added beside the others, else the GPU re-sliced to it alone (its instances idle)."""
        gpu = (placement.node_id, placement.gpu_indices[0])
        if gpu in self.spare:
            self.spare.discard(gpu)
            pool.give(placement)  # back in its pool to be taken as any GPU (a tenant's node)
        if gpu[1] in pool.free(gpu[0]):
            pool.take(placement, workload.tenant)
        profiles = self.profiles[workload.gpu_model]
        if workload.mig not in self._idle(gpu):
            layout = self._layout(gpu, profiles, profiles[workload.mig])
            kept = self.layouts.get(gpu, ()) if fits(layout) else ()
            self.layouts[gpu] = (*kept, workload.mig)
        self.held[gpu].append(workload.mig)

    def _idle(self, gpu: Gpu) -> list[str]:
        idle = list(self.layouts.get(gpu, ()))
        for name in self.held.get(gpu, ()):
            idle.remove(name)
        return idle

    def _layout(self, gpu: Gpu, profiles: dict, new: Profile) -> list[Profile]:
        return [profiles[n] for n in self.layouts.get(gpu, ()) if n in profiles] + [new]

    def _gpus(self, pool: Pool, workload: Workload) -> Iterable[tuple[Gpu, Node]]:
        """The GPUs holding MIG jobs, and the free ones in MIG mode, that the job may take: on a
        schedulable node of its pool not held for a reservation, and on a single-tenant node
        only beside its own tenant's work."""
        for gpu in sorted(self.layouts.keys() | self.held.keys()):
            node = pool.node(gpu[0])
            if node is None or gpu[0] in pool.held_by:
                continue
            if gpu not in self.held and gpu not in self.spare and gpu[1] not in pool.free(gpu[0]):
                continue  # in MIG mode but held whole
            if node.single_tenant and node.tenant not in (None, workload.tenant):
                continue
            yield gpu, node
