"""Inference services in the simulator: replicas follow the load, scale-ups reclaim from
borrowing training (shrink first, else preempt with a save), scale-downs hand GPUs back."""

from __future__ import annotations

import pytest

from scheduler.autoscale import Settings
from scheduler.checkpointing import Policy, PolicyKind
from scheduler.inference import mean_service_s, read_trace
from scheduler.sim.policies import make_policy
from scheduler.sim.services import Service
from scheduler.sim.simulator import SimConfig, Simulator
from scheduler.sim.state import SimulationError
from scheduler.sim.trace import TraceJob
from tests.scheduler.sim.scenarios import cluster

HOUR = 3600.0
TARGET = 8.0
TRIGGERED = Policy(PolicyKind.TRIGGERED)


def conversation(peak_replicas: int, replicas: int = 1) -> Service:
    """The conversation trace at a rate whose peak needs `peak_replicas` replicas."""
    rps = peak_replicas * TARGET / mean_service_s(read_trace("azure-conv"), "H800")
    settings = Settings(
        target=TARGET, min_replicas=1, max_replicas=peak_replicas, scale_down_delay_s=300
    )
    return Service("chat", "serving", rps, settings, slots=12, gpu_model="H800", replicas=replicas)


def training(job_id: int, submit_h: float, gpus: int, min_gpus: int | None = None) -> TraceJob:
    return TraceJob(
        job_id,
        submit_h * HOUR,
        gpus,
        "H800",
        48 * HOUR,
        "training",
        min_gpus=min_gpus,
        checkpoint=TRIGGERED,
    )


def simulate(trace, *, until_h: float, peak_replicas: int = 2, replicas: int = 1, seed=1):
    """Nodes of 8 GPUs: the service's peak as its queue's quota, 16 GPUs of training quota,
    in one cohort."""
    serving = peak_replicas * 8
    queues = {"serving": (serving, 10), "training": (16, 0)}
    spec = cluster(leaves=1, nodes=peak_replicas + 2, queues=queues)
    config = SimConfig(
        seed=seed,
        cycle_s=2.0,
        failures_per_gpu_hour=0.0,
        horizon_s=until_h * HOUR,
        preemption_grace_s=60.0,
    )
    sim = Simulator(
        trace,
        spec,
        make_policy("wanka", spec),
        config,
        services=[conversation(peak_replicas, replicas)],
    )
    sim.run()
    return sim


def replicas(sim: Simulator) -> list:
    return [job for job in sim.jobs.values() if job.id in sim.replicas]


def test_replicas_follow_the_daily_load_up_and_down() -> None:
    sim = simulate([training(1, 2, 8)], until_h=26, peak_replicas=4)
    hourly = dict(sim.tide["inference"].averages(26 * HOUR))
    assert hourly[14 * HOUR] >= 3 * 8  # the afternoon peak: 4 replicas wanted
    assert hourly[3 * HOUR] <= 20 and hourly[25 * HOUR] <= 20  # the nights: 1 or 2
    assert sim.services[0].figures()["slo_attainment"] >= 0.99


def test_a_scale_up_shrinks_borrowing_elastic_training_first() -> None:
    sim = simulate([training(1, 2, 24, min_gpus=16)], until_h=12)
    job = sim.jobs[1]
    assert job.shrinks >= 1 and job.preemptions == 0
    reclaims = sim.services[0].reclaims
    assert reclaims.replicas >= 1 and reclaims.lost_gpu_s == 0
    assert 30 <= max(reclaims.latencies) <= 30 + 2 * 2  # the save, then a cycle or two


@pytest.mark.parametrize(
    ("policy", "waits", "kept"),
    [
        pytest.param(TRIGGERED, 30.0, True, id="a save from memory within the grace"),
        pytest.param(
            Policy(PolicyKind.PERIODIC, 1800),
            60.0,
            False,
            id="a stop-the-world save too long for the grace",
        ),
    ],
)
def test_a_scale_up_preempts_borrowing_training_after_its_save(policy, waits, kept) -> None:
    trace = [training(i, 2, 8) for i in (1, 2, 3)]
    trace[2] = TraceJob(3, 2.1 * HOUR, 8, "H800", 48 * HOUR, "training", checkpoint=policy)
    sim = simulate(trace, until_h=12)
    victims = [job.id for job in sim.jobs.values() if job.preemptions]
    reclaims = sim.services[0].reclaims
    assert victims == [3] and reclaims.replicas >= 1
    assert waits <= max(reclaims.latencies) <= waits + 2 * 2
    assert (reclaims.lost_gpu_s == 0) == kept


def test_a_scale_down_lets_waiting_training_start_at_once() -> None:
    trace = [training(1, 14, 16), training(2, 14.01, 8)]
    sim = simulate(trace, until_h=26, replicas=2)
    ended = sorted(job.finished_at for job in replicas(sim) if job.finished_at is not None)
    waiting = sim.jobs[2]
    assert ended and waiting.first_start is not None
    assert ended[0] <= waiting.first_start <= ended[0] + 2.0  # the next cycle


def test_the_same_seed_gives_the_same_run() -> None:
    trace = [training(1, 2, 24, min_gpus=16), training(2, 3, 8)]
    first, second = (simulate(trace, until_h=14, seed=7) for _ in range(2))
    assert first.services[0].figures() == second.services[0].figures()
    assert first.tide["inference"].averages(14 * HOUR) == second.tide["inference"].averages(
        14 * HOUR
    )
    assert [job.history for job in first.jobs.values()] == [
        job.history for job in second.jobs.values()
    ]


def test_a_run_with_services_needs_a_horizon() -> None:
    spec = cluster(leaves=1, nodes=4, queues={"serving": (16, 10), "training": (16, 0)})
    with pytest.raises(SimulationError, match="horizon"):
        Simulator([], spec, make_policy("wanka", spec), services=[conversation(2)])
