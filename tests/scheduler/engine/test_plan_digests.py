"""Speed work on the engine must not change a single plan.

Random snapshots (a seeded generator in this file, independent of the engine: several data
centers, pods and leaves, cordoned nodes, nested cohorts, guarantees, limits, priorities,
strict-FIFO queues, elastic, stopping and time-limited running work, pending gangs) are planned,
and each plan's text is hashed and compared with the digest recorded from the engine before the
speed work, and again after each deliberate change of its behaviour (`plan_digests.json`); such
a change regenerates it: `python -m tests.scheduler.engine.test_plan_digests`.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from scheduler.engine import (
    Cohort,
    Node,
    Placement,
    PreemptionPolicy,
    Queue,
    Quota,
    ReclaimWithinCohort,
    Snapshot,
    Strategy,
    TopologyLevel,
    WithinClusterQueue,
    Workload,
    plan,
    preemption,
)
from scheduler.engine.trial import Trial

DIGESTS = Path(__file__).with_name("plan_digests.json")
SEEDS = range(400)
NOW = 10_000.0


def nodes(rng: random.Random) -> list[Node]:
    """Two or three data centers of H800 pods, sometimes an H20 pod; a few nodes cordoned."""
    built = []
    for d in range(rng.choice([2, 3])):
        for p in range(rng.choice([1, 2])):
            model = "H20" if d == 0 and p == 1 else "H800"
            for leaf in range(rng.choice([2, 3])):
                for n in range(rng.choice([3, 4, 5])):
                    built.append(
                        Node(
                            len(built) + 1,
                            f"dc{d}-p{p}-l{leaf}-n{n}",
                            model,
                            f"dc{d}",
                            f"p{p}",
                            f"l{leaf}",
                            8,
                            tuple(range(8)),
                            schedulable=rng.random() > 0.05,
                        )
                    )
    return built


def queues(rng: random.Random) -> tuple[list[Queue], list[Cohort]]:
    cohorts = [
        Cohort("root"),
        Cohort("a", "root", (Quota("H800", rng.choice([0, 16])),)),
        Cohort("b", "root", (Quota("H800", 0, lending_limit=rng.choice([None, 32])),)),
    ]
    made = []
    for i in range(rng.randint(3, 7)):
        nominal = rng.choice([0, 16, 32, 64, 96])
        quota = Quota(
            "H800",
            nominal,
            guarantee=rng.choice([0, nominal // 2]),
            borrowing_limit=rng.choice([None, None, 32]),
            lending_limit=rng.choice([None, None, nominal // 2]),
        )
        reclaim, within = rng.random() > 0.2, rng.random() > 0.3
        below = rng.choice([None, None, 5])
        policy = PreemptionPolicy(
            reclaim_within_cohort=ReclaimWithinCohort.ANY if reclaim else ReclaimWithinCohort.NEVER,
            within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY
            if within
            else WithinClusterQueue.NEVER,
            borrow_within_cohort=below is not None,
            max_priority_threshold=None if below is None else below - 1,
        )
        made.append(
            Queue(
                i + 1,
                f"q{i + 1}",
                (quota, Quota("H20", rng.choice([0, 16, 32]))),
                cohort=rng.choice(["a", "b", "a", None]),
                priority=rng.choice([0, 0, 1]),
                weight=rng.choice([1.0, 2.0]),
                strategy=Strategy.STRICT_FIFO if rng.random() < 0.15 else Strategy.BEST_EFFORT_FIFO,
                preemption=policy,
            )
        )
    return made, cohorts


def running(rng: random.Random, cluster: list[Node], made: list[Queue]) -> list[Workload]:
    """Work placed first fit on free GPUs, whole nodes for 8 GPUs or more."""
    free = {node.id: list(range(8)) for node in cluster}
    work = []
    for i in range(rng.randint(5, 40)):
        gpus = rng.choice([1, 2, 4, 8, 8, 16, 32])
        model = rng.choice(["H800", "H800", "H20"])
        fit = [
            n
            for n in cluster
            if n.gpu_model == model
            and (len(free[n.id]) == 8 if gpus >= 8 else len(free[n.id]) >= gpus)
        ]
        if len(fit) < max(1, gpus // 8):
            continue
        placements = []
        for node in fit[: max(1, gpus // 8)]:
            take = free[node.id][: min(gpus, 8)]
            free[node.id] = free[node.id][len(take) :]
            placements.append(Placement(node.id, tuple(take)))
        started = NOW - rng.uniform(60, 20_000)
        elastic = gpus >= 8 and rng.random() < 0.3
        work.append(
            Workload(
                1000 + i,
                rng.choice(made).id,
                model,
                gpus,
                started - 100,
                priority=rng.choice([0, 0, 1, 3, 6]),
                placements=tuple(placements),
                min_gpus=max(1, gpus // 2) if elastic else None,
                max_gpus=gpus if elastic else None,
                started_at=started,
                last_checkpoint_at=started + rng.uniform(0, NOW - started)
                if rng.random() < 0.6
                else None,
                time_limit_s=rng.choice([None, NOW - started + rng.uniform(60, 7200)]),
                preempting=rng.random() < 0.05,
            )
        )
    return work


def pending(rng: random.Random, made: list[Queue]) -> list[Workload]:
    work = []
    for i in range(rng.randint(5, 50)):
        gpus = rng.choice([1, 2, 4, 8, 16, 24, 32, 64, 128, 12])
        topology = rng.choice(list(TopologyLevel))
        work.append(
            Workload(
                i + 1,
                rng.choice(made).id if rng.random() > 0.02 else 999,
                rng.choice(["H800", "H800", "H20"]),
                gpus,
                NOW - rng.uniform(0, 5000),
                priority=rng.choice([0, 0, 1, 3, 6]),
                topology=topology,
                topology_required=rng.random() < 0.3,
                min_gpus=gpus // 2 if gpus >= 16 and rng.random() < 0.2 else None,
                time_limit_s=rng.choice([None, rng.uniform(60, 20_000)]),
            )
        )
    return work


def snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    cluster = nodes(rng)
    made, cohorts = queues(rng)
    work = running(rng, cluster, made)
    held: dict[int, set[int]] = {}
    for workload in work:
        for placement in workload.placements:
            held.setdefault(placement.node_id, set()).update(placement.gpu_indices)
    cluster = [
        Node(
            n.id,
            n.name,
            n.gpu_model,
            n.datacenter,
            n.pod,
            n.leaf,
            n.gpus,
            tuple(i for i in n.free if i not in held.get(n.id, ())),
            n.schedulable,
        )
        for n in cluster
    ]
    return Snapshot(tuple(cluster), tuple(made), tuple(work + pending(rng, made)), tuple(cohorts))


def digest(seed: int) -> str:
    return hashlib.sha256(repr(plan(snapshot(seed), NOW)).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def recorded() -> list[str]:
    return json.loads(DIGESTS.read_text())


def test_the_snapshots_exercise_every_kind_of_decision() -> None:
    plans = [plan(snapshot(seed), NOW) for seed in SEEDS[:100]]
    assert sum(bool(p.preemptions) for p in plans) >= 10
    assert sum(bool(p.shrinks) for p in plans) >= 3
    assert sum(bool(p.reservations) for p in plans) >= 10
    assert sum(bool(p.admissions) for p in plans) >= 50


def test_a_plan_leaves_nothing_to_the_cyclic_collector() -> None:
    """What a cycle builds is freed by reference counting as the plan returns: a reference
    cycle in it (a memo holding its own ledger did) would keep every cycle's state alive until
    the collector's next pass, which then walks all of it (in the simulator, 15 % of a replay)."""
    snapshots = [snapshot(seed) for seed in SEEDS[:100]]
    gc.collect()
    debug, enabled = gc.get_debug(), gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        plans = [plan(s, NOW) for s in snapshots]
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(debug)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert sum(bool(p.preemptions) for p in plans) >= 10
    assert not left, f"objects in reference cycles: {sorted(set(left))}"


@pytest.mark.parametrize("chunk", range(4), ids=lambda c: f"seeds {c * 100} to {c * 100 + 99}")
def test_plans_are_those_recorded_before_the_speed_work(chunk: int, recorded: list[str]) -> None:
    seeds = SEEDS[chunk * 100 : (chunk + 1) * 100]
    changed = [seed for seed in seeds if digest(seed) != recorded[seed]]
    assert not changed, f"plans changed for seeds {changed[:10]}"


def test_a_move_found_needed_without_dropping_it_is_one_dropping_it_would_keep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`minimise` with `targets` spares dropping and taking again a move it can tell is needed
    (`Trial.needed`): beside each such call a twin of the trial is minimised the long way, by
    dropping every move in turn, and both keep the same moves freeing the same GPUs."""
    minimise, compared = preemption.minimise, []

    def both(trial: Trial, enough, targets: int | None = None) -> None:
        twin = None
        if targets is not None:
            twin = copy.copy(trial)
            twin.missing, twin.taken = dict(trial.missing), list(trial.taken)
            twin.freed = defaultdict(Counter, {k: Counter(v) for k, v in trial.freed.items()})
            twin.shrunk, twin.released = Counter(trial.shrunk), Counter(trial.released)
            twin.rules = Counter(trial.rules)
            minimise(twin, lambda: twin.done >= targets)
        minimise(trial, enough, targets)
        if twin is not None:
            assert [(id(m), f) for m, f in twin.taken] == [(id(m), f) for m, f in trial.taken]
            compared.append(len(trial.taken))

    monkeypatch.setattr(preemption, "minimise", both)
    for seed in SEEDS[:150]:
        plan(snapshot(seed), NOW)
    assert len(compared) >= 20


if __name__ == "__main__":
    DIGESTS.write_text(json.dumps([digest(seed) for seed in SEEDS], indent=0) + "\n")
