"""Tiny scenarios whose every figure is worked out by hand (no faults).

The cycle rule: a change at time t runs a cycle at max(t, previous cycle + 10 s); a cycle's plan
takes effect at once, and a job whose victims were preempted starts at the next cycle.
"""

from __future__ import annotations

import pytest

from scheduler.checkpointing import Costs, Policy, PolicyKind
from scheduler.parallelism import GPUS, MODELS, plan
from scheduler.sim.runner import simulate
from scheduler.sim.simulator import SimConfig
from scheduler.sim.trace import TraceJob
from tests.scheduler.sim.scenarios import cluster

NO_FAULTS = SimConfig(
    failures_per_gpu_hour=0.0, cycle_s=10.0, costs=Costs(save_stall_s=10.0, restart_s=20.0)
)

# Four 8-GPU nodes; queues a and b have 16 GPUs of quota each, in one cohort.
FOUR_NODES = cluster(leaves=2, nodes=2, queues={"a": (16, 0), "b": (16, 0)})
FOUR_JOBS = [
    TraceJob(1, 0.0, 16, "H800", 100.0, "a"),
    TraceJob(2, 5.0, 16, "H800", 100.0, "a"),
    TraceJob(3, 10.0, 8, "H800", 50.0, "b"),
    TraceJob(4, 20.0, 4, "H800", 50.0, "b"),
]


def figures(policy: str, trace, spec=FOUR_NODES, config=NO_FAULTS) -> dict[int, tuple]:
    """Job id -> (status, queueing delay, JCT)."""
    recorder = simulate(trace, spec, policy, config).recorder
    return {
        o.id: (o.status, o.wait_s, o.jct_s) for o in sorted(recorder.outcomes, key=lambda o: o.id)
    }


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param(
            "wanka",
            {
                # 1 starts at 0. The cycle at 10 sees 2 and 3: b's job fits its quota and starts;
                # a's second gang would borrow 16 while b holds 8 of its 16, so it waits. 4 starts
                # at 20. Only when 4 ends (70) can a borrow 16 and 2 start: a wait of 65 s.
                1: ("finished", 0.0, 100.0),
                2: ("finished", 65.0, 165.0),
                3: ("finished", 0.0, 50.0),
                4: ("finished", 0.0, 50.0),
            },
            id="wanka: b's jobs start at once, a's second gang borrows when b is idle",
        ),
        pytest.param(
            "fifo",
            {
                # Strict FIFO: 2 (submitted at 5) heads the cycle at 10 and takes the two free
                # nodes; 3 and 4 wait behind it until 1 ends at 100.
                1: ("finished", 0.0, 100.0),
                2: ("finished", 5.0, 105.0),
                3: ("finished", 90.0, 140.0),
                4: ("finished", 80.0, 130.0),
            },
            id="fifo: submit order decides, b waits behind a's gang",
        ),
        pytest.param(
            "static",
            {
                # No borrowing: a's second gang waits for its first to end at 100.
                1: ("finished", 0.0, 100.0),
                2: ("finished", 95.0, 195.0),
                3: ("finished", 0.0, 50.0),
                4: ("finished", 0.0, 50.0),
            },
            id="static: a never borrows b's idle quota",
        ),
    ],
)
def test_four_jobs_on_four_nodes(policy: str, expected: dict) -> None:
    assert figures(policy, FOUR_JOBS) == expected


# Two 8-GPU nodes; queues a and b have 8 GPUs of quota each, in one cohort.
TWO_NODES = cluster(leaves=1, nodes=2, queues={"a": (8, 0), "b": (8, 0)})


def test_reclaim_preempts_the_borrower_which_saves_first_and_resumes_from_that_save() -> None:
    """b's 16-GPU job borrows a's idle quota, checkpointing every 50 s of compute (10 s stall).
    a's job arrives at 95: the cycle at 95 preempts b's job, which saves first (graceful
    preemption), keeping all 85 s of its work; a's job starts at the next cycle, 105, and ends
    at 205, when b's job starts again: a 20 s restart, then the other 915 s of work with 18
    stalls (one every 50 s of compute): done at 225 + 915 + 180 = 1320."""
    trace = [
        TraceJob(1, 0.0, 16, "H800", 1000.0, "b", checkpoint=Policy(PolicyKind.PERIODIC, 50.0)),
        TraceJob(2, 95.0, 8, "H800", 100.0, "a"),
    ]
    simulator = simulate(trace, TWO_NODES, "wanka", NO_FAULTS)
    outcomes = {o.id: o for o in simulator.recorder.outcomes}
    assert (outcomes[1].wait_s, outcomes[1].jct_s) == (110.0, 1320.0)
    assert (outcomes[2].wait_s, outcomes[2].jct_s) == (10.0, 110.0)
    assert outcomes[1].preemptions == 1
    assert outcomes[1].lost_preemption_gpu_s == 20.0 * 16  # the restart; no work lost
    assert outcomes[1].ettr == pytest.approx(1000.0 / 1320.0)
    assert simulator.recorder.preemptions == 1


def test_an_elastic_borrower_is_shrunk_instead_of_preempted() -> None:
    """The same, but b's job may run on 8 GPUs: at 95 it gives back a node and goes on at half
    speed after a 20 s restart (95 of its 1000 s of work done): 905 s of work take 1810 s
    from 115, done at 1925. a's job starts at 105. It never grows back: it never saves, and a
    grow would restart it from its last save."""
    trace = [
        TraceJob(1, 0.0, 16, "H800", 1000.0, "b", min_gpus=8, checkpoint=Policy(PolicyKind.NONE)),
        TraceJob(2, 95.0, 8, "H800", 100.0, "a"),
    ]
    simulator = simulate(trace, TWO_NODES, "wanka", NO_FAULTS)
    outcomes = {o.id: o for o in simulator.recorder.outcomes}
    assert outcomes[1].jct_s == pytest.approx(1925.0)
    assert (outcomes[2].wait_s, outcomes[2].jct_s) == (10.0, 110.0)
    assert (simulator.recorder.preemptions, simulator.recorder.shrinks) == (0, 1)
    assert simulator.recorder.grows == 0


def test_a_shrunk_job_with_a_model_runs_at_the_planners_speed() -> None:
    """The same with gpt3-1.3b and a batch of 16, whose second node adds little (the planner
    says how much): on 8 GPUs it keeps far more than half of its speed, so its 905 s of work
    take 905 s over that share."""
    model = {"model": "gpt3-1.3b", "global_batch": 16}
    trace = [
        TraceJob(1, 0.0, 16, "H800", 1000.0, "b", min_gpus=8, checkpoint=Policy(PolicyKind.NONE),
                 **model),
        TraceJob(2, 95.0, 8, "H800", 100.0, "a"),
    ]  # fmt: skip
    speed = (
        plan(MODELS["gpt3-1.3b"], GPUS["H800"], 8, 16).tokens_per_s
        / plan(MODELS["gpt3-1.3b"], GPUS["H800"], 16, 16).tokens_per_s
    )
    assert 0.6 < speed < 0.95
    simulator = simulate(trace, TWO_NODES, "wanka", NO_FAULTS)
    outcomes = {o.id: o for o in simulator.recorder.outcomes}
    assert outcomes[1].jct_s == pytest.approx(115.0 + 905.0 / speed)
    assert simulator.recorder.kept == [(0.5, pytest.approx(speed))]


def test_an_elastic_job_starts_on_what_is_free_and_grows_when_it_may() -> None:
    """b's job asks for 32 GPUs, elastic down to 8, while a's holds 3 of the 4 nodes until 100:
    it starts on the one free node at once (start-smaller), and once 300 s have passed since
    that start, with a save of the last 300 s to resume from, a cycle grows it onto the 3 nodes
    freed meanwhile. A job of a model the cluster has none of keeps cycles running."""
    periodic = Policy(PolicyKind.PERIODIC, 100.0)
    trace = [
        TraceJob(1, 0.0, 24, "H800", 100.0, "a"),
        TraceJob(2, 1.0, 32, "H800", 2000.0, "b", min_gpus=8, checkpoint=periodic),
        TraceJob(3, 1.0, 8, "H20", 10.0, "a"),
    ]
    simulator = simulate(trace, FOUR_NODES, "wanka", NO_FAULTS)
    outcomes = {o.id: o for o in simulator.recorder.outcomes}
    assert outcomes[2].wait_s < 20
    assert simulator.recorder.grows == 1
    # Without the grow its 2000 s of work would take 8000 s on 8 of its 32 GPUs.
    assert outcomes[2].jct_s < 3500


def test_the_no_reclaim_baseline_lets_the_borrower_finish() -> None:
    trace = [TraceJob(1, 0.0, 16, "H800", 1000.0, "b"), TraceJob(2, 95.0, 8, "H800", 100.0, "a")]
    assert figures("no-reclaim", trace, TWO_NODES) == {
        1: ("finished", 0.0, 1000.0),
        2: ("finished", 905.0, 1005.0),
    }


def test_a_job_bigger_than_its_partition_never_starts_under_static_partitions() -> None:
    trace = [TraceJob(1, 0.0, 16, "H800", 100.0, "a")]
    assert figures("static", trace, TWO_NODES) == {1: ("never-started", 0.0, None)}


def test_cycles_coalesce_changes_within_a_period() -> None:
    """Arrivals at 0, 3 and 6 on an idle cluster: the cycle at 0 starts the first, the next
    cycle, at 10, the other two."""
    trace = [TraceJob(i, t, 1, "H800", 50.0, "a") for i, t in ((1, 0.0), (2, 3.0), (3, 6.0))]
    simulator = simulate(trace, TWO_NODES, "wanka", NO_FAULTS)
    waits = {o.id: o.wait_s for o in simulator.recorder.outcomes}
    assert waits == {1: 0.0, 2: 7.0, 3: 4.0}
    assert simulator.recorder.cycles == 2


# Eight 8-GPU nodes; queues a and b have 32 GPUs of quota each, in one cohort.
EIGHT_NODES = cluster(leaves=2, nodes=4, queues={"a": (32, 0), "b": (32, 0)})
# b fills the cluster, borrowing all of a's quota, with work that ends at 1000.
B_EVERYWHERE = [TraceJob(i, 0.0, 8, "H800", 1000.0, "b") for i in range(1, 9)]


def guarantee(policy: str, trace, spec=EIGHT_NODES) -> tuple[int, float]:
    """Violations and the longest a job that fit its queue's guarantee waited."""
    recorder = simulate(trace, spec, policy, NO_FAULTS).recorder
    return sum(recorder.violations.values()), max(recorder.longest_starved.values())


@pytest.mark.parametrize(
    ("policy", "trace", "spec", "expected"),
    [
        pytest.param(
            "wanka",
            # One of a's 8-GPU jobs every 10 s: each reclaims at the cycle it arrives at and
            # starts at the next, while the next one reclaims; a always has one job waiting.
            B_EVERYWHERE + [TraceJob(10 + i, 10.0 * i, 8, "H800", 500.0, "a") for i in range(4)],
            EIGHT_NODES,
            (0, 10.0),
            id="jobs arriving one a cycle, each reclaimed within a cycle: no violation",
        ),
        pytest.param(
            "wanka",
            # a holds its 8 GPUs with jobs ending every 5 s from 100, with 8 more waiting: each
            # cycle (100, 110, ...) starts the ones that fit then, filling a's quota again, so
            # none waits while it fits, though a has jobs waiting until 140.
            [TraceJob(1, 0.0, 8, "H800", 10_000.0, "b")]
            + [TraceJob(10 + i, 0.0, 1, "H800", 100.0 + 5 * i, "a") for i in range(16)],
            TWO_NODES,
            (0, 0.0),
            id="a backlog refilling each GPU its queue frees: no violation",
        ),
        pytest.param(
            "no-reclaim",
            B_EVERYWHERE + [TraceJob(10, 10.0, 8, "H800", 500.0, "a")],
            EIGHT_NODES,
            (1, 990.0),
            id="a job that fits its guarantee waits for the borrower to finish: a violation",
        ),
    ],
)
def test_guarantee_check(policy: str, trace, spec, expected: tuple[int, float]) -> None:
    assert guarantee(policy, trace, spec) == expected
