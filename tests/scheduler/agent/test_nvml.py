"""The NVML machine against a fake of the `pynvml` module (`tests.fake_nvml`), which stands in
for NVML because this machine has no GPU: the fake answers as NVML's documentation says."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler.agent.backends import (
    Assignment,
    BackendEvent,
    FaultRefused,
    MigDevice,
    MigLayout,
    NodeFault,
    TopologyLabels,
    mig_profile,
)
from scheduler.agent.nvml import NvmlMachine, NvmlUnavailable, load_pynvml
from scheduler.agent.processes import ProcessBackend
from scheduler.agent.protocol import AGENT, ProtocolError, check_mig, encode, parse
from tests.fake_nvml import UUIDS, FakeNvml

LABELS = TopologyLabels("dc-east", "pod-3", "leaf-12")


def test_the_inventory_reads_like_the_node() -> None:
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=FakeNvml())
    node = machine.inventory()
    assert (node.hostname, node.gpu_model) == ("gpu-node-17", "NVIDIA H200")
    assert [g.uuid for g in node.gpus] == UUIDS
    assert {g.memory_mb for g in node.gpus} == {143_771}
    facts = node.facts
    assert (facts.driver_version, facts.cuda_version) == ("550.90.07", "12.4")
    assert (facts.nvlink_up, facts.nvlink_total) == (8 * 18 - 1, 8 * 18)
    assert facts.labels == LABELS and facts.cpu_count > 0
    hello = encode("hello", agent_version="x", generation=0, node=node.to_message(), workloads=[])
    assert parse(hello, AGENT)["node"]["facts"]["nvlink"] == {"up": 143, "total": 144}
    machine.close()


def test_telemetry_converts_units_and_reads_the_ecc_counters() -> None:
    nvml = FakeNvml()
    nvml.remapped[1] = (3, 1)
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    samples = machine.telemetry(busy=())
    assert len(samples) == 8
    first, second, idle = samples[0], samples[1], samples[6]
    assert (first.util, first.memory_used_mb, first.temperature_c, first.power_w) == (
        97.0, 102_400, 71.0, 612.3,
    )  # fmt: skip
    assert (idle.util, idle.memory_used_mb, idle.power_w) == (0.0, 600, 74.0)
    assert (second.ecc_sbe, second.ecc_dbe, second.retired_pages) == (2, 0, 4)
    beat = encode("heartbeat", generation=0, gpus=[s.to_message() for s in samples], workloads=[])
    assert parse(beat, AGENT)["gpus"][1]["retired_pages"] == 4
    machine.close()


def test_a_gpu_that_cannot_be_read_is_left_out_of_the_heartbeat() -> None:
    nvml = FakeNvml()
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    nvml.lost.add(3)
    assert [s.index for s in machine.telemetry(())] == [0, 1, 2, 4, 5, 6, 7]
    assert machine.lost(3) and not machine.lost(2)  # a start there is the node's fault
    machine.close()


def test_the_health_check_runs_a_kernel_on_each_gpu_and_names_the_one_that_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel runs in a process of its own per GPU, which sees only that GPU. (No CUDA
    here: a script that fails where CUDA_VISIBLE_DEVICES is 5 stands in for the kernel.)"""
    nvml = FakeNvml()
    nvml.processes = {1: [4242]}
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    assert machine.compute_processes() == {i: [4242] if i == 1 else [] for i in range(8)}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    fails_on_5 = (
        "import os, sys; sys.exit('CUDA error' if os.environ['CUDA_VISIBLE_DEVICES'] == '5' else 0)"
    )
    monkeypatch.setattr("scheduler.agent.nvml.KERNEL_CHECK", fails_on_5)
    with pytest.raises(
        RuntimeError, match="GPU 5 failed a short allocation and kernel: CUDA error"
    ):
        machine.check()
    monkeypatch.setattr("scheduler.agent.nvml.KERNEL_CHECK", "pass")
    assert machine.check() == "8 GPUs answer NVML and ran a short kernel"
    nvml.lost.add(6)
    with pytest.raises(NodeFault, match="GPU 6 has fallen off the bus"):
        machine.check()
    machine.close()


def test_an_xid_79_event_is_reported_as_a_fault_on_the_event_loop() -> None:
    async def scenario() -> None:
        nvml = FakeNvml()
        machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
        loop = asyncio.get_running_loop()
        arrived: asyncio.Queue[tuple[BackendEvent, bool]] = asyncio.Queue()
        machine.subscribe(lambda event: arrived.put_nowait((event, loop.is_running())))
        nvml.events.put((3, 79))
        async with asyncio.timeout(5):
            event, on_loop = await arrived.get()
        assert on_loop
        assert event.kind == "fault" and event.workload_id is None
        assert dict(event.detail) == {
            "code": "xid-79",
            "xid": 79,
            "gpu_index": 3,
            "message": "XID 79 on GPU 3: GPU fell off the bus",
        }
        message = encode("event", kind="fault", workload_id=None, exit_code=None,
                         detail=dict(event.detail))  # fmt: skip
        assert parse(message, AGENT)["detail"]["code"] == "xid-79"
        nvml.events.put((0, 9999))  # an XID the catalogue does not know
        async with asyncio.timeout(5):
            event, _ = await arrived.get()
        assert event.detail["code"] == "xid-9999"
        assert nvml.registered == list(range(8))
        await asyncio.to_thread(machine.close)
        assert nvml.calls[-2:] == ["event set freed", "shutdown"]

    asyncio.run(scenario())


def test_new_uncorrectable_ecc_errors_are_reported_once_each() -> None:
    async def scenario() -> None:
        nvml = FakeNvml()
        machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
        faults: list[BackendEvent] = []
        machine.subscribe(faults.append)
        machine.telemetry(())
        assert faults == []
        nvml.dbe[5] = 1
        machine.telemetry(())
        machine.telemetry(())
        assert [(f.detail["code"], f.detail["gpu_index"]) for f in faults] == [("ecc-dbe", 5)]
        nvml.remapped[2] = (60, 0)  # the site's retired-pages limit
        machine.telemetry(())
        machine.telemetry(())
        assert [f.detail["code"] for f in faults] == ["ecc-dbe", "ecc-sbe-storm"]
        await asyncio.to_thread(machine.close)

    asyncio.run(scenario())


def test_a_fault_drill_is_refused_on_real_gpus(tmp_path: Path) -> None:
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=FakeNvml())
    backend = ProcessBackend(machine, tmp_path)
    with pytest.raises(FaultRefused, match="real GPUs; fault drills need the simulated backend"):
        backend.inject_fault("xid-79", 0, {})
    backend.close()


@pytest.mark.parametrize(
    ("nvml", "reason"),
    [
        pytest.param(
            FakeNvml(init_error=FakeNvml.NVMLError_LibraryNotFound),
            "NVML cannot start: NVML Shared Library Not Found (no NVIDIA driver here",
            id="no driver library",
        ),
        pytest.param(
            FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded),
            "Driver Not Loaded (the NVIDIA kernel driver is not loaded)",
            id="the kernel driver not loaded",
        ),
        pytest.param(FakeNvml(gpus=0), "NVML found no GPU on this machine", id="no GPU"),
    ],
)
def test_without_nvml_the_machine_refuses_to_start_and_says_why(
    nvml: FakeNvml, reason: str
) -> None:
    with pytest.raises(NvmlUnavailable, match=reason.replace("(", r"\(").replace(")", r"\)")):
        NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    if nvml.gpus == 0:
        assert nvml.calls == ["init", "shutdown"]  # started, found nothing, let go


def test_without_the_package_the_refusal_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if not installed: import fails
    with pytest.raises(NvmlUnavailable, match=r"nvidia-ml-py .* pip install 'wanka\[agent\]'"):
        load_pynvml()


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py missing")
def test_the_real_module_on_a_machine_without_a_gpu_refuses() -> None:
    """Runs the real pynvml: on a machine with an NVIDIA GPU it would find one instead."""
    try:
        machine = NvmlMachine("this-host", LABELS)
    except NvmlUnavailable as exc:
        assert "NVML" in str(exc)
    else:
        assert machine.inventory().gpus  # a GPU machine: NVML works, nothing to refuse
        machine.close()


def sliced_h200(nvml: FakeNvml) -> FakeNvml:
    """GPU 0 in MIG mode as 3g.71gb (a job on it), 2g.35gb and two 1g.18gb, MIG device index 2
    free; GPU 1 set to MIG at its next reset; GPU 2 in MIG mode, set to leave it, unsliced."""
    nvml.mig_mode = {0: (1, 1), 1: (0, 1), 2: (1, 0)}
    nvml.add_mig_device(0, 0, "MIG-0c1f3a52-3g", 2, 4, [4242])
    nvml.add_mig_device(0, 1, "MIG-0c1f3a52-2g", 1, 0, [])
    nvml.add_mig_device(0, 3, "MIG-0c1f3a52-1a", 0, 2, [])
    nvml.add_mig_device(0, 4, "MIG-0c1f3a52-1b", 0, 3, [])
    return nvml


def test_the_mig_layout_is_read_with_each_gpus_telemetry() -> None:
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=sliced_h200(FakeNvml()))
    samples = machine.telemetry(())
    assert samples[0].mig == MigLayout(
        enabled=True,
        pending=True,
        devices=(
            MigDevice("MIG-0c1f3a52-3g", "3g.71gb", in_use=True),
            MigDevice("MIG-0c1f3a52-2g", "2g.35gb", in_use=False),
            MigDevice("MIG-0c1f3a52-1a", "1g.18gb", in_use=False),
            MigDevice("MIG-0c1f3a52-1b", "1g.18gb", in_use=False),
        ),
    )
    assert samples[0].util == 0.0  # NVML has none for a GPU in MIG mode
    assert samples[1].mig == MigLayout(enabled=False, pending=True)
    assert samples[2].mig == MigLayout(enabled=True, pending=False)
    assert [s.mig for s in samples[3:]] == [None] * 5 and samples[3].util == 97.0
    beat = encode("heartbeat", generation=0, gpus=[s.to_message() for s in samples], workloads=[])
    gpus = parse(beat, AGENT)["gpus"]
    check_mig(gpus[0]["mig"], "heartbeat.gpus[0].mig")
    assert [("mig" in gpu) for gpu in gpus] == [True] * 3 + [False] * 5
    machine.close()


def test_a_gpu_without_mig_reports_none() -> None:
    """A GPU before Ampere answers NotSupported: no MIG, and a heartbeat as it was."""
    nvml = FakeNvml()
    nvml.has_mig = False
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    samples = machine.telemetry(())
    assert {s.mig for s in samples} == {None}
    assert not any("mig" in s.to_message() for s in samples)
    machine.close()


def test_a_gpu_in_mig_mode_that_falls_off_the_bus_is_left_out() -> None:
    nvml = sliced_h200(FakeNvml())
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    nvml.lost.add(0)
    samples = machine.telemetry(())
    assert [s.index for s in samples] == list(range(1, 8))
    assert samples[0].mig == MigLayout(enabled=False, pending=True)
    machine.close()


@pytest.mark.parametrize(
    ("slices", "memory_mb", "gpu_memory_mb", "profile"),
    [
        pytest.param((1, 1), 4_864, 40_536, "1g.5gb", id="the smallest slice of an A100 40GB"),
        pytest.param((7, 7), 40_192, 40_536, "7g.40gb", id="a whole A100 40GB: 39.25 GiB is 40gb"),
        pytest.param((1, 1), 9_856, 81_559, "1g.10gb", id="an H100's smallest slice"),
        pytest.param((7, 7), 80_896, 81_559, "7g.80gb", id="a whole H100: 79 GiB is 80gb"),
        pytest.param((4, 4), 70_912, 143_771, "4g.71gb", id="half an H200 rounds half up"),
        pytest.param((1, 3), 40_192, 81_559, "1c.3g.40gb", id="one compute slice of a 3g"),
    ],
)
def test_a_mig_profile_is_named_as_nvidia_names_it(
    slices: tuple[int, int], memory_mb: int, gpu_memory_mb: int, profile: str
) -> None:
    compute_slices, gpu_slices = slices
    assert mig_profile(gpu_slices, compute_slices, memory_mb, gpu_memory_mb) == profile


@pytest.mark.parametrize(
    ("layout", "field"),
    [
        pytest.param({"enabled": "yes", "pending": True, "devices": []}, "mig.enabled", id="mode"),
        pytest.param({"enabled": True, "pending": True}, "mig.devices", id="no devices"),
        pytest.param(
            {
                "enabled": True,
                "pending": True,
                "devices": [{"uuid": "", "profile": "1g.10gb", "in_use": False}],
            },
            "mig.devices[0].uuid",
            id="a device without a UUID",
        ),  # fmt: skip
        pytest.param(
            {
                "enabled": True,
                "pending": True,
                "devices": [
                    {"uuid": f"MIG-{i}", "profile": "1g.10gb", "in_use": False} for i in range(8)
                ],
            },
            "mig.devices",
            id="more devices than a GPU has",
        ),  # fmt: skip
    ],
)
def test_a_malformed_mig_layout_is_refused(layout: dict[str, Any], field: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        check_mig(layout, "mig")
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("taken", "uuid"),
    [
        pytest.param(set(), "MIG-0c1f3a52-1a", id="the first idle one"),
        pytest.param({"MIG-0c1f3a52-1a"}, "MIG-0c1f3a52-1b", id="one no job of the agent holds"),
    ],
)
def test_an_idle_mig_device_of_the_profile_is_taken_as_it_is(taken: set, uuid: str) -> None:
    nvml = sliced_h200(FakeNvml())
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    assert machine.mig_instance(0, "1g.18gb", taken) == uuid
    assert nvml.changes == []
    machine.close()


def test_a_gpu_with_a_device_in_use_is_never_re_sliced() -> None:
    """GPU 0 is full (7 slices), its 3g.71gb computing: no 1g.18gb can be had there."""
    nvml = sliced_h200(FakeNvml())
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    taken = {"MIG-0c1f3a52-1a", "MIG-0c1f3a52-1b"}
    with pytest.raises(ValueError, match="GPU 0 has no room for a 1g.18gb MIG device beside"):
        machine.mig_instance(0, "1g.18gb", taken)
    assert nvml.changes == []
    machine.close()


def test_mig_is_turned_on_and_an_instance_created_on_a_gpu_without_it() -> None:
    nvml = FakeNvml()
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    uuid = machine.mig_instance(3, "3g.71gb", set())
    assert nvml.changes == [
        "GPU 3: MIG mode on",
        "GPU 3: GPU instance 3g.71gb at slot 0",
        f"GPU 3: MIG device 3g.71gb {uuid}",
    ]
    added = machine.mig_instance(3, "2g.35gb", {uuid})  # beside it, in the free slots
    assert nvml.changes[-2:] == [
        "GPU 3: GPU instance 2g.35gb at slot 4",
        f"GPU 3: MIG device 2g.35gb {added}",
    ]
    [sample] = [s for s in machine.telemetry(()) if s.index == 3]
    assert sample.mig == MigLayout(
        True, True, (MigDevice(uuid, "3g.71gb", False), MigDevice(added, "2g.35gb", False))
    )
    machine.close()


def test_an_idle_gpu_without_room_is_re_sliced() -> None:
    """A 7g.141gb no job holds gives way to a 1g.18gb: its compute and GPU instance are
    destroyed, then the new one is created."""
    nvml = FakeNvml()
    nvml.mig_mode = {5: (1, 1)}
    nvml.add_mig_device(5, 0, "MIG-whole", 4, 0, [])
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    uuid = machine.mig_instance(5, "1g.18gb", set())
    assert nvml.changes == [
        "GPU 5: MIG device 7g.141gb destroyed",
        "GPU 5: GPU instance 7g.141gb destroyed",
        "GPU 5: GPU instance 1g.18gb at slot 0",
        f"GPU 5: MIG device 1g.18gb {uuid}",
    ]
    machine.close()


def test_mig_is_turned_off_for_whole_gpu_work_where_no_device_is_in_use() -> None:
    """GPU 5's idle 7g.141gb is destroyed and MIG set off; GPU 0, its 3g.71gb computing, is
    refused and left as it is; GPU 3, MIG off already, and a GPU without MIG are left alone."""
    nvml = sliced_h200(FakeNvml())
    nvml.mig_mode[5] = (1, 1)
    nvml.add_mig_device(5, 0, "MIG-whole", 4, 0, [])
    machine = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    machine.mig_off(5)
    assert nvml.changes == [
        "GPU 5: MIG device 7g.141gb destroyed",
        "GPU 5: GPU instance 7g.141gb destroyed",
        "GPU 5: MIG mode off",
    ]
    assert [s.mig for s in machine.telemetry(()) if s.index == 5] == [None]
    with pytest.raises(ValueError, match="GPU 0 is in MIG mode and one of its MIG devices is in"):
        machine.mig_off(0)
    machine.mig_off(3)
    assert len(nvml.changes) == 3
    machine.close()
    nvml = FakeNvml()
    nvml.has_mig = False
    plain = NvmlMachine("gpu-node-17", LABELS, nvml=nvml)
    plain.mig_off(0)
    plain.close()


def test_a_whole_gpu_job_turns_mig_off_on_its_gpus(tmp_path: Path) -> None:
    """The processes backend starts a whole-GPU job on GPUs 2 and 5 (5 in MIG mode, idle):
    MIG goes off on GPU 5 first, and the job sees both GPUs."""
    nvml = FakeNvml()
    nvml.mig_mode = {5: (1, 1)}
    nvml.add_mig_device(5, 0, "MIG-whole", 4, 0, [])
    backend = ProcessBackend(NvmlMachine("gpu-node-17", LABELS, nvml=nvml), tmp_path)
    says = f"{sys.executable} -c \"import os; print(os.environ['CUDA_VISIBLE_DEVICES'])\""
    assignment = Assignment(workload_id=8, gpu_indices=(2, 5), command=says)

    async def run() -> str:
        await backend.start(assignment)
        await backend.wait(8)
        return "\n".join(backend.output(8, 0, 1000).lines)

    assert asyncio.run(run()).strip() == "2,5"
    assert nvml.changes[-1] == "GPU 5: MIG mode off" and nvml.mig_mode[5] == (0, 0)
    backend.close()


def test_a_mig_job_runs_on_its_mig_device(tmp_path: Path) -> None:
    """The processes backend gives a MIG job its MIG device's UUID in CUDA_VISIBLE_DEVICES."""
    nvml = FakeNvml()
    backend = ProcessBackend(NvmlMachine("gpu-node-17", LABELS, nvml=nvml), tmp_path)
    says = f"{sys.executable} -c \"import os; print(os.environ['CUDA_VISIBLE_DEVICES'])\""
    assignment = Assignment(workload_id=7, gpu_indices=(2,), command=says, mig="1g.18gb")

    async def run() -> str:
        await backend.start(assignment)
        await backend.wait(7)
        return "\n".join(backend.output(7, 0, 1000).lines)

    printed = asyncio.run(run()).strip()
    assert printed.startswith("MIG-") and printed in nvml.changes[-1]
    backend.close()
