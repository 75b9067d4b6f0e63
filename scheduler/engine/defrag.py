"""Defragmentation: move small running jobs within a pod so that whole nodes free up for a gang
that waits with enough free GPUs in the pod, but scattered over partly used nodes.

The portal says which pods are due (an operator turned it on, at a set time or whenever free
GPUs are scattered) and how many moves each may still make (`Snapshot.defrag`); the cycle asks
`empty_nodes` for each gang that waits in a due pod. A move is planned as any `Move`: the job
saves, gives back its GPUs and restarts from its save on the GPUs planned, so that the nodes
it leaves are whole at the next cycle. Nobody is preempted.
"""

from __future__ import annotations

from operator import attrgetter

from scheduler.engine.capacity import Pool
from scheduler.engine.errors import Inadmissible
from scheduler.engine.model import Node, Placement, Workload
from scheduler.engine.topology import Domain

Moves = list[tuple[Workload, Placement]]

# The moves one cycle plans at most, whatever the pods' budgets: each is a save and a restart,
# and finding each looks at every node of its pod; what is left waits for the next cycles.
MOVES_PER_CYCLE = 32


def empty_nodes(
    pool: Pool,
    domain: Domain,
    gang: Workload,
    occupants: dict[int, list[Workload]],
    budget: int,
    emptied: set[int],
) -> Moves | None:
    """The moves, at most `budget`, that leave enough whole nodes in `domain` (a pod) for
    `gang` to start there once they are made; the GPUs they move to are taken. None when the
    gang would not start after any such moves (nothing is taken then).

    `occupants`: the running work of each node that may move (saves, movable, on one node);
    a node with any other work stays as it is. `emptied`: nodes the cycle's earlier moves
    empty, neither emptied again nor moved onto (updated with this call's). Nodes are emptied
    fewest used GPUs first (then the name), each job to the partly free node with the fewest
    free GPUs that holds it (best fit, never a whole node), so the fewest GPUs move."""
    need = gang.gpus // pool.node_size - pool.whole(domain)
    if need <= 0 or pool.free_gpus(domain) < gang.gpus:
        return None  # room by nodes already, or too few free GPUs: moving cannot help
    nodes = pool.domain_nodes(domain)
    moves: Moves = []
    chosen: set[int] = set()
    for node in sorted(_emptiable(pool, nodes, occupants, emptied), key=_used(pool)):
        if len(chosen) == need:
            break
        jobs = occupants[node.id]
        if len(moves) + len(jobs) > budget or any(p.node_id == node.id for _, p in moves):
            continue  # over budget, or it took a moved job: it would not be whole
        found = _targets(pool, nodes, jobs, emptied | chosen | {node.id})
        if found is not None:
            moves += found
            chosen.add(node.id)
    if len(chosen) < need or not _starts_after(pool, gang, moves):
        _undo(pool, moves)
        return None
    emptied |= chosen
    return moves


def _emptiable(
    pool: Pool, nodes: list[Node], occupants: dict[int, list[Workload]], emptied: set[int]
) -> list[Node]:
    """Full-sized, partly used nodes whose every used GPU is held by work that may move."""
    return [
        node
        for node in nodes
        if node.id in occupants
        and node.id not in emptied
        and node.gpus == pool.node_size
        and len(pool.free(node.id)) + sum(w.gpus for w in occupants[node.id]) == node.gpus
    ]


def _used(pool: Pool):
    return lambda node: (node.gpus - len(pool.free(node.id)), node.name)


def _targets(pool: Pool, nodes: list[Node], jobs: list[Workload], away: set[int]) -> Moves | None:
    """Where each job goes (the largest first), taken; None, and nothing taken, when one of
    them has no room."""
    moves: Moves = []
    for job in sorted(jobs, key=attrgetter("gpus"), reverse=True):
        room = [
            node
            for node in nodes
            if node.id not in away
            and job.gpus <= len(pool.free(node.id)) < node.gpus
            and pool.offered(node.id, job.tenant)  # a single-tenant node: its tenant's only
        ]
        if not room:
            _undo(pool, moves)
            return None
        best = min(room, key=lambda node: (len(pool.free(node.id)), node.name))
        placement = Placement(best.id, tuple(sorted(pool.free(best.id))[: job.gpus]))
        pool.take(placement, job.tenant)
        moves.append((job, placement))
    return moves


def _starts_after(pool: Pool, gang: Workload, moves: Moves) -> bool:
    """Whether the gang finds room once the moved jobs have left their GPUs (tried, then
    restored)."""
    for job, _ in moves:
        for placement in job.placements:
            pool.give(placement)
    try:
        pool.find(gang)
    except Inadmissible:
        return False
    else:
        return True
    finally:
        for job, _ in moves:
            for placement in job.placements:
                pool.take(placement, job.tenant)


def _undo(pool: Pool, moves: Moves) -> None:
    for _, placement in moves:
        pool.give(placement)
