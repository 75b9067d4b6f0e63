"""What must hold in every run: every job ends once, no GPU is held twice or beyond the
cluster, the same seed gives the same figures, and each baseline keeps to its definition."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from scheduler.sim.policies import POLICIES
from scheduler.sim.runner import run, simulate
from scheduler.sim.simulator import SimConfig, Simulator
from tests.scheduler.sim.scenarios import busy_trace, cluster

# Faults far more often than in life, so that every path runs in a short trace.
FAULTY = SimConfig(seed=3, cycle_s=10.0, failures_per_gpu_hour=0.02)
SPEC = cluster()
NOMINAL = {q.name: q.quotas[0].nominal for q in SPEC.queues}


def held_gpus(sim: Simulator) -> dict[int, set[int]]:
    """GPU indices per node held by running jobs; fails if one is held twice."""
    held: dict[int, set[int]] = {}
    for job in sim.jobs.values():
        for placement in job.placements if job.running else ():
            gpus = held.setdefault(placement.node_id, set())
            assert not gpus & set(placement.gpu_indices), (
                f"a GPU of node {placement.node_id} is held twice"
            )
            gpus.update(placement.gpu_indices)
    return held


def check_capacity(sim: Simulator) -> None:
    held = held_gpus(sim)
    for node_id, gpus in held.items():
        size = sim.allocations.nodes[node_id].gpus
        assert gpus <= set(range(size))
        assert sim.allocations.free[node_id] == set(range(size)) - gpus
    assert sum(map(len, held.values())) <= SPEC.gpus


def used_per_queue(sim: Simulator) -> Counter[str]:
    return Counter({job.spec.queue: job.held for job in sim.jobs.values() if job.running})


class Checks:
    """An invariant hook, called after every event, for one policy."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.plans_seen: set[int] = set()
        self.events = 0

    def __call__(self, sim: Simulator) -> None:
        self.events += 1
        check_capacity(sim)
        if self.policy == "static":
            used = used_per_queue(sim)
            assert all(used[q] <= NOMINAL[q] for q in used), f"static borrowed: {used}"
        plan = sim.last_plan
        if plan is None or id(plan) in self.plans_seen:
            return
        self.plans_seen.add(id(plan))
        if self.policy == "fifo":
            assert not plan.preemptions and not plan.shrinks
        if self.policy == "no-reclaim":
            for preemption in plan.preemptions:  # only priority within the claimant's queue
                victim, claimant = (
                    sim.jobs[preemption.workload_id],
                    sim.jobs[preemption.for_workload_id],
                )
                assert victim.spec.queue == claimant.spec.queue


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[Simulator, Checks]]:
    trace = busy_trace(seed=5, jobs=90)
    done = {}
    for policy in POLICIES:
        checks = Checks(policy)
        done[policy] = (simulate(trace, SPEC, policy, FAULTY, hook=checks), checks)
    return done


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_job_ends_exactly_once(runs, policy: str) -> None:
    sim, checks = runs[policy]
    ids = [o.id for o in sim.recorder.outcomes]
    assert sorted(ids) == sorted(sim.jobs)
    statuses = Counter(o.status for o in sim.recorder.outcomes)
    assert set(statuses) <= {"finished", "never-started"}
    assert checks.events == sim.events > 0


def test_the_busy_trace_exercises_faults_preemptions_and_shrinks(runs) -> None:
    recorder = runs["wanka"][0].recorder
    assert recorder.preemptions > 0 and recorder.shrinks > 0 and sum(recorder.faults.values())


def test_fifo_starts_jobs_in_submit_order(runs) -> None:
    outcomes = sorted(runs["fifo"][0].recorder.outcomes, key=lambda o: (o.submit_s, o.id))
    starts = [o.first_start_s for o in outcomes]
    assert starts == sorted(starts)
    assert runs["fifo"][0].recorder.preemptions == 0


def test_static_partitions_never_start_what_exceeds_the_partition(runs) -> None:
    never = [o for o in runs["static"][0].recorder.outcomes if o.status == "never-started"]
    assert never and all(o.gpus > NOMINAL[o.queue] for o in never)


def digest(results: dict) -> str:
    return hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()


SCRIPT = """
import hashlib, json
from scheduler.sim.runner import run
from scheduler.sim.simulator import SimConfig
from tests.scheduler.sim.scenarios import busy_trace, cluster
results = run(busy_trace(seed=7, jobs=60), cluster(), ["wanka", "static"],
              config=SimConfig(seed=11, failures_per_gpu_hour=0.02))
print(hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest())
"""


def test_the_same_seed_gives_the_same_json_bit_for_bit() -> None:
    """Run twice here and once in another process with another string hash seed."""
    config = SimConfig(seed=11, failures_per_gpu_hour=0.02)
    first = run(busy_trace(seed=7, jobs=60), cluster(), ["wanka", "static"], config=config)
    second = run(busy_trace(seed=7, jobs=60), cluster(), ["wanka", "static"], config=config)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    other = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=os.getcwd(),
    ).stdout.strip()
    assert other == digest(first)


def test_another_seed_gives_other_faults() -> None:
    trace = busy_trace(seed=7, jobs=60)
    one = run(trace, cluster(), ["wanka"], config=SimConfig(seed=1, failures_per_gpu_hour=0.02))
    two = run(trace, cluster(), ["wanka"], config=SimConfig(seed=2, failures_per_gpu_hour=0.02))
    assert one["policies"]["wanka"]["faults"] != two["policies"]["wanka"]["faults"]
