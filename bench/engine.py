"""Time full scheduling cycles of the engine at 1,000, 10,000 and 100,000 GPUs.

    python -m bench.engine [--repeat 5] [--seed 7] [--sizes 1000,10000,100000] [--mixed]

Each size is a synthetic cluster of 8-GPU nodes in 2 data centers of pods of up to 25 leaves of
25 nodes (200 GPUs a leaf, 5,000 a pod: a three-tier fat-tree), 85 % occupied by running work,
with 200 queues in 20 cohorts and 10,000 pending workloads at 100,000 GPUs (both scaled down
with the cluster). Job sizes follow the GPU-count distribution of the Microsoft Philly trace
(`data/traces/philly/gpu_counts.csv`); counts of 8 GPUs or more are multiplied by a factor
that grows with the cluster (64 at 100,000 GPUs, so gangs of 512 to 8,192 GPUs appear), and
every size class of the trace appears among the pending work at least once.

Running work has start times, checkpoints, some time limits and some elasticity; queues differ
in quota, guarantee and priority, and some borrow while others wait under their nominal quota,
so a cycle admits, reclaims, shrinks and reserves. The same snapshot is planned `repeat` times
(the engine is pure, so each run does the same work) and timed on the wall clock. Two lines per
size (the figures, then the seconds of each numbered step of the last run), then one JSON
object for the largest size: gpus, nodes, running, pending, cycle_s_median, cycle_s_max,
admitted, preempted, shrunk, reserved, peak_rss_mb (the whole process's peak, so that of the
largest size, which runs last), reference_s (the reference loop, `bench.reference`, timed in
the same run) and cycle_ref (the median cycle in reference loops; target at 100,000 GPUs:
at most 0.45).

`--mixed`: a mixed fleet instead. Every third pod holds H20 nodes, the rest H800; queues have
quota of both; running work is of either; a third of the pending jobs accept both models, half
of those with the speeds of each (2.6 to 1), so the engine weighs the choice for each, and a
tenth are shares of one GPU (one to seven eighths), placed by FGD.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import resource
import statistics
import time
from dataclasses import replace
from pathlib import Path

from bench.reference import in_loops, reference_s
from scheduler.engine import (
    Node,
    Plan,
    Queue,
    Quota,
    Snapshot,
    TopologyLevel,
    Workload,
    plan,
)
from scheduler.engine.model import SLICES

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "philly" / "gpu_counts.csv"
NOW = 1_700_000_000.0
NODE_GPUS = 8
NODES_PER_LEAF, LEAVES_PER_POD = 25, 25
OCCUPIED = 0.85
HOUR = 3600.0
NODE = TopologyLevel.NODE


def philly_sizes() -> list[tuple[int, int]]:
    """(GPUs, jobs) of the Philly trace, by GPU count."""
    with TRACE.open() as f:
        return [(int(row["num_gpus"]), int(row["jobs"])) for row in csv.DictReader(f)]


def scale_factor(gpus: int) -> int:
    """What multiplies trace jobs of a node or more: a power of two, 64 at 100,000 GPUs."""
    return max(1, 2 ** round(math.log2(64 * gpus / 100_000)))


def scaled(size: int, factor: int) -> int:
    return size * factor if size >= NODE_GPUS else size


def stratified(count: int, factor: int, rng: random.Random) -> list[int]:
    """`count` job sizes in the trace's proportions, each size class at least once."""
    sizes = philly_sizes()
    total = sum(jobs for _, jobs in sizes)
    drawn = {size: max(1, round(jobs * count / total)) for size, jobs in sizes}
    drawn[sizes[0][0]] += count - sum(drawn.values())  # the smallest class absorbs rounding
    jobs = [scaled(size, factor) for size, n in drawn.items() for _ in range(n)]
    rng.shuffle(jobs)
    return jobs


MIXED_SPEEDS = (("H800", 2.6), ("H20", 1.0))


def model_of(pod: int, mixed: bool) -> str:
    """The GPU model of a pod: H20 for every third pod of a mixed fleet, else H800."""
    return "H20" if mixed and pod % 3 == 2 else "H800"


def build_nodes(gpus: int, mixed: bool = False) -> tuple[Node, ...]:
    """Two data centers of pods of leaves of 8-GPU nodes, `gpus` GPUs in all."""
    nodes = []
    total = gpus // NODE_GPUS
    for dc in range(2):
        in_dc = total // 2 + (total % 2 if dc == 0 else 0)
        for i in range(in_dc):
            leaf, n = divmod(i, NODES_PER_LEAF)
            pod, leaf = divmod(leaf, LEAVES_PER_POD)
            name = f"dc{dc + 1}-p{pod + 1}-l{leaf + 1}-n{n + 1}"
            nodes.append(
                Node(
                    len(nodes) + 1,
                    name,
                    model_of(pod, mixed),
                    f"dc{dc + 1}",
                    f"p{pod + 1}",
                    f"l{leaf + 1}",
                    NODE_GPUS,
                    tuple(range(NODE_GPUS)),
                    region="r1",
                )
            )
    return tuple(nodes)


def build_queues(
    gpus: int, rng: random.Random, models: dict[str, int] | None = None
) -> tuple[Queue, ...]:
    """Queues in cohorts of 10, nominal quotas summing to the cluster (per GPU model, its
    GPUs of `models`; default all H800), uneven in size: the first queue of every fourth
    cohort is a model builder's, with a large quota."""
    count = max(10, round(200 * gpus / 100_000))
    shares = [40 if i % 40 == 0 else rng.choice([1, 1, 2, 3, 5]) for i in range(count)]
    queues = []
    for i, share in enumerate(shares):
        quotas = []
        for model, total in (models or {"H800": gpus}).items():
            nominal = total * share // sum(shares)
            guarantee = nominal // 4 if i % 3 == 0 else 0
            limit = None if i % 4 else nominal
            quotas.append(Quota(model, nominal, guarantee=guarantee, borrowing_limit=limit))
        queues.append(
            Queue(
                i + 1,
                f"q{i + 1}",
                tuple(quotas),
                cohort=f"c{i // 10 + 1}",
                priority=10 if i % 17 == 0 else 0,
                weight=rng.choice([1.0, 2.0]),
                region="r1",
            )
        )
    return tuple(queues)


def place_running(nodes, queues, gpus: int, factor: int, rng: random.Random) -> list[Workload]:
    """Running work filling about 85 % of the GPUs, placed by the engine itself (on a mixed
    fleet, of each model in proportion to its GPUs)."""
    models = gpus_per_model(nodes)
    setup = Queue(0, "setup", tuple(Quota(m, 10 * gpus) for m in models), region="r1")
    sizes, total, target = [], 0, OCCUPIED * gpus
    sizes_table = philly_sizes()
    while total < target:
        size = scaled(
            rng.choices([s for s, _ in sizes_table], [j for _, j in sizes_table])[0], factor
        )
        if total + size <= target * 1.01:
            sizes.append(size)
            total += size
    jobs = [
        Workload(i + 1, 0, pick_model(models, rng), size, 0.0)
        for i, size in enumerate(sorted(sizes, reverse=True))
    ]
    placed = plan(Snapshot(nodes, (setup,), tuple(jobs)), now=NOW).admissions
    by_id = {job.id: job for job in jobs}
    owner = assign_queues([by_id[a.workload_id].gpus for a in placed], queues, rng)
    running = []
    for admission, queue in zip(placed, owner, strict=True):
        job = by_id[admission.workload_id]
        started = NOW - rng.uniform(0.1, 48) * HOUR
        running.append(
            replace(
                job,
                id=1_000_000 + job.id,
                queue_id=queue.id,
                placements=admission.placements,
                priority=rng.choice([0, 0, 0, 1, 2]),
                started_at=started,
                last_checkpoint_at=started + 0.5 * HOUR * int((NOW - started) / (0.5 * HOUR))
                if rng.random() < 0.7
                else None,
                time_limit_s=(NOW - started) + rng.uniform(0.2, 24) * HOUR
                if rng.random() < 0.5
                else None,
                min_gpus=job.gpus // 2
                if job.gpus >= 64 * NODE_GPUS and rng.random() < 0.2
                else None,
            )
        )
    return running


def gpus_per_model(nodes) -> dict[str, int]:
    found: dict[str, int] = {}
    for node in nodes:
        found[node.gpu_model] = found.get(node.gpu_model, 0) + node.gpus
    return found


def pick_model(models: dict[str, int], rng: random.Random) -> str:
    """A GPU model, in proportion to its GPUs (no draw on a fleet of one model)."""
    if len(models) == 1:
        return next(iter(models))
    return rng.choices(list(models), list(models.values()))[0]


def assign_queues(sizes: list[int], queues, rng: random.Random) -> list[Queue]:
    """An owner for each running job: a few queues hold much of the work (borrowing), others
    little, but no cohort uses more than the quota of its members."""
    weights = [rng.paretovariate(1.2) for _ in queues]
    room = {}
    for queue in queues:
        room[queue.cohort] = room.get(queue.cohort, 0) + sum(q.nominal for q in queue.quotas)
    owners = []
    for size in sizes:
        for _ in range(50):
            queue = rng.choices(queues, weights)[0]
            if room[queue.cohort] >= size:
                break
        else:
            queue = max(queues, key=lambda q: (room[q.cohort], -q.id))
        room[queue.cohort] -= size
        owners.append(queue)
    return owners


def build_pending(
    count: int, queues, factor: int, rng: random.Random, models: dict[str, int] | None = None
) -> list[Workload]:
    """Pending work of every queue, Philly-sized, some with time limits or topology needs; on
    a mixed fleet (`models`), of either model, a third accepting both."""
    pending = []
    builders = sorted(queues, key=lambda q: -q.quotas[0].nominal)[: max(1, len(queues) // 40)]
    for i, size in enumerate(stratified(count, factor, rng)):
        # The largest gangs are the model builders'.
        owner = rng.choice(builders if size >= 128 * NODE_GPUS * factor // 64 else queues)
        topology, required = TopologyLevel.DATACENTER, False
        if size >= NODE_GPUS and rng.random() < 0.2:
            topology, required = rng.choice(
                [(TopologyLevel.LEAF, False), (TopologyLevel.POD, True)]
            )
        job = Workload(
            i + 1,
            owner.id,
            "H800",
            size,
            NOW - rng.uniform(0, 12) * HOUR,
            priority=rng.choice([0, 0, 0, 1, 2]),
            topology=topology,
            topology_required=required,
            time_limit_s=rng.uniform(0.5, 12) * HOUR if rng.random() < 0.5 else None,
        )
        if models is not None:
            job = replace(job, gpu_model=pick_model(models, rng))
            draw = rng.random()
            if draw < 1 / 3:
                speeds = MIXED_SPEEDS if rng.random() < 0.5 else ()
                job = replace(job, accepts=tuple(models), speeds=speeds)
            elif draw < 1 / 3 + 0.1:  # a share of one GPU
                job = replace(job, gpus=1, slices=rng.randint(1, SLICES - 1), topology=NODE)
        pending.append(job)
    return pending


def scenario(gpus: int, seed: int, mixed: bool = False) -> Snapshot:
    """The synthetic snapshot for a cluster of `gpus` GPUs (`mixed`: of H800 and H20)."""
    rng = random.Random(seed)
    factor = scale_factor(gpus)
    nodes = build_nodes(gpus, mixed)
    models = gpus_per_model(nodes) if mixed else None
    queues = build_queues(gpus, rng, models)
    running = place_running(nodes, queues, gpus, factor, rng)
    held = {}
    for workload in running:
        for placement in workload.placements:
            held[placement.node_id] = set(placement.gpu_indices) | held.get(
                placement.node_id, set()
            )
    nodes = tuple(
        replace(n, free=tuple(i for i in n.free if i not in held.get(n.id, ()))) for n in nodes
    )
    pending = build_pending(round(10_000 * gpus / 100_000), queues, factor, rng, models)
    return Snapshot(nodes, queues, (*running, *pending))


def run(gpus: int, repeat: int, seed: int, mixed: bool = False) -> dict:
    snapshot = scenario(gpus, seed, mixed)
    times, result = [], Plan()
    for _ in range(repeat):
        started = time.perf_counter()
        result = plan(snapshot, now=NOW, clock=time.perf_counter)
        times.append(time.perf_counter() - started)
    return {
        "gpus": gpus,
        "nodes": len(snapshot.nodes),
        "running": sum(1 for w in snapshot.workloads if w.is_running),
        "pending": sum(1 for w in snapshot.workloads if not w.is_running),
        "accepting_two": sum(1 for w in snapshot.workloads if len(w.models) > 1),
        "shares": sum(1 for w in snapshot.workloads if w.slices),
        "cycle_s_median": round(statistics.median(times), 4),
        "cycle_s_max": round(max(times), 4),
        "admitted": len(result.admissions),
        "preempted": len(result.preemptions),
        "shrunk": len(result.shrinks),
        "reserved": len(result.reservations),
        "steps_s": {step: round(s, 4) for step, s in result.timings.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--mixed", action="store_true", help="H800 and H20, jobs of either or both")
    args = parser.parse_args()
    reference = reference_s()
    print(f"reference loop: {reference} s", flush=True)
    last = {}
    for gpus in sorted(int(size) for size in args.sizes.split(",")):
        last = run(gpus, args.repeat, args.seed, args.mixed)
        steps = last.pop("steps_s")
        last["cycle_ref"] = in_loops(last["cycle_s_median"], reference)
        print(" ".join(f"{key}={value}" for key, value in last.items()), flush=True)
        print("  steps:", " ".join(f"{k}={v}" for k, v in steps.items()), flush=True)
    last["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    last["reference_s"] = reference
    print(json.dumps(last))


if __name__ == "__main__":
    main()
