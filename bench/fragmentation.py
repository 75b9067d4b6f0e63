"""Fragmentation-aware placement of GPU shares (FGD) against best-fit, on the engine itself.

    python -m bench.fragmentation [--nodes 1000] [--churn 300] [--seed 7] [--seeds 3] [--short]
                                  [--defrag 4]

A mixed cluster of `--nodes` 8-GPU nodes (60 % H800 of 80 GB, 40 % H20 of 96 GB, 25 nodes a
leaf) takes a synthetic stream of requests, each of one model in proportion to its GPUs:
55 % shares of one GPU (1/8: 20 %, 1/4: 35 %, 3/8: 10 %, 1/2: 25 %, 3/4: 10 %), 30 % small
whole-GPU jobs (1, 2 or 4 GPUs) and 15 % gangs of 2 or 4 whole nodes. Each placement policy
(`SharePlacement`: FGD, Weng et al., ATC'23; best-fit) plans the same stream with
`scheduler.engine.plan`, in two phases:

- churn: `--churn` cycles of work finishing (a mean of 60 cycles) and arriving (up to 80 a
  cycle) at about 95 % of the cluster: the share of gangs that could not start in the cycle
  they arrived in;
- fill, from the fragmented cluster the churn left (what waited dropped, nothing finishing):
  single-node arrivals only (shares and small jobs, one a cycle) until one of each GPU model
  has been left waiting; the GPUs of that model left unallocated then (free whole GPUs plus
  the free eighths of partly used ones), summed over the models, are what
  fragmentation stranded: fewer is better (Weng et al.'s measure: the cluster filled with
  the workload until it refuses).

Under FGD, shares and small whole-GPU jobs go by FGD (gangs take whole nodes either way);
under best-fit, both by best-fit.
`--defrag N`: the churn is run once more under FGD with scheduled defragmentation on in every
pod whenever free GPUs are scattered (`scheduler.engine.defrag`), N moves per hour per pod
(counted over the last 60 cycles), its moves applied as the simulator applies them; each
policy's figures then also give gang_wait_cycles (the mean cycles a gang waited before it
started, over the gangs that started in the churn), gangs_still_waiting at the churn's end and
defrag_moves, and the JSON a `defrag` entry with them under FGD with and without it.
`--short`: 250 nodes and 100 churn cycles (under a minute). Progress and figures on stderr;
the last line is JSON: nodes, gpus, seeds, and per policy the means over `--seeds` streams of
unallocated_gpus_at_first_refusal and gangs_waited_share, and per_seed: each stream's
unallocated_gpus_at_first_refusal (and unallocated_by_model), admitted_before_refusal, gangs,
gangs_waited, gangs_waited_share.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field, replace

from scheduler.engine import Node, Queue, Quota, Snapshot, Workload, plan
from scheduler.engine.capacity import NodeIndex
from scheduler.engine.model import SLICES, SharePlacement

MODELS = (("H800", 0.6), ("H20", 0.4))
SHARES = ((1, 0.20), (2, 0.35), (3, 0.10), (4, 0.25), (6, 0.10))  # eighths, weight
KINDS = (("share", 0.55), ("small", 0.30), ("gang", 0.15))
SINGLE_NODE = KINDS[:2]
SMALL = ((1, 0.5), (2, 0.3), (4, 0.2))
GANG_NODES = ((2, 0.6), (4, 0.4))
PER_CYCLE = 20
CYCLE_S = 60.0
MEAN_CYCLES = 60.0
NODE_GPUS = 8
HOUR_CYCLES = round(3600 / CYCLE_S)


def say(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def pick(rng: random.Random, weighted) -> object:
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def cluster(nodes: int) -> tuple[Node, ...]:
    """`nodes` 8-GPU nodes, the models in their proportions, 25 nodes a leaf."""
    built, first = [], 0
    for model, part in MODELS:
        count = round(nodes * part) if model != MODELS[-1][0] else nodes - first
        for i in range(count):
            leaf = f"{model}-l{i // 25}"
            built.append(
                Node(first + i + 1, f"{model}-n{i:04d}", model, "dc1", f"{model}-p{i // 500}",
                     leaf, NODE_GPUS, tuple(range(NODE_GPUS)))
            )  # fmt: skip
        first += count
    return tuple(built)


@dataclass
class Request:
    """One arrival: its engine workload (pending) and how many cycles it runs."""

    workload: Workload
    cycles: int
    gang: bool


def requests(
    rng: random.Random, first_id: int, count: int, now: float, kinds=KINDS
) -> list[Request]:
    """`count` arrivals of the stream (of `kinds`), ids from `first_id`."""
    made = []
    for i in range(count):
        kind = pick(rng, kinds)
        model = pick(rng, MODELS)
        slices, gpus = 0, 1
        if kind == "share":
            slices = pick(rng, SHARES)
        elif kind == "small":
            gpus = pick(rng, SMALL)
        else:
            gpus = pick(rng, GANG_NODES) * NODE_GPUS
        cycles = max(1, round(rng.expovariate(1 / MEAN_CYCLES)))
        workload = Workload(first_id + i, 1, model, gpus, now, slices=slices)
        made.append(Request(workload, cycles, kind == "gang"))
    return made


def load(request: Request) -> float:
    """What a request holds, in GPUs."""
    return request.workload.share


@dataclass
class Run:
    """One policy's pass over the stream."""

    policy: SharePlacement
    nodes: tuple[Node, ...]
    running: dict[int, tuple[Workload, int]] = field(default_factory=dict)  # id -> (w, ends)
    pending: dict[int, Request] = field(default_factory=dict)
    index: NodeIndex = field(default_factory=NodeIndex)
    cycle: int = 0
    defrag: int | None = None  # moves per hour per pod, defragmenting whenever scattered
    moved: list[tuple[int, str]] = field(default_factory=list)  # (cycle, pod) of each move
    arrived: dict[int, int] = field(default_factory=dict)  # waiting gang id -> cycle it came
    gang_waits: list[int] = field(default_factory=list)  # cycles each started gang waited

    def snapshot(self) -> Snapshot:
        held: dict[int, set[int]] = {}
        for workload, _ in self.running.values():
            for p in workload.placements:
                held.setdefault(p.node_id, set()).update(p.gpu_indices)
        nodes = tuple(
            replace(n, free=tuple(i for i in range(n.gpus) if i not in held.get(n.id, ())))
            if n.id in held
            else n
            for n in self.nodes
        )
        capacity = {m: sum(n.gpus for n in self.nodes if n.gpu_model == m) for m, _ in MODELS}
        queue = Queue(1, "all", tuple(Quota(m, c) for m, c in capacity.items()))
        workloads = tuple(w for w, _ in self.running.values()) + tuple(
            r.workload for r in self.pending.values()
        )
        return Snapshot(nodes, (queue,), workloads, share_placement=self.policy, defrag=self.due())

    def due(self) -> tuple[tuple[str, int], ...]:
        """Every pod with the moves it has left over the last hour (60 cycles); () when off."""
        if self.defrag is None:
            return ()
        recent = [pod for cycle, pod in self.moved if cycle > self.cycle - HOUR_CYCLES]
        pods = sorted({n.pod for n in self.nodes})
        return tuple((pod, max(0, self.defrag - recent.count(pod))) for pod in pods)

    def step(self, arrivals: list[Request]) -> tuple[list[Request], list[Request]]:
        """One cycle: finish what ends, add `arrivals`, plan; (admitted, left waiting)."""
        self.cycle += 1
        now = self.cycle * CYCLE_S
        self.running = {k: v for k, v in self.running.items() if v[1] > self.cycle}
        for request in arrivals:
            self.pending[request.workload.id] = request
            if request.gang:
                self.arrived[request.workload.id] = self.cycle
        result = plan(self.snapshot(), now, index=self.index)
        for move in result.moves:  # it restarts from a save on its new GPUs
            workload, ends = self.running[move.workload_id]
            moved = replace(workload, placements=move.placements, resized_at=now)
            self.running[moved.id] = (moved, ends)
            self.moved.append((self.cycle, move.pod))
        admitted = []
        for admission in result.admissions:
            request = self.pending.pop(admission.workload_id)
            if request.gang:
                self.gang_waits.append(self.cycle - self.arrived.pop(request.workload.id))
            started = replace(request.workload, placements=admission.placements, started_at=now)
            self.running[started.id] = (started, self.cycle + request.cycles)
            admitted.append(request)
        return admitted, list(self.pending.values())

    def unallocated(self, model: str) -> float:
        """Free GPUs of a model, counting the free eighths of partly used ones."""
        held = sum(w.held for w, _ in self.running.values() if w.gpu_model == model)
        return sum(n.gpus for n in self.nodes if n.gpu_model == model) - held


def fill(run: Run, rng: random.Random, first_id: int) -> tuple[dict[str, float], int]:
    """Single-node arrivals only, onto what runs, until one of each GPU model has waited: per
    model, its GPUs unallocated in the cycle its first one waited; and the requests admitted
    until the last of those. What waited before is dropped (a waiting gang would reserve
    whole nodes, and a refusal there would be the reservation's, not fragmentation's)."""
    run.running = {k: (w, 10**9) for k, (w, _) in run.running.items()}  # nothing finishes
    run.pending.clear()
    next_id, admitted, unallocated = first_id, 0, {}
    while len(unallocated) < len(MODELS):
        # One at a time, as Weng et al. inflate a cluster: the first refused is the measure.
        [request] = requests(rng, next_id, 1, run.cycle * CYCLE_S, SINGLE_NODE)
        next_id += 1
        model = request.workload.gpu_model
        if model in unallocated:
            continue  # that model is measured
        request.cycles = 10**9  # nothing finishes while filling
        done, waiting = run.step([request])
        admitted += len(done)
        if waiting:
            unallocated[model] = run.unallocated(model)
            run.pending.clear()
    return unallocated, admitted


def churn(run: Run, rng: random.Random, cycles: int, first_id: int) -> tuple[int, int]:
    """`cycles` of work finishing and arriving at about 95 % of the cluster: (gangs arrived,
    gangs that did not start in the cycle they arrived in)."""
    total = sum(n.gpus for n in run.nodes)
    gangs = waited = 0
    next_id = first_id
    for _ in range(cycles):
        held = sum(w.held for w, _ in run.running.values())
        queued = sum(load(r) for r in run.pending.values())
        room = max(0.0, 0.95 * total - held - queued)
        arrivals = []
        while room > 0 and len(arrivals) < 4 * PER_CYCLE:
            [request] = requests(rng, next_id, 1, run.cycle * CYCLE_S)
            next_id += 1
            arrivals.append(request)
            room -= load(request)
        _, waiting = run.step(arrivals)
        new_gangs = [r for r in arrivals if r.gang]
        gangs += len(new_gangs)
        still = {r.workload.id for r in waiting}
        waited += sum(1 for r in new_gangs if r.workload.id in still)
    return gangs, waited


def measure(
    policy: SharePlacement,
    nodes: tuple[Node, ...],
    cycles: int,
    seed: int,
    defrag: int | None = None,
) -> dict:
    rng = random.Random(seed)
    run = Run(policy, nodes, defrag=defrag)
    started = time.perf_counter()
    gangs, waited = churn(run, rng, cycles, first_id=1)
    share = waited / gangs if gangs else 0.0
    waits = run.gang_waits
    kept = {
        "gang_wait_cycles": round(sum(waits) / len(waits), 3) if waits else 0.0,
        "gangs_still_waiting": len(run.arrived),
        "defrag_moves": len(run.moved),
    }
    name = policy.value if defrag is None else f"{policy.value} with defragmentation"
    say(
        f"{name}: churn of {cycles} cycles: {waited}/{gangs} gangs waited "
        f"({share:.1%}), {kept['gang_wait_cycles']:g} cycles on average, "
        f"{kept['gangs_still_waiting']} still waiting, {kept['defrag_moves']} defragmentation "
        f"moves ({time.perf_counter() - started:.1f} s)"
    )
    if defrag is not None:
        return {
            "gangs": gangs,
            "gangs_waited": waited,
            "gangs_waited_share": round(share, 4),
        } | kept
    stranded, admitted = fill(run, rng, first_id=10**7)
    unallocated = sum(stranded.values())
    said = ", ".join(f"{model} {gpus:g}" for model, gpus in sorted(stranded.items()))
    say(
        f"{policy.value}: filled until each model refused a single-node request, cycle "
        f"{run.cycle} ({admitted} more admitted); GPUs unallocated then: {said} "
        f"({time.perf_counter() - started:.1f} s in all)"
    )
    return {
        "unallocated_gpus_at_first_refusal": round(unallocated, 3),
        "unallocated_by_model": {model: round(gpus, 3) for model, gpus in stranded.items()},
        "admitted_before_refusal": admitted,
        "gangs": gangs,
        "gangs_waited": waited,
        "gangs_waited_share": round(share, 4),
    } | kept


def over_seeds(runs: list[dict]) -> dict:
    """One policy's figures over the seeds: the means, and each seed's."""
    return {
        "unallocated_gpus_at_first_refusal": round(
            sum(r["unallocated_gpus_at_first_refusal"] for r in runs) / len(runs), 3
        ),
        "gangs_waited_share": round(sum(r["gangs_waited_share"] for r in runs) / len(runs), 4),
        "per_seed": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--churn", type=int, default=300, help="cycles of the churn phase")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=3, help="streams, from --seed on")
    parser.add_argument("--short", action="store_true", help="250 nodes, 100 churn cycles")
    parser.add_argument(
        "--defrag", type=int, metavar="N", help="also under FGD with defragmentation, N moves/h"
    )
    args = parser.parse_args()
    count, cycles = (250, 100) if args.short else (args.nodes, args.churn)
    nodes = cluster(count)
    gpus = count * NODE_GPUS
    say(f"{count} nodes, {gpus} GPUs ({', '.join(f'{m} {p:.0%}' for m, p in MODELS)})")
    result = {"nodes": count, "gpus": gpus, "slices_per_gpu": SLICES, "seeds": args.seeds}
    for policy in (SharePlacement.FGD, SharePlacement.BEST_FIT):
        seeds = range(args.seed, args.seed + args.seeds)
        result[policy.value] = over_seeds([measure(policy, nodes, cycles, s) for s in seeds])
    if args.defrag is not None:
        runs = [measure(SharePlacement.FGD, nodes, cycles, s, args.defrag) for s in seeds]
        without = result[SharePlacement.FGD.value]["per_seed"]
        result["defrag"] = {
            "moves_per_hour": args.defrag,
            "without": {key: _mean_of(without, key) for key in DEFRAG_FIGURES},
            "with": {key: _mean_of(runs, key) for key in DEFRAG_FIGURES},
            "per_seed": runs,
        }
    print(json.dumps(result))


DEFRAG_FIGURES = ("gangs_waited_share", "gang_wait_cycles", "gangs_still_waiting", "defrag_moves")


def _mean_of(runs: list[dict], key: str) -> float:
    return round(sum(r[key] for r in runs) / len(runs), 4)


if __name__ == "__main__":
    main()
