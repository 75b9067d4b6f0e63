"""The simulated backend and the reconnect backoff, without a server."""

from __future__ import annotations

import asyncio
import random

import pytest

from scheduler.agent.agent import backoff_delay
from scheduler.agent.backends import Assignment, Backend, WorkloadExit
from scheduler.agent.protocol import AGENT, encode, parse
from scheduler.agent.simulated import SimulatedBackend


def make_backend(hostname: str = "node-a", speed: float = 100.0) -> SimulatedBackend:
    """A 4-GPU simulated node running 100 simulated seconds per second."""
    return SimulatedBackend(hostname, "H800", gpus=4, memory_mb=81559, speed=speed)


def test_the_simulated_backend_is_a_backend() -> None:
    backend: Backend = make_backend()
    assert backend.inventory().hostname == "node-a"


def test_the_inventory_is_stable_per_node_and_fits_a_hello() -> None:
    node = make_backend().inventory()
    assert node == make_backend().inventory()
    assert len({gpu.uuid for gpu in node.gpus}) == 4
    assert all(gpu.uuid.startswith("GPU-") for gpu in node.gpus)
    assert {g.uuid for g in make_backend("node-b").inventory().gpus}.isdisjoint(
        {g.uuid for g in node.gpus}
    )
    hello = encode("hello", agent_version="x", generation=0, node=node.to_message(), workloads=[])
    assert parse(hello, AGENT)["node"]["gpus"][3]["index"] == 3


def test_telemetry_jitter_is_the_same_for_the_same_node_and_differs_between_nodes() -> None:
    def samples(hostname: str) -> list[list[float]]:
        backend = make_backend(hostname)
        return [[s.util for s in backend.telemetry()] for _ in range(3)]

    assert samples("node-a") == samples("node-a")
    assert samples("node-a") != samples("node-b")


def test_busy_gpus_run_hot_and_idle_ones_stay_cold() -> None:
    async def scenario() -> None:
        backend = make_backend()
        await backend.start(Assignment(1, (1, 2)))
        for _ in range(20):
            by_index = {s.index: s for s in backend.telemetry()}
            for index in (1, 2):
                busy = by_index[index]
                assert 80 <= busy.util <= 99 and busy.memory_used_mb > 0.8 * 81559
                assert busy.power_w > 500
            for index in (0, 3):
                idle = by_index[index]
                assert idle.util < 1 and idle.memory_used_mb < 10 and idle.power_w < 100

    asyncio.run(scenario())


def test_a_workload_runs_its_simulated_duration_and_exits_0_with_every_step_done() -> None:
    async def scenario() -> None:
        backend = make_backend()
        await backend.start(Assignment(1, (0,), simulated_duration_s=60.0))
        await asyncio.sleep(0.05)
        assert 0 < backend.step(1) < 60
        assert await backend.wait(1) == WorkloadExit(exit_code=0, step=60)
        assert all(s.util < 1 for s in backend.telemetry())

    asyncio.run(scenario())


def test_a_stopped_workload_exits_minus_15_where_it_got_to() -> None:
    async def scenario() -> None:
        backend = make_backend()
        await backend.start(Assignment(1, (0,), simulated_duration_s=None))
        waiter = asyncio.create_task(backend.wait(1))
        await asyncio.sleep(0.05)
        saved = await backend.checkpoint(1)
        assert saved["location"].endswith(f"/workloads/1/step-{saved['step']}")
        await backend.stop(1)
        result = await waiter
        assert result.exit_code == -15 and result.step >= saved["step"] > 0
        with pytest.raises(KeyError):
            backend.step(1)  # forgotten once waited for

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        pytest.param(
            Assignment(2, (4,)), "GPU index 4 does not exist", id="a GPU it does not have"
        ),
        pytest.param(Assignment(1, (1,)), "already running", id="a workload id already running"),
    ],
)
def test_start_refuses_what_cannot_run(assignment: Assignment, message: str) -> None:
    async def scenario() -> None:
        backend = make_backend()
        await backend.start(Assignment(1, (0,)))
        with pytest.raises(ValueError, match=message):
            await backend.start(assignment)

    asyncio.run(scenario())


def test_a_finished_workload_cannot_be_checkpointed() -> None:
    async def scenario() -> None:
        backend = make_backend()
        await backend.start(Assignment(1, (0,), simulated_duration_s=0.0))
        await asyncio.sleep(0.01)
        with pytest.raises(LookupError, match="not running"):
            await backend.checkpoint(1)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [
        pytest.param(0, 0.5, id="the first retry waits at most the base"),
        pytest.param(3, 4.0, id="each failure doubles the ceiling"),
        pytest.param(6, 30.0, id="the ceiling stops at the cap"),
        pytest.param(10_000, 30.0, id="a very long outage does not overflow"),
    ],
)
def test_backoff_is_full_jitter_under_a_doubling_capped_ceiling(
    attempt: int, ceiling: float
) -> None:
    rng = random.Random(1)
    delays = [backoff_delay(attempt, rng) for _ in range(500)]
    assert all(0 <= d <= ceiling for d in delays)
    assert max(delays) > 0.9 * ceiling and min(delays) < 0.1 * ceiling  # spread over the range
