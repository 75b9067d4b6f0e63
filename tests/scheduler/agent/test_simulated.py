"""The simulated node: injected faults, slow nodes, checkpoints, resume and the new telemetry."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scheduler.agent.backends import (
    Assignment,
    BackendEvent,
    FaultRefused,
    NodeFault,
    TopologyLabels,
)
from scheduler.agent.protocol import AGENT, encode, parse
from scheduler.agent.simulated import FAULT_EXIT_CODE, SimulatedBackend, SimulatedGpus
from scheduler.faults import lookup


def make_backend(speed: float = 100.0) -> tuple[SimulatedBackend, list[BackendEvent]]:
    """A 4-GPU simulated node at 100 simulated seconds per second, and the events it reports."""
    backend = SimulatedBackend(
        "node-a", "H200", gpus=4, memory_mb=143771, speed=speed, seed=3,
        labels=TopologyLabels("dc-east", "pod-1", "leaf-2"),
    )  # fmt: skip
    events: list[BackendEvent] = []
    backend.subscribe(events.append)
    return backend, events


def kinds(events: list[BackendEvent], kind: str) -> list[dict[str, Any]]:
    """The details of the events of one kind."""
    return [dict(e.detail) for e in events if e.kind == kind]


@pytest.mark.parametrize(
    ("code", "ecc_dbe", "retired"),
    [
        pytest.param("xid-79", None, None, id="xid 79: the GPU falls off the bus"),
        pytest.param("xid-48", 1, 1, id="xid 48: a double-bit ECC error retires a page"),
        pytest.param("xid-94", 1, 1, id="xid 94: a contained ECC error retires a page"),
        pytest.param("xid-74", 0, 0, id="xid 74: an NVLink error leaves the memory alone"),
    ],
)
def test_an_xid_is_reported_then_kills_the_workload_on_that_gpu(
    code: str, ecc_dbe: int | None, retired: int | None
) -> None:
    async def scenario() -> None:
        backend, events = make_backend()
        await backend.start(Assignment(1, (2, 3)))
        await backend.start(Assignment(2, (0,)))
        drill = backend.inject_fault(code, 3, {})
        kind = lookup(code)
        assert kind.kills_job
        assert kinds(events, "fault") == [
            {
                "code": code,
                "xid": kind.xid,
                "gpu_index": 3,
                "message": f"XID {kind.xid} on GPU 3: {kind.title} (simulated)",
            }
        ]
        assert "killed workload(s) [1]" in drill.detail
        assert (await backend.wait(1)).exit_code == FAULT_EXIT_CODE
        assert backend.step(2) >= 0  # the workload on another GPU runs on
        samples = {s.index: s for s in backend.telemetry()}
        if ecc_dbe is None:
            assert 3 not in samples  # it no longer answers
        else:
            assert (samples[3].ecc_dbe, samples[3].retired_pages) == (ecc_dbe, retired)
            assert samples[2].ecc_dbe == 0

    asyncio.run(scenario())


def test_a_gpu_off_the_bus_takes_no_new_work() -> None:
    async def scenario() -> None:
        backend, _ = make_backend()
        backend.inject_fault("xid-79", 1, {})
        with pytest.raises(NodeFault, match="GPU 1 has fallen off the bus") as refused:
            await backend.start(Assignment(5, (1,)))
        assert (refused.value.detail["code"], refused.value.detail["gpu_index"]) == ("xid-79", 1)
        await backend.start(Assignment(6, (0,)))

    asyncio.run(scenario())


def test_an_xid_without_a_gpu_hits_the_work() -> None:
    async def scenario() -> None:
        backend, events = make_backend()
        await backend.start(Assignment(1, (2,)))
        backend.inject_fault("xid-48", None, {})
        assert kinds(events, "fault")[0]["gpu_index"] == 2
        assert (await backend.wait(1)).exit_code == FAULT_EXIT_CODE

    asyncio.run(scenario())


def test_an_xid_that_does_not_kill_leaves_the_work_running() -> None:
    async def scenario() -> None:
        backend, events = make_backend()
        await backend.start(Assignment(1, (0,)))
        backend.inject_fault("xid-63", 0, {})  # row remapping pending: work goes on
        assert kinds(events, "fault")[0]["code"] == "xid-63"
        await asyncio.sleep(0.02)
        assert backend.step(1) > 0 and backend.telemetry()[0].util >= 80

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("code", "gpu_index", "reason"),
    [
        pytest.param("meltdown", None, "unknown fault 'meltdown'", id="an unknown code"),
        pytest.param("xid-79", 9, "GPU index 9 does not exist", id="a GPU the node lacks"),
    ],
)
def test_faults_it_cannot_simulate_are_refused(
    code: str, gpu_index: int | None, reason: str
) -> None:
    async def scenario() -> None:
        backend, events = make_backend()
        with pytest.raises(FaultRefused, match=reason):
            backend.inject_fault(code, gpu_index, {})
        assert events == []

    asyncio.run(scenario())


def test_heartbeat_loss_asks_the_agent_for_silence_and_keeps_the_work() -> None:
    async def scenario() -> None:
        backend, events = make_backend()
        await backend.start(Assignment(1, (0,)))
        drill = backend.inject_fault("heartbeat-loss", None, {"duration_s": 12})
        assert drill.silence_s == 12 and events == []
        assert backend.telemetry()[0].util >= 80

    asyncio.run(scenario())


def test_a_slow_node_takes_factor_times_longer_per_step_until_the_drill_ends() -> None:
    async def scenario() -> None:
        normal, _ = make_backend(speed=1000.0)
        slow, _ = make_backend(speed=1000.0)
        for backend in (normal, slow):
            await backend.start(Assignment(1, (0,), simulated_duration_s=None))
        drill = slow.inject_fault("slow-node", None, {"factor": 4, "duration_s": 0.3})
        assert drill.detail == "steps take 4 times longer for 0.3 s"
        await asyncio.sleep(0.2)
        ratio = normal.step(1) / slow.step(1)
        assert 3.0 < ratio < 5.0, ratio
        await asyncio.sleep(0.3)  # the drill is over: both advance at the same rate again
        before = (normal.step(1), slow.step(1))
        await asyncio.sleep(0.1)
        gained = (normal.step(1) - before[0], slow.step(1) - before[1])
        assert 0.7 < gained[1] / gained[0] < 1.3, gained

    asyncio.run(scenario())


def test_a_slow_node_also_finishes_later() -> None:
    async def scenario() -> None:
        backend, _ = make_backend(speed=100.0)
        await backend.start(Assignment(1, (0,), simulated_duration_s=10.0))  # 0.1 s normally
        backend.inject_fault("slow-node", None, {"factor": 3})
        waiter = asyncio.create_task(backend.wait(1))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        assert (await waiter).exit_code == 0

    asyncio.run(scenario())


def test_periodic_and_requested_checkpoints_are_reported_with_their_step() -> None:
    async def scenario() -> None:
        backend, events = make_backend(speed=100.0)
        env = {"WANKA_CHECKPOINT_INTERVAL_S": "10"}  # simulated seconds: 0.1 s of wall time
        await backend.start(Assignment(4, (0, 1), env=env, simulated_duration_s=None))
        await asyncio.sleep(0.35)
        saved = await backend.checkpoint(4, request_id="c-1")
        periodic = kinds(events, "checkpoint_saved")[:-1]
        assert [d["step"] for d in periodic] == [10, 20, 30][: len(periodic)]
        assert len(periodic) >= 2 and {d["kind"] for d in periodic} == {"periodic"}
        assert kinds(events, "checkpoint_saved")[-1] == saved
        assert (saved["kind"], saved["request_id"]) == ("requested", "c-1")
        assert saved["step"] >= 30 and saved["location"].endswith(f"/step-{saved['step']}")
        assert saved["size_bytes"] == 2 * 16 * 2**30
        assert saved["duration_s"] == 0.0  # instant, and it says so: nothing to carve as stall
        for detail in kinds(events, "checkpoint_saved"):
            event = encode("event", kind="checkpoint_saved", workload_id=4, exit_code=None,
                           detail=detail)  # fmt: skip
            assert parse(event, AGENT)["detail"] == detail

    asyncio.run(scenario())


def test_a_workload_resumes_from_the_step_in_its_resume_location() -> None:
    async def scenario() -> None:
        backend, _ = make_backend(speed=100.0)
        env = {"WANKA_RESUME_FROM": "sim://node-a/workloads/4/step-50"}
        await backend.start(Assignment(4, (0,), env=env, simulated_duration_s=60.0))
        assert 50 <= backend.step(4) < 55
        exit_ = await backend.wait(4)
        assert exit_.exit_code == 0 and exit_.step == 60

    asyncio.run(scenario())


def test_telemetry_and_inventory_carry_the_new_fields_and_fit_the_protocol() -> None:
    async def scenario() -> None:
        backend, _ = make_backend()
        node = backend.inventory().to_message()
        hello = encode("hello", agent_version="x", generation=0, node=node, workloads=[])
        facts = parse(hello, AGENT)["node"]["facts"]
        assert facts["nvlink"] == {"up": 72, "total": 72}
        assert (facts["datacenter"], facts["pod"], facts["leaf"]) == ("dc-east", "pod-1", "leaf-2")
        assert facts["driver_version"] and facts["cuda_version"] == "12.4"
        assert backend.inventory().enrolment_facts()["gpu_count"] == 4
        gpus = [s.to_message() for s in backend.telemetry()]
        beat = encode("heartbeat", generation=0, gpus=gpus, workloads=[])
        assert {"ecc_sbe", "ecc_dbe", "retired_pages"} <= set(parse(beat, AGENT)["gpus"][0])

    asyncio.run(scenario())


def test_a_triggered_checkpoint_is_reported_as_triggered() -> None:
    async def scenario() -> None:
        backend, events = make_backend()
        await backend.start(Assignment(2, (0,)))
        saved = await backend.checkpoint(2, "c-8", kind="triggered", reason="fault 3")
        assert (saved["kind"], saved["status"]) == ("triggered", "complete")
        assert kinds(events, "checkpoint_saved") == [saved]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("code", "gpu_index", "killed", "counters"),
    [
        pytest.param("ecc-dbe", 1, [1], (0, 1, 1), id="an uncorrectable ECC error kills"),
        pytest.param("nvlink-down", 1, [1], (0, 0, 0), id="an NVLink down kills"),
        pytest.param("nic-down", None, [1, 2], None, id="a NIC down kills the whole node's work"),
        pytest.param("ecc-sbe-storm", 1, [], (0, 0, 60), id="retired pages at the limit"),
        pytest.param("xid-92", 1, [], (100, 0, 0), id="a high corrected-error rate"),
    ],
)
def test_the_catalogues_hardware_faults_can_be_drilled_too(
    code: str, gpu_index: int | None, killed: list[int], counters: tuple | None
) -> None:
    async def scenario() -> None:
        backend, events = make_backend()
        await backend.start(Assignment(1, (1,)))
        await backend.start(Assignment(2, (2,)))
        backend.inject_fault(code, gpu_index, {})
        [fault] = kinds(events, "fault")
        assert (fault["code"], fault["gpu_index"], fault["xid"]) == (
            code,
            gpu_index,
            lookup(code).xid,
        )
        assert fault["message"].endswith("(simulated)")
        await asyncio.sleep(0.02)
        ended = [wid for wid in (1, 2) if backend.telemetry()[wid].util < 1]
        assert ended == killed
        if counters is not None:
            sample = backend.telemetry()[1]
            assert (sample.ecc_sbe, sample.ecc_dbe, sample.retired_pages) == counters

    asyncio.run(scenario())


def test_a_hang_stops_the_steps_without_ending_the_work() -> None:
    async def scenario() -> None:
        backend, events = make_backend(speed=1000.0)
        env = {"WANKA_CHECKPOINT_INTERVAL_S": "10"}
        await backend.start(Assignment(1, (0,), env=env, simulated_duration_s=200.0))
        await asyncio.sleep(0.05)
        drill = backend.inject_fault("hang", None, {"duration_s": 0.3})
        assert drill.detail == "steps stop for 0.3 s" and kinds(events, "fault") == []
        stuck, saves = backend.step(1), len(kinds(events, "checkpoint_saved"))
        await asyncio.sleep(0.2)
        assert backend.step(1) == stuck and len(kinds(events, "checkpoint_saved")) == saves
        assert (await backend.wait(1)).exit_code == 0  # the drill ends and the run finishes

    asyncio.run(scenario())


def test_a_straggler_is_a_node_twice_as_slow_unless_told() -> None:
    async def scenario() -> None:
        backend, _ = make_backend()
        assert backend.inject_fault("straggler", None, {}).detail == "steps take 2 times longer"

    asyncio.run(scenario())


def test_gpus_without_simulated_workloads_cannot_slow_down() -> None:
    gpus = SimulatedGpus("node-a", gpus=2)
    with pytest.raises(FaultRefused, match="needs the simulated backend"):
        gpus.inject_fault("hang", None, {})


def test_a_workload_on_half_its_gpus_runs_at_half_its_pace() -> None:
    async def scenario() -> None:
        backend, _ = make_backend(speed=100.0)
        await backend.start(Assignment(1, (0,), simulated_duration_s=10.0))  # 0.1 s
        await backend.start(Assignment(2, (1,), simulated_duration_s=10.0, simulated_speed=0.5))
        await asyncio.sleep(0.05)
        assert 0.3 < backend.step(2) / backend.step(1) < 0.7
        assert (await backend.wait(1)).exit_code == 0
        assert backend.step(2) < 10  # still going
        assert (await backend.wait(2)).exit_code == 0

    asyncio.run(scenario())


def test_a_restart_clears_a_hang() -> None:
    """A hang stops the processes it caught (a stuck collective); the job started again steps."""

    async def scenario() -> None:
        backend, _ = make_backend(speed=100.0)
        await backend.start(Assignment(1, (0,), simulated_duration_s=None))
        backend.inject_fault("hang", None, {})
        stuck = backend.step(1)
        await asyncio.sleep(0.05)
        assert backend.step(1) == stuck
        await backend.stop(1)
        await backend.wait(1)
        await backend.start(Assignment(1, (0,), simulated_duration_s=None, attempt=1))
        await asyncio.sleep(0.05)
        assert backend.step(1) > 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("model", "memory_mb", "mig", "profiles"),
    [
        pytest.param("H200", 143771, True, ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"],
                     id="an H200 with mig reports each GPU sliced"),
        pytest.param("A100-80GB", 81920, True, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
                     id="so does an A100"),
        pytest.param("H20", 98304, True, None, id="an H20 has no MIG to report"),
        pytest.param("H200", 143771, False, None, id="without mig no GPU reports MIG"),
    ],
)  # fmt: skip
def test_simulated_gpus_report_mig_when_asked_and_their_model_has_it(
    model: str, memory_mb: int, mig: bool, profiles: list[str] | None
) -> None:
    gpus = SimulatedGpus("node-m", model, gpus=2, memory_mb=memory_mb, mig=mig)
    idle, busy = gpus.telemetry(busy={1})
    if profiles is None:
        assert idle.mig is None and busy.mig is None
        return
    assert [d.profile for d in idle.mig.devices] == profiles
    assert (idle.mig.enabled, idle.mig.pending) == (True, True)
    assert {d.in_use for d in idle.mig.devices} == {False}
    assert {d.in_use for d in busy.mig.devices} == {True}  # a workload holds its GPU whole
    assert len({d.uuid for d in idle.mig.devices + busy.mig.devices}) == 8
    assert gpus.telemetry(busy=())[0].mig.devices[0].uuid == idle.mig.devices[0].uuid  # stable
