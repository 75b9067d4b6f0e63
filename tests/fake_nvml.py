"""A fake of the `pynvml` module, for tests of the NVML machine: this machine has no GPU.

`FakeNvml` is a module object with the functions `NvmlMachine` calls, answering as an 8 x H200
node with driver 550.90.07 (CUDA 12.4) answers: names, UUIDs, memory in bytes, power in
milliwatts, 18 NVLinks per GPU out of NVML_NVLINK_MAX_LINKS, row remapping instead of page
retirement, and errors as the NVMLError subclasses the real module generates. XID events come
from a queue the test fills, through `nvmlEventSetWait_v2`, which times out as the real one
does.

MIG follows NVML's documentation (no MIG GPU recorded here): MIG mode as [current, pending],
NotSupported on a GPU without MIG, up to seven MIG device indices of which a free one answers
NotFound, no utilization of a GPU in MIG mode, processes listed per MIG device handle. Setting
MIG follows it too: `nvmlDeviceSetMigMode` takes effect at once on an idle GPU (as on Hopper;
InUse while a process computes there); the H200's GPU instance profiles (ids, slices, memory)
and the placements NVIDIA documents for them; `nvmlDeviceCreateGpuInstance` at the lowest
free placement, InsufficientResources where none is free; a compute instance makes the MIG
device; destroying one in use, or a GPU instance that still has a compute instance, is InUse.
Each change is appended to `changes` (and, where `WANKA_FAKE_NVML_LOG` names a file, written
there: a process started with `tests/fake_pynvml` first on its path gets this fake as its
`pynvml`). The MIG devices' memory sizes are chosen within the H200's profile sizes, not
recorded.
"""

from __future__ import annotations

import os
import queue
import types
from typing import Any

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
            10: "Timeout", 12: "NVML Shared Library Not Found", 15: "GPU is lost",
            19: "In use by another client", 23: "Insufficient Resources"}  # fmt: skip

# The H200's GPU instance profiles, by NVML's profile number (NVML_GPU_INSTANCE_PROFILE_*):
# (profile id, slices, memory in MiB, memory slots of eight, the slots it may start at).
H200_PROFILES = {
    0: (19, 1, 17_664, 1, (0, 1, 2, 3, 4, 5, 6)),  # 1g.18gb
    1: (14, 2, 35_456, 2, (0, 2, 4)),  # 2g.35gb
    2: (9, 3, 70_912, 4, (0, 4)),  # 3g.71gb
    3: (5, 4, 70_912, 4, (0,)),  # 4g.71gb
    4: (0, 7, 143_104, 8, (0,)),  # 7g.141gb
    9: (15, 1, 35_456, 2, (0, 2, 4, 6)),  # 1g.35gb (NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
}
# Compute instance profiles (NVML_COMPUTE_INSTANCE_PROFILE_*) by number: their slices.
COMPUTE_PROFILES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}


class Handle:
    """A device handle: only the fake looks inside."""

    def __init__(self, index: int) -> None:
        self.index = index


class MigHandle(Handle):
    """A MIG device's handle: its GPU's index and its MIG device index."""

    def __init__(self, index: int, slot: int) -> None:
        super().__init__(index)
        self.slot = slot


class GpuInstance:
    """A GPU instance: its GPU, id, profile, slices, memory slots from `start`, and its compute
    instances (id -> the MIG device index each makes)."""

    def __init__(
        self, gpu: int, instance_id: int, profile_id: int, slices: int, slots: int, start: int
    ) -> None:
        self.gpu, self.id, self.profile_id = gpu, instance_id, profile_id
        self.slices, self.slots, self.start = slices, slots, start
        self.compute: dict[int, int] = {}

    @property
    def name(self) -> str:
        return f"{self.slices}g.{(self.slots * 141 + 4) // 8}gb"


class ComputeInstance:
    """A compute instance: its GPU instance and its id there."""

    def __init__(self, instance: GpuInstance, compute_id: int) -> None:
        self.instance, self.id = instance, compute_id


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
    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0

    NVMLError = NVMLError
    NVMLError_InvalidArgument = _error("NVMLError_InvalidArgument", 2)
    NVMLError_NotSupported = _error("NVMLError_NotSupported", 3)
    NVMLError_NotFound = _error("NVMLError_NotFound", 6)
    NVMLError_DriverNotLoaded = _error("NVMLError_DriverNotLoaded", 9)
    NVMLError_Timeout = _error("NVMLError_Timeout", 10)
    NVMLError_LibraryNotFound = _error("NVMLError_LibraryNotFound", 12)
    NVMLError_GpuIsLost = _error("NVMLError_GpuIsLost", 15)
    NVMLError_InUse = _error("NVMLError_InUse", 19)
    NVMLError_InsufficientResources = _error("NVMLError_InsufficientResources", 23)

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
        self.gpu_instances: dict[int, dict[int, GpuInstance]] = {}  # GPU -> instance id -> it
        self.changes: list[str] = []  # what set MIG changed, in order

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

    # -- setting MIG ---------------------------------------------------------------------------

    def add_mig_device(
        self, gpu: int, index: int, uuid: str, number: int, start: int, pids: list[int]
    ) -> None:
        """A MIG device there already: a GPU instance of profile `number` at memory slot
        `start`, with one compute instance spanning it, as MIG device `index`."""
        profile_id, slices, memory_mb, slots, _ = H200_PROFILES[number]
        instances = self.gpu_instances.setdefault(gpu, {})
        instance = GpuInstance(gpu, len(instances) + 1, profile_id, slices, slots, start)
        instance.compute[0] = index
        instances[instance.id] = instance
        self.mig_devices.setdefault(gpu, {})[index] = (uuid, slices, slices, memory_mb, pids)

    def nvmlDeviceSetMigMode(self, handle: Handle, mode: int) -> int:
        self._check(handle)
        if not self.has_mig:
            raise self.NVMLError_NotSupported()
        if self.processes.get(handle.index):
            raise self.NVMLError_InUse()
        if not mode and self.gpu_instances.get(handle.index):
            raise self.NVMLError_InUse()  # MIG's GPU instances are destroyed before it goes off
        self.mig_mode[handle.index] = (mode, mode)  # at once on an idle Hopper GPU
        self._changed(f"GPU {handle.index}: MIG mode {'on' if mode else 'off'}")
        return 0  # NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Handle, number: int) -> Any:
        if not self.mig_mode.get(handle.index, (0, 0))[0]:
            raise self.NVMLError_NotSupported()
        if not 0 <= number < self.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise self.NVMLError_InvalidArgument()
        if number not in H200_PROFILES:
            raise self.NVMLError_NotSupported()
        profile_id, slices, memory_mb, _, starts = H200_PROFILES[number]
        return types.SimpleNamespace(
            id=profile_id, sliceCount=slices, memorySizeMB=memory_mb, instanceCount=len(starts)
        )

    def nvmlDeviceCreateGpuInstance(self, handle: Handle, profile_id: int) -> GpuInstance:
        [(_, slices, _, slots, starts)] = [p for p in H200_PROFILES.values() if p[0] == profile_id]
        instances = self.gpu_instances.setdefault(handle.index, {})
        used = sum(((1 << i.slots) - 1) << i.start for i in instances.values())
        compute = sum(i.slices for i in instances.values())
        for start in starts:
            if not used & (((1 << slots) - 1) << start) and compute + slices <= 7:
                instance = GpuInstance(
                    handle.index, max(instances, default=0) + 1, profile_id, slices, slots, start
                )
                instances[instance.id] = instance
                self._changed(f"GPU {handle.index}: GPU instance {instance.name} at slot {start}")
                return instance
        raise self.NVMLError_InsufficientResources()

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, instance: GpuInstance, number: int, engines: int
    ) -> Any:
        assert engines == self.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        if not 0 <= number < self.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
            raise self.NVMLError_InvalidArgument()
        if COMPUTE_PROFILES.get(number, 99) > instance.slices:
            raise self.NVMLError_NotSupported()
        return types.SimpleNamespace(id=number, sliceCount=COMPUTE_PROFILES[number])

    def nvmlGpuInstanceCreateComputeInstance(self, instance: GpuInstance, profile_id: int) -> Any:
        if COMPUTE_PROFILES[profile_id] != instance.slices or instance.compute:
            raise self.NVMLError_InsufficientResources()  # one spanning instance per GPU one
        devices = self.mig_devices.setdefault(instance.gpu, {})
        index = min(set(range(7)) - set(devices))
        uuid = f"MIG-5a1e{instance.gpu:04x}-{instance.id:04x}-4c6f-9e2a-0c1f3a52{index:04x}"
        memory_mb = next(p[2] for p in H200_PROFILES.values() if p[0] == instance.profile_id)
        devices[index] = (uuid, instance.slices, instance.slices, memory_mb, [])
        instance.compute[0] = index
        self._changed(f"GPU {instance.gpu}: MIG device {instance.name} {uuid}")
        return ComputeInstance(instance, 0)

    def nvmlGpuInstanceGetInfo(self, instance: GpuInstance) -> Any:
        return types.SimpleNamespace(id=instance.id, profileId=instance.profile_id)

    def nvmlComputeInstanceGetInfo(self, compute: ComputeInstance) -> Any:
        return types.SimpleNamespace(id=compute.id, gpuInstance=compute.instance)

    def nvmlDeviceGetGpuInstanceId(self, handle: MigHandle) -> int:
        return self._instance_of(handle).id

    def nvmlDeviceGetComputeInstanceId(self, handle: MigHandle) -> int:
        instance = self._instance_of(handle)
        return next(c for c, index in instance.compute.items() if index == handle.slot)

    def nvmlDeviceGetGpuInstanceById(self, handle: Handle, instance_id: int) -> GpuInstance:
        try:
            return self.gpu_instances[handle.index][instance_id]
        except KeyError:
            raise self.NVMLError_NotFound() from None

    def nvmlGpuInstanceGetComputeInstanceById(
        self, instance: GpuInstance, compute_id: int
    ) -> ComputeInstance:
        if compute_id not in instance.compute:
            raise self.NVMLError_NotFound()
        return ComputeInstance(instance, compute_id)

    def nvmlComputeInstanceDestroy(self, compute: ComputeInstance) -> int:
        instance = compute.instance
        index = instance.compute[compute.id]
        if self.mig_devices[instance.gpu][index][4]:
            raise self.NVMLError_InUse()
        del self.mig_devices[instance.gpu][index], instance.compute[compute.id]
        self._changed(f"GPU {instance.gpu}: MIG device {instance.name} destroyed")
        return 0

    def nvmlGpuInstanceDestroy(self, instance: GpuInstance) -> int:
        if instance.compute:
            raise self.NVMLError_InUse()
        del self.gpu_instances[instance.gpu][instance.id]
        self._changed(f"GPU {instance.gpu}: GPU instance {instance.name} destroyed")
        return 0

    def _instance_of(self, handle: MigHandle) -> GpuInstance:
        for instance in self.gpu_instances.get(handle.index, {}).values():
            if handle.slot in instance.compute.values():
                return instance
        raise self.NVMLError_NotFound()

    def _changed(self, change: str) -> None:
        self.changes.append(change)
        if log := os.environ.get("WANKA_FAKE_NVML_LOG"):
            with open(log, "a") as out:
                out.write(change + "\n")

    def _check(self, handle: Handle) -> None:
        if handle.index in self.lost:
            raise self.NVMLError_GpuIsLost()
