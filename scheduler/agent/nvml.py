"""Real GPUs through NVML (`nvidia-ml-py`, imported as `pynvml`): the `NvmlMachine`.

- Inventory: each GPU's model, UUID and memory; the driver and CUDA versions; how many NVLinks
  are up out of those the GPUs have; host facts and topology labels (`scheduler.agent.host`).
- Telemetry per GPU: utilisation, memory used, temperature, power, the volatile ECC counters,
  and retired pages (or remapped rows, on GPUs such as the A100 and H100 that remap rows
  instead of retiring pages). A GPU that cannot be read (fallen off the bus) is left out.
- Faults: XID events through NVML's event API (`nvmlDeviceRegisterEvents` with
  `nvmlEventTypeXidCriticalError`, then `nvmlEventSetWait_v2`), waited for on a thread of their
  own so the event loop never blocks, classified with `scheduler.faults.for_xid`. New
  uncorrectable ECC errors, and a retired-pages count reaching the site limit, are reported too
  (`scheduler.faults.ecc_fault`).
- MIG, per GPU and with its telemetry: whether MIG mode is on now and after the next GPU reset
  (`nvmlDeviceGetMigMode`), and while it is on, each MIG device's UUID, profile (named from
  `nvmlDeviceGetAttributes`' slice counts and memory, `mig_profile`) and whether a process
  computes on it. A GPU without MIG answers NotSupported and reports none.
- MIG, set when a job of a MIG profile starts (`mig_instance`): an idle MIG device of the
  profile is taken as it is; else MIG mode is turned on where it is off
  (`nvmlDeviceSetMigMode`), and a GPU instance of the profile is created
  (`nvmlDeviceGetGpuInstanceProfileInfo`, `nvmlDeviceCreateGpuInstance`) with one compute
  instance spanning it (`nvmlGpuInstanceGetComputeInstanceProfileInfo`,
  `nvmlGpuInstanceCreateComputeInstance`); where the GPU has no room for it and none of its
  MIG devices is in use, the GPU is re-sliced: each device's compute and GPU instance destroyed
  (`nvmlComputeInstanceDestroy`, `nvmlGpuInstanceDestroy`), then the instance created.
- MIG, turned off when a whole-GPU job or a share starts on a GPU in MIG mode (`mig_off`): its
  devices, none in use, are destroyed and the mode set off.

Without NVML (the package not installed, no driver, no GPU) `NvmlMachine()` raises
`NvmlUnavailable` naming the cause; the agent refuses to start rather than pretend.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Collection, Mapping
from types import ModuleType
from typing import Any

from scheduler.agent.backends import (
    NO_LABELS,
    BackendEvent,
    EventListener,
    FaultDrill,
    FaultRefused,
    GpuInfo,
    GpuSample,
    MigDevice,
    MigLayout,
    NodeInventory,
    TopologyLabels,
    fault_detail,
    lost_gpu,
    mig_profile,
)
from scheduler.agent.host import host_facts
from scheduler.faults import ecc_fault, for_xid

logger = logging.getLogger(__name__)

# How long one wait for an XID event lasts: also how soon `close()` stops the thread.
EVENT_WAIT_MS = 500
# The health check's kernel: 256 MiB allocated and summed on the one visible GPU.
KERNEL_CHECK = (
    "import torch; x = torch.ones(1 << 26, device='cuda'); "
    "assert int(x.sum().item()) == 1 << 26; torch.cuda.synchronize()"
)
KERNEL_CHECK_TIMEOUT_S = 60
_MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine; the message says why."""


def load_pynvml() -> ModuleType:
    """Import `pynvml`, or raise NvmlUnavailable saying how to install it."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise NvmlUnavailable(
            "the NVML backend needs the nvidia-ml-py package (import name pynvml), which is not "
            "installed: pip install 'wanka[agent]'"
        ) from None


class NvmlMachine:
    """This machine's NVIDIA GPUs, read through NVML. Use `close()` when done."""

    def __init__(
        self,
        hostname: str,
        labels: TopologyLabels = NO_LABELS,
        nvml: ModuleType | None = None,
    ) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        _init(self._nvml)
        try:
            self._handles = _handles(self._nvml)
            self._inventory = self._read_inventory(hostname, labels)
        except Exception:
            self._nvml.nvmlShutdown()
            raise
        self._last_dbe: dict[int, int] = {}
        self._storm_reported: set[int] = set()
        self._listener: EventListener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def inventory(self) -> NodeInventory:
        """The GPUs, driver stack, NVLink state and host facts, as read at start."""
        return self._inventory

    def telemetry(self, busy: Collection[int]) -> list[GpuSample]:
        """One sample per GPU that answers; `busy` is ignored (the hardware knows)."""
        samples = []
        for index, handle in enumerate(self._handles):
            try:
                sample = self._sample(index, handle)
            except self._nvml.NVMLError as exc:
                logger.warning("GPU %s: cannot read telemetry: %s", index, exc)
                continue
            samples.append(sample)
            self._check_ecc(sample)
        return samples

    def subscribe(self, listener: EventListener) -> None:
        """Report XID and ECC faults to `listener`; starts the XID thread (from the loop)."""
        self._listener = listener
        self._loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._watch_xids, name="nvml-xid-events", daemon=True
            )
            self._thread.start()

    def lost(self, index: int) -> bool:
        """Whether GPU `index` has fallen off the bus: NVML answers that it is lost."""
        gone = getattr(self._nvml, "NVMLError_GpuIsLost", None)
        try:
            self._nvml.nvmlDeviceGetMemoryInfo(self._handles[index])
        except self._nvml.NVMLError as exc:
            return gone is not None and isinstance(exc, gone)
        return False

    def compute_processes(self) -> dict[int, list[int]]:
        """The pids NVML sees computing on each GPU that answers."""
        found = {}
        for index, handle in enumerate(self._handles):
            try:
                running = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self._nvml.NVMLError as exc:
                logger.warning("GPU %s: cannot list its processes: %s", index, exc)
                continue
            found[index] = [process.pid for process in running]
        return found

    def mig_instance(self, index: int, profile: str, taken: Collection[str]) -> str:
        """The UUID of a MIG device of `profile` on GPU `index` for a job to run on, none of
        `taken` (the devices this agent's jobs hold) and none a process computes on: an idle
        one, else one created, re-slicing the GPU where it has no room and all its devices are
        idle. ValueError saying why where none can be had."""
        nvml, handle = self._nvml, self._handles[index]
        try:
            self._mig_on(index, handle)
            devices = self._mig_devices(handle)
            for device in devices:
                if device.profile == profile and device.uuid not in taken and not device.in_use:
                    return device.uuid
            try:
                return self._create_mig(handle, profile)
            except nvml.NVMLError_InsufficientResources:
                if any(d.in_use or d.uuid in taken for d in devices):
                    raise ValueError(
                        f"GPU {index} has no room for a {profile} MIG device beside those in use"
                    ) from None
            self._destroy_mig(handle)
            return self._create_mig(handle, profile)
        except nvml.NVMLError as exc:
            raise ValueError(f"GPU {index}: cannot set up a {profile} MIG device: {exc}") from None

    def mig_off(self, index: int) -> None:
        """GPU `index` out of MIG mode: its MIG devices destroyed (none may be in use) and the
        mode set off (`nvmlDeviceSetMigMode`); nothing where it is off or NotSupported."""
        nvml, handle = self._nvml, self._handles[index]
        try:
            if nvml.nvmlDeviceGetMigMode(handle)[0] != nvml.NVML_DEVICE_MIG_ENABLE:
                return
        except nvml.NVMLError_NotSupported:
            return
        try:
            if any(device.in_use for device in self._mig_devices(handle)):
                raise ValueError(f"GPU {index} is in MIG mode and one of its MIG devices is in use")
            self._destroy_mig(handle)
            nvml.nvmlDeviceSetMigMode(handle, nvml.NVML_DEVICE_MIG_DISABLE)
            logger.info("GPU %s: MIG mode set off", index)
            if nvml.nvmlDeviceGetMigMode(handle)[0] != nvml.NVML_DEVICE_MIG_DISABLE:
                raise ValueError(f"GPU {index}: MIG mode is off only after a GPU reset")
        except nvml.NVMLError as exc:
            raise ValueError(f"GPU {index}: cannot turn MIG mode off: {exc}") from None

    def _mig_on(self, index: int, handle: Any) -> None:
        nvml, on = self._nvml, self._nvml.NVML_DEVICE_MIG_ENABLE
        if nvml.nvmlDeviceGetMigMode(handle)[0] == on:
            return
        nvml.nvmlDeviceSetMigMode(handle, on)
        logger.info("GPU %s: MIG mode set on", index)
        if nvml.nvmlDeviceGetMigMode(handle)[0] != on:
            raise ValueError(f"GPU {index}: MIG mode is on only after a GPU reset")

    def _create_mig(self, handle: Any, profile: str) -> str:
        """Create a GPU instance of `profile` and one compute instance spanning it; its UUID."""
        nvml = self._nvml
        info = self._gpu_instance_profile(handle, profile)
        instance = nvml.nvmlDeviceCreateGpuInstance(handle, info.id)
        for compute in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                found = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    instance, compute, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                continue
            if found.sliceCount == info.sliceCount:
                created = nvml.nvmlGpuInstanceCreateComputeInstance(instance, found.id)
                break
        else:
            nvml.nvmlGpuInstanceDestroy(instance)
            raise ValueError(f"no compute instance spans a {profile} GPU instance")
        wanted = (
            nvml.nvmlGpuInstanceGetInfo(instance).id,
            nvml.nvmlComputeInstanceGetInfo(created).id,
        )
        for device in self._mig_handles(handle):
            if self._instance_ids(device) == wanted:
                logger.info("MIG device %s created", profile)
                return _text(nvml.nvmlDeviceGetUUID(device))
        raise ValueError(f"the new {profile} MIG device is not listed")

    def _gpu_instance_profile(self, handle: Any, profile: str) -> Any:
        """NVML's GPU instance profile that nvidia-smi names `profile` on this GPU."""
        nvml = self._nvml
        gpu_memory_mb = _total_mb(nvml, handle)
        for number in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, number)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                continue
            slices = info.sliceCount
            if mig_profile(slices, slices, info.memorySizeMB, gpu_memory_mb) == profile:
                return info
        raise ValueError(f"this GPU has no MIG profile {profile}")

    def _destroy_mig(self, handle: Any) -> None:
        """Destroy each MIG device's compute and GPU instance: re-slicing an idle GPU."""
        nvml = self._nvml
        for gpu_instance_id, compute_instance_id in [
            self._instance_ids(device) for device in self._mig_handles(handle)
        ]:
            instance = nvml.nvmlDeviceGetGpuInstanceById(handle, gpu_instance_id)
            compute = nvml.nvmlGpuInstanceGetComputeInstanceById(instance, compute_instance_id)
            nvml.nvmlComputeInstanceDestroy(compute)
            nvml.nvmlGpuInstanceDestroy(instance)
        logger.info("MIG devices destroyed to re-slice the GPU")

    def _mig_handles(self, handle: Any) -> list[Any]:
        nvml, found = self._nvml, []
        for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                found.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index))
            except nvml.NVMLError_NotFound:
                continue
        return found

    def _instance_ids(self, device: Any) -> tuple[int, int]:
        nvml = self._nvml
        return nvml.nvmlDeviceGetGpuInstanceId(device), nvml.nvmlDeviceGetComputeInstanceId(device)

    def check(self) -> str:
        """Every GPU answers NVML, has no uncorrected ECC error pending, and, where PyTorch is
        installed, allocates memory and runs a kernel (`KERNEL_CHECK`, one process per GPU)."""
        for index, handle in enumerate(self._handles):
            if self.lost(index):
                raise lost_gpu(index)
            sample = self._sample(index, handle)
            if sample.ecc_dbe:
                raise RuntimeError(f"GPU {index} has {sample.ecc_dbe} uncorrected ECC errors")
        if importlib.util.find_spec("torch") is None:
            return f"{len(self._handles)} GPUs answer NVML (no kernel run: PyTorch is absent)"
        for index in range(len(self._handles)):
            env = {
                **os.environ,
                "CUDA_VISIBLE_DEVICES": str(index),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            }
            try:
                run = subprocess.run(
                    [sys.executable, "-c", KERNEL_CHECK],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=KERNEL_CHECK_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    f"GPU {index}: a short kernel did not finish in {KERNEL_CHECK_TIMEOUT_S} s"
                ) from None
            if run.returncode != 0:
                why = (run.stderr.strip().splitlines() or ["no output"])[-1][:300]
                raise RuntimeError(f"GPU {index} failed a short allocation and kernel: {why}")
        return f"{len(self._handles)} GPUs answer NVML and ran a short kernel"

    def inject_fault(self, code: str, gpu_index: int | None, args: Mapping[str, Any]) -> FaultDrill:
        """Refuse: drills do not break real GPUs."""
        raise FaultRefused(
            "this node runs the NVML backend on real GPUs; fault drills need the simulated backend"
        )

    def close(self) -> None:
        """Stop the XID thread and shut NVML down; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=EVENT_WAIT_MS / 1000 * 4)
        self._nvml.nvmlShutdown()

    # -- inventory ----------------------------------------------------------------------------

    def _read_inventory(self, hostname: str, labels: TopologyLabels) -> NodeInventory:
        nvml = self._nvml
        gpus = tuple(
            GpuInfo(i, _text(nvml.nvmlDeviceGetUUID(h)), _total_mb(nvml, h))
            for i, h in enumerate(self._handles)
        )
        facts = host_facts(
            labels,
            driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_version=_cuda_version(nvml.nvmlSystemGetCudaDriverVersion()),
            nvlink=self._nvlinks(),
        )
        model = _text(nvml.nvmlDeviceGetName(self._handles[0]))
        return NodeInventory(hostname, model, gpus, facts)

    def _nvlinks(self) -> tuple[int, int]:
        """(links up, links the GPUs have), over every GPU."""
        nvml, up, total = self._nvml, 0, 0
        for handle in self._handles:
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                try:
                    state = nvml.nvmlDeviceGetNvLinkState(handle, link)
                except nvml.NVMLError:
                    continue  # a link this GPU does not have
                total += 1
                up += state == nvml.NVML_FEATURE_ENABLED
        return up, total

    # -- telemetry ----------------------------------------------------------------------------

    def _sample(self, index: int, handle: Any) -> GpuSample:
        nvml = self._nvml
        return GpuSample(
            index=index,
            util=self._util(handle),
            memory_used_mb=nvml.nvmlDeviceGetMemoryInfo(handle).used // _MIB,
            temperature_c=float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            power_w=round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),  # milliwatts
            ecc_sbe=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_dbe=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            retired_pages=self._retired_pages(handle),
            mig=self._mig(handle),
        )

    def _util(self, handle: Any) -> float:
        # NVML reports no utilization of a GPU in MIG mode: 0, and its devices' use is in `mig`.
        nvml = self._nvml
        try:
            return float(min(100, nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        except nvml.NVMLError_NotSupported:
            return 0.0

    def _mig(self, handle: Any) -> MigLayout | None:
        nvml = self._nvml
        try:
            current, pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError_NotSupported:
            return None  # a GPU without MIG: before Ampere, or a model that lacks it
        on = nvml.NVML_DEVICE_MIG_ENABLE
        if on not in (current, pending):
            return None
        return MigLayout(
            current == on, pending == on, self._mig_devices(handle) if current == on else ()
        )

    def _mig_devices(self, handle: Any) -> tuple[MigDevice, ...]:
        """The GPU's MIG devices, in NVML's order; NotFound marks a free index."""
        nvml = self._nvml
        gpu_memory_mb = _total_mb(nvml, handle)
        devices = []
        for device in self._mig_handles(handle):
            attributes = nvml.nvmlDeviceGetAttributes(device)
            profile = mig_profile(
                attributes.gpuInstanceSliceCount,
                attributes.computeInstanceSliceCount,
                attributes.memorySizeMB,
                gpu_memory_mb,
            )
            # On a MIG device's handle NVML lists the processes of that device alone.
            in_use = bool(nvml.nvmlDeviceGetComputeRunningProcesses(device))
            devices.append(MigDevice(_text(nvml.nvmlDeviceGetUUID(device)), profile, in_use))
        return tuple(devices)

    def _ecc(self, handle: Any, error_type: int) -> int:
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetTotalEccErrors(handle, error_type, nvml.NVML_VOLATILE_ECC))
        except nvml.NVMLError_NotSupported:
            return 0  # ECC is off, or the GPU has none

    def _retired_pages(self, handle: Any) -> int:
        nvml = self._nvml
        try:
            return sum(
                len(nvml.nvmlDeviceGetRetiredPages(handle, cause))
                for cause in (
                    nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                    nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
                )
            )
        except nvml.NVMLError_NotSupported:
            pass
        try:
            corrected, uncorrected, _pending, _failed = nvml.nvmlDeviceGetRemappedRows(handle)
        except nvml.NVMLError_NotSupported:
            return 0
        return int(corrected) + int(uncorrected)

    def _check_ecc(self, sample: GpuSample) -> None:
        before = self._last_dbe.get(sample.index, sample.ecc_dbe)
        self._last_dbe[sample.index] = sample.ecc_dbe
        kind = ecc_fault(sample.ecc_dbe - before, sample.retired_pages)
        if kind is None or (kind.code == "ecc-sbe-storm" and sample.index in self._storm_reported):
            return
        if kind.code == "ecc-sbe-storm":
            self._storm_reported.add(sample.index)
        message = (
            f"GPU {sample.index}: {kind.title} ({sample.ecc_dbe} uncorrectable, "
            f"{sample.retired_pages} retired pages)"
        )
        self._emit(fault_detail(kind.code, None, sample.index, message))

    # -- XID events ---------------------------------------------------------------------------

    def _watch_xids(self) -> None:
        """The XID thread: wait for events in short slices until `close()`."""
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            logger.error("NVML: cannot create an event set, no XID events: %s", exc)
            return
        try:
            self._register(event_set)
            while not self._stopping.is_set():
                self._wait_once(event_set)
        finally:
            nvml.nvmlEventSetFree(event_set)

    def _register(self, event_set: Any) -> None:
        nvml = self._nvml
        for index, handle in enumerate(self._handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            except nvml.NVMLError as exc:
                logger.warning("GPU %s: no XID events: %s", index, exc)

    def _wait_once(self, event_set: Any) -> None:
        nvml = self._nvml
        try:
            data = nvml.nvmlEventSetWait_v2(event_set, EVENT_WAIT_MS)
        except nvml.NVMLError_Timeout:
            return
        except nvml.NVMLError as exc:
            logger.warning("NVML: waiting for events failed: %s", exc)
            self._stopping.wait(EVENT_WAIT_MS / 1000)  # do not spin on a persistent error
            return
        if data.eventType & nvml.nvmlEventTypeXidCriticalError:
            self._report_xid(int(data.eventData), self._index_of(data.device))

    def _report_xid(self, xid: int, index: int | None) -> None:
        kind = for_xid(xid)
        where = "a GPU" if index is None else f"GPU {index}"
        message = f"XID {xid} on {where}: {kind.title}"
        logger.warning("NVML: %s", message)
        self._emit(fault_detail(kind.code, xid, index, message))

    def _index_of(self, device: Any) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetIndex(device))
        except self._nvml.NVMLError:
            return None  # a GPU that fell off the bus may not say which it was

    def _emit(self, detail: dict[str, Any]) -> None:
        """Hand a fault to the listener on the event loop's thread, from any thread."""
        listener, loop = self._listener, self._loop
        if listener is None or loop is None or loop.is_closed():
            return
        event = BackendEvent("fault", None, detail)
        if _running_loop() is loop:  # telemetry(), on the loop's own thread
            listener(event)
        else:
            loop.call_soon_threadsafe(listener, event)


def _init(nvml: ModuleType) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot start: {exc}{_hint(nvml, exc)}") from None


def _hint(nvml: ModuleType, exc: Exception) -> str:
    hints = {
        "NVMLError_LibraryNotFound": " (no NVIDIA driver here: libnvidia-ml.so.1 is missing)",
        "NVMLError_DriverNotLoaded": " (the NVIDIA kernel driver is not loaded)",
        "NVMLError_NoPermission": " (this user may not open the GPU devices)",
    }
    for name, hint in hints.items():
        error_class = getattr(nvml, name, None)
        if error_class is not None and isinstance(exc, error_class):
            return hint
    return ""


def _handles(nvml: ModuleType) -> list[Any]:
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        raise NvmlUnavailable("NVML found no GPU on this machine")
    return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]


def _total_mb(nvml: ModuleType, handle: Any) -> int:
    return int(nvml.nvmlDeviceGetMemoryInfo(handle).total // _MIB)


def _cuda_version(value: int) -> str:
    # NVML gives 1000 * major + 10 * minor: 12040 is CUDA 12.4.
    return f"{value // 1000}.{value % 1000 // 10}"


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
