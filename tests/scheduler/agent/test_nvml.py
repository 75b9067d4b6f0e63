"""The NVML machine against a recorded fake of the `pynvml` module.

The fake is a fake because this machine has no GPU: `FakeNvml` is a module object with the
functions `NvmlMachine` calls, answering as an 8 x H200 node with driver 550.90.07 (CUDA 12.4)
answers: names, UUIDs, memory in bytes, power in milliwatts, 18 NVLinks per GPU out of
NVML_NVLINK_MAX_LINKS, row remapping instead of page retirement, and errors as the NVMLError
subclasses the real module generates. XID events come from a queue the test fills, through
`nvmlEventSetWait_v2`, which times out as the real one does.

MIG follows NVML's documentation (no MIG GPU recorded here): MIG mode as [current, pending],
NotSupported on a GPU without MIG, up to seven MIG device indices of which a free one answers
NotFound, no utilization of a GPU in MIG mode, processes listed per MIG device handle. The MIG
devices' memory sizes are chosen within the H200's profile sizes, not recorded.
"""

from __future__ import annotations

import asyncio
import importlib.util
import queue
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from scheduler.agent.backends import (
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

GIB = 2**30
H200_MEMORY = 150_754_820_096  # bytes: 143,771 MiB, as nvidia-smi shows an H200
UUIDS = [f"GPU-5a1e{i:04x}-9c3e-4be2-8f4e-2c1d0b9a{i:04x}" for i in range(8)]


class NVMLError(Exception):
    """The fake's NVMLError: a code, and a subclass per code, as pynvml generates them."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _error(name: str, value: int) -> type[NVMLError]:
    return type(name, (NVMLError,), {"__init__": lambda self: NVMLError.__init__(self, value)})


MESSAGES = {2: "Invalid Argument", 3: "Not Supported", 6: "Not Found", 9: "Driver Not Loaded",
            10: "Timeout", 12: "NVML Shared Library Not Found", 15: "GPU is lost"}  # fmt: skip


class Handle:
    """A device handle: only the fake looks inside."""

    def __init__(self, index: int) -> None:
        self.index = index


class MigHandle(Handle):
    """A MIG device's handle: its GPU's index and its MIG device index."""

    def __init__(self, index: int, slot: int) -> None:
        super().__init__(index)
        self.slot = slot


# A MIG device as the fake keeps it: UUID, GPU instance slices, compute instance slices,
# memory (MiB), the pids computing on it.
MigSpec = tuple[str, int, int, int, list[int]]


class FakeNvml(types.ModuleType):
    """What `NvmlMachine` calls of pynvml, recorded from an 8 x H200 node."""

    NVML_TEMPERATURE_GPU = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_VOLATILE_ECC = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    nvmlEventTypeXidCriticalError = 0x8
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    NVMLError = NVMLError
    NVMLError_InvalidArgument = _error("NVMLError_InvalidArgument", 2)
    NVMLError_NotSupported = _error("NVMLError_NotSupported", 3)
    NVMLError_NotFound = _error("NVMLError_NotFound", 6)
    NVMLError_DriverNotLoaded = _error("NVMLError_DriverNotLoaded", 9)
    NVMLError_Timeout = _error("NVMLError_Timeout", 10)
    NVMLError_LibraryNotFound = _error("NVMLError_LibraryNotFound", 12)
    NVMLError_GpuIsLost = _error("NVMLError_GpuIsLost", 15)

    def __init__(self, gpus: int = 8, init_error: type[NVMLError] | None = None) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.init_error = init_error
        self.events: queue.Queue[tuple[int, int]] = queue.Queue()  # (gpu index, xid)
        self.registered: list[int] = []
        self.calls: list[str] = []
        self.dbe = [0] * gpus
        self.remapped = [(0, 0)] * gpus
        self.lost: set[int] = set()
        self.processes: dict[int, list[int]] = {}  # GPU index -> pids computing there
        self.links_down = {(2, 5)}  # (gpu, link): one NVLink down on GPU 2
        self.has_mig = True  # False: NotSupported, as on a GPU before Ampere
        self.mig_mode: dict[int, tuple[int, int]] = {}  # GPU index -> (current, pending); off
        self.mig_devices: dict[int, dict[int, MigSpec]] = {}  # GPU -> MIG device index -> spec

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        return Handle(index)

    def nvmlDeviceGetIndex(self, handle: Handle) -> int:
        return handle.index

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: Handle) -> bytes:
        if isinstance(handle, MigHandle):
            return self.mig_devices[handle.index][handle.slot][0].encode()
        return UUIDS[handle.index].encode()  # older releases answer bytes

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        self._check(handle)
        if not self.has_mig:
            raise self.NVMLError_NotSupported()
        return list(self.mig_mode.get(handle.index, (0, 0)))

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        return 7 if self.mig_mode.get(handle.index, (0, 0))[0] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> MigHandle:
        if index >= self.nvmlDeviceGetMaxMigDeviceCount(handle):
            raise self.NVMLError_InvalidArgument()
        if index not in self.mig_devices.get(handle.index, {}):
            raise self.NVMLError_NotFound()
        return MigHandle(handle.index, index)

    def nvmlDeviceGetAttributes(self, handle: MigHandle) -> Any:
        _uuid, gpu_slices, compute_slices, memory_mb, _pids = self.mig_devices[handle.index][
            handle.slot
        ]
        return types.SimpleNamespace(
            gpuInstanceSliceCount=gpu_slices,
            computeInstanceSliceCount=compute_slices,
            memorySizeMB=memory_mb,
            multiprocessorCount=16 * compute_slices,
        )

    def nvmlDeviceGetMemoryInfo(self, handle: Handle) -> Any:
        self._check(handle)
        used = (100 + 5 * handle.index) * GIB if handle.index < 4 else 600 * 2**20
        return types.SimpleNamespace(total=H200_MEMORY, used=used, free=H200_MEMORY - used)

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> Any:
        self._check(handle)
        if self.mig_mode.get(handle.index, (0, 0))[0]:
            raise self.NVMLError_NotSupported()
        return types.SimpleNamespace(gpu=97 if handle.index < 4 else 0, memory=40)

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 71 if handle.index < 4 else 34

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        return 612_345 if handle.index < 4 else 74_020  # milliwatts

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, error_type: int, counter: int) -> int:
        assert counter == self.NVML_VOLATILE_ECC
        return self.dbe[handle.index] if error_type else 2 * handle.index

    def nvmlDeviceGetRetiredPages(self, handle: Handle, cause: int) -> list[int]:
        raise self.NVMLError_NotSupported()  # Hopper remaps rows instead

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        corrected, uncorrected = self.remapped[handle.index]
        return corrected, uncorrected, 0, 0

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        if link >= 18:
            raise self.NVMLError_InvalidArgument()
        return 0 if (handle.index, link) in self.links_down else 1

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: Handle, types_: int, event_set: str) -> None:
        assert types_ == self.nvmlEventTypeXidCriticalError and event_set == "event-set"
        self.registered.append(handle.index)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        try:
            index, xid = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise self.NVMLError_Timeout() from None
        return types.SimpleNamespace(
            device=Handle(index), eventType=self.nvmlEventTypeXidCriticalError, eventData=xid,
            gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF,
        )  # fmt: skip

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.calls.append("event set freed")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Any]:
        self._check(handle)
        if isinstance(handle, MigHandle):
            pids = self.mig_devices[handle.index][handle.slot][4]
        else:
            pids = self.processes.get(handle.index, [])
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in pids]

    def _check(self, handle: Handle) -> None:
        if handle.index in self.lost:
            raise self.NVMLError_GpuIsLost()


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
    nvml.mig_devices = {
        0: {
            0: ("MIG-0c1f3a52-3g", 3, 3, 70_912, [4242]),
            1: ("MIG-0c1f3a52-2g", 2, 2, 35_456, []),
            3: ("MIG-0c1f3a52-1a", 1, 1, 17_664, []),
            4: ("MIG-0c1f3a52-1b", 1, 1, 17_664, []),
        }
    }
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
