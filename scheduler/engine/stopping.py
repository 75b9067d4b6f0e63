"""Room that work already stopping makes: its GPUs count as free for whoever holds their node
first, so a victim of 64 nodes evicted for a claimant of one leaves 63 to later claimants."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial

from scheduler.engine.capacity import Pool
from scheduler.engine.model import TopologyLevel, Workload
from scheduler.engine.moves import Claim, Move, MoveKind, Rule
from scheduler.engine.occupancy import Occupancy, held_per_node

# What a room costs that evicts and shrinks nothing (`VictimSearch._cost`): the least.
NO_COST = (False, -math.inf, 0, 0.0, 0.0, 0.0)


def stopping_room(pool: Pool, occupancy: Occupancy, gpus: int) -> Claim | None:
    """Room for a job of `gpus` GPUs, smaller than a node, that work already stopping makes on
    one node with the GPUs free there (`Occupancy.soon_room`), or None. It evicts nobody, so no
    rule is at stake and no quota is released: for a claimant whose quota allows it, this is
    the room `VictimSearch.for_small` would find, without a search (most claimants of a cycle
    that evicts are seated so)."""
    node_id = occupancy.soon_room(pool, gpus, partial(usable_gpus, pool, gpus, occupancy.soon))
    if node_id is None:
        return None
    moves = stopping_moves(occupancy, node_id, gpus - len(pool.free(node_id)))
    return Claim(moves, TopologyLevel.LEAF, pool.domains_of(node_id)[-1], (node_id,), NO_COST)


def stopping_moves(occupancy: Occupancy, node_id: int, missing: int) -> list[Move]:
    """Moves that wait for the stopping work on a node to free `missing` GPUs there: one
    workload that frees them alone if there is one, else all of it in turn until enough."""
    if missing <= 0:
        return []
    stopping = occupancy.releasing_on[node_id]
    held = occupancy.held_on
    for workload in stopping:
        if held(workload)[node_id] >= missing:
            return [releasing_move(occupancy, workload)]
    chosen, freed = [], 0
    for workload in stopping:
        if freed >= missing:
            break
        chosen.append(releasing_move(occupancy, workload))
        freed += held(workload)[node_id]
    return chosen


def releasing_move(occupancy: Occupancy, workload: Workload) -> Move:
    """The move that counts on a stopping workload's GPUs, made once a cycle."""
    key = (workload.id, Rule.RELEASING)
    moves = occupancy.moves.get(key)
    if moves is None:
        moves = occupancy.moves[key] = [
            Move(MoveKind.RELEASING, Rule.RELEASING, workload, held_per_node(workload))
        ]
    return moves[-1]


class FreeGPUs(dict):
    """GPUs free now or soon (once the stopping work there is gone, `soon`) per node a small
    job could use (None for nodes it cannot: missing, too small, held), looked up on first
    use."""

    def __init__(self, pool: Pool, gpus: int, soon: Mapping[int, int]) -> None:
        super().__init__()
        self.pool = pool
        self.gpus = gpus
        self.soon = soon

    def __missing__(self, node_id: int) -> int | None:
        value = self[node_id] = usable_gpus(self.pool, self.gpus, self.soon, node_id)
        return value


def usable_gpus(pool: Pool, gpus: int, soon: Mapping[int, int], node_id: int) -> int | None:
    """GPUs free now or soon on a node for a job of `gpus` GPUs, smaller than a node; None
    where it cannot go (missing, too small, held). See `FreeGPUs`."""
    node = pool.node(node_id)
    if node is None or node.gpus < gpus or node_id in pool.held_by:
        return None
    return len(pool.free(node_id)) + soon.get(node_id, 0)
