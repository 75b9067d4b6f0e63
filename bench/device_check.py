"""The Python side of bench/device_check.sh, which starts the processes; run from the repo root.

    python -m bench.device_check setup --backend nvml --datacenter dc-check  # prints a token
    python -m bench.device_check run --backend nvml --agent-pid PID --state-dir DIR --started T
    python -m bench.device_check mps --state-dir DIR  # with nvidia-cuda-mps-control
    python -m bench.device_check mig  # each GPU's MIG layout as the agent reads it; MPS
    python -m bench.device_check mig --set --state-dir DIR  # and a MIG job on GPU 0

`setup` reads the GPUs the way the agent will (so that the GPU model it reports exists in the
database; this is also where a machine without NVML is turned away), migrates the throwaway
database and creates a region, the data center, the GPU model, a tenant whose queue has quota,
and a bootstrap token, which it prints. `run` waits for the agent to enrol, prints the inventory
and telemetry the portal recorded, runs examples/train_tiny.py on one GPU, asks for a
checkpoint, records a hang and waits for the recovery (a save from memory, a restart resuming
from it), cancels the job and prints one JSON line. Any failure exits 1 saying what failed.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scheduler.agent.backends import Assignment, MigLayout, NodeInventory
from scheduler.agent.host import mps_running
from scheduler.agent.nvml import NvmlMachine, NvmlUnavailable
from scheduler.agent.processes import LOG_FILE, PGID_FILE, ProcessBackend
from scheduler.agent.simulated import SimulatedGpus
from scheduler.mig import profiles

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 60.0  # for each step: enrolment, the job starting, the checkpoint, the stop
TRAIN_ARGS = "--steps 1000000 --sleep-s 0.01 --log-every 50"  # runs until cancelled


def fail(reason: str):
    """Stop the check with a clear reason (exit status 1)."""
    raise SystemExit(f"device check FAILED: {reason}")


def read_inventory(backend: str, gpus: int, gpu_model: str) -> NodeInventory:
    """What the agent will report: NVML's GPUs, or the simulated ones it will be told to have."""
    if backend == "processes":
        return SimulatedGpus(socket.gethostname(), gpu_model, gpus).inventory()
    try:
        machine = NvmlMachine(socket.gethostname())
    except NvmlUnavailable as exc:
        fail(f"NVML not available: {exc}")
    try:
        inventory = machine.inventory()
    finally:
        machine.close()
    import torch

    if not torch.cuda.is_available():
        fail(f"this torch ({torch.__version__}) cannot use the GPU: install a CUDA build")
    return inventory


def mig(args) -> None:
    """Each GPU's MIG mode and MIG devices as the agent reads them (the NVML machine's
    telemetry), and whether MPS can run here: a line each, then one JSON line. A GPU without
    MIG passes; a GPU that does not answer fails."""
    try:
        machine = NvmlMachine(socket.gethostname())
    except NvmlUnavailable as exc:
        fail(f"NVML not available: {exc}")
    try:
        gpus, samples = len(machine.inventory().gpus), machine.telemetry(busy=())
    finally:
        machine.close()
    if len(samples) != gpus:
        fail(f"only {len(samples)} of {gpus} GPUs answered NVML")
    for sample in samples:
        say(f"  gpu {sample.index}: {_mig_words(sample.mig)}")
    control, running = shutil.which("nvidia-cuda-mps-control"), mps_running()
    say(f"MPS: control {control or 'not installed'}, daemon {'' if running else 'not '}running")
    layouts = {s.index: s.mig.to_message() for s in samples if s.mig is not None}
    result = {"ok": True, "mig": layouts, "mps_control": control, "mps_running": running}
    if args.set:
        result["set"] = mig_set(Path(args.state_dir or tempfile.mkdtemp(prefix="wanka-mig-")))
    print(json.dumps(result))


# A MIG job's probe: the device it sees, that it computes there, and that device's memory.
MIG_PROBE = (
    "import json, os, torch; x = torch.ones(1 << 24, device='cuda'); "
    "print(json.dumps({'visible': os.environ['CUDA_VISIBLE_DEVICES'], 'sum': int(x.sum().item()), "
    "'memory_mb': torch.cuda.get_device_properties(0).total_memory // 2**20}))"
)


def mig_set(state_dir: Path) -> dict:
    """A job of the GPU model's smallest MIG profile on GPU 0, started as the agent starts one
    (the processes backend on the NVML machine): NVML turns MIG on where it is off and creates
    the instance, re-slicing the GPU where it has no room and no MIG device is in use. The job
    must see its MIG device, compute on it, and have no more than its slice's memory. A GPU 0
    whose MIG was off is given back with MIG off as the agent turns it off for whole-GPU work
    (`Machine.mig_off`), which must leave it reporting no MIG; one that had MIG keeps the new
    instance. Skipped (and passed) on a GPU model without MIG; fails where a process uses GPU 0."""
    try:
        machine = NvmlMachine(socket.gethostname())
    except NvmlUnavailable as exc:
        fail(f"NVML not available: {exc}")
    gpu = machine.inventory().gpus[0]
    named = profiles(machine.inventory().gpu_model, -(-gpu.memory_mb // 1024))
    if not named:
        machine.close()
        return {"skipped": f"{machine.inventory().gpu_model} has no MIG"}
    if machine.compute_processes().get(0):
        machine.close()
        fail("a process computes on GPU 0: MIG is set on an idle GPU only")
    was_on = machine.telemetry(busy=())[0].mig is not None
    profile = next(iter(named))
    say(f"MIG: a {profile} job on GPU 0 (MIG {'on' if was_on else 'off'} before)")
    off = None
    try:
        seen = asyncio.run(_mig_job(machine, state_dir, profile))
        layout = machine.telemetry(busy=())[0].mig
    finally:
        if not was_on:
            off = _mig_off(machine)
        machine.close()
    if off is False:
        fail("MIG is still on on GPU 0 after the agent turned it off")
    uuids = [device.uuid for device in layout.devices] if layout else []
    if seen["visible"] not in uuids:
        fail(f"the job saw {seen['visible']}, not one of GPU 0's MIG devices {uuids}")
    if seen["sum"] != 1 << 24 or seen["memory_mb"] > gpu.memory_mb * named[profile].slots // 8:
        fail(f"the {profile} job did not compute within its slice: {seen}")
    say(f"  {profile} on {seen['visible']}: {seen['memory_mb']} MiB, computed")
    found = {"profile": profile, **seen, "layout": layout.to_message(), "mig_was_on": was_on}
    return found | ({} if off is None else {"mig_turned_off": off})


def _mig_off(machine: NvmlMachine) -> bool:
    """GPU 0 given back with MIG off, as the agent turns it off: whether it reports none."""
    try:
        machine.mig_off(0)
    except ValueError as exc:
        say(f"MIG left on GPU 0: {exc}")
    return machine.telemetry(busy=())[0].mig is None


async def _mig_job(machine: NvmlMachine, state_dir: Path, profile: str) -> dict:
    backend = ProcessBackend(machine, state_dir, job_users=False)
    command = shlex.join([sys.executable, "-c", MIG_PROBE])
    try:
        await backend.start(Assignment(1, (0,), command, mig=profile))
    except ValueError as exc:  # NVML could not set the layout: says why
        fail(str(exc))
    ended = await backend.wait(1)
    lines = _read(state_dir / "workloads" / "1" / LOG_FILE).strip().splitlines()
    if ended.exit_code != 0 or not lines:
        fail(f"the {profile} job exited with {ended.exit_code}: {lines[-5:]}")
    return json.loads(lines[-1])


def _mig_words(layout: MigLayout | None) -> str:
    if layout is None:
        return "no MIG (the GPU has none, or MIG mode is off)"
    devices = [f"{d.profile} {d.uuid}{' (in use)' if d.in_use else ''}" for d in layout.devices]
    mode = "on" if layout.enabled else "off"
    after = "on" if layout.pending else "off"
    return f"MIG {mode} ({after} after a reset): {', '.join(devices) or 'no MIG devices'}"


def setup(args) -> None:
    """Migrate and seed the throwaway database; print a bootstrap token."""
    inventory = read_inventory(args.backend, args.gpus, args.gpu_model)
    facts = inventory.facts
    say(
        f"found {len(inventory.gpus)} x {inventory.gpu_model}, driver {facts.driver_version}, "
        f"CUDA {facts.cuda_version}"
    )
    _django()
    from django.core.management import call_command

    from portal.cluster.models import BootstrapToken, DataCenter, GpuModel, Region
    from portal.quotas.models import Queue, QueueQuota
    from portal.tenancy.models import Tenant

    call_command("migrate", verbosity=0)
    region = Region.objects.create(name="local")
    DataCenter.objects.create(region=region, name=args.datacenter)
    model = GpuModel.objects.create(
        name=inventory.gpu_model, memory_gb=round(inventory.gpus[0].memory_mb / 1024)
    )
    tenant = Tenant.objects.create(name="Device check", slug="device-check")
    queue = Queue.objects.create(tenant=tenant, name="check", region=region)
    QueueQuota.objects.create(queue=queue, gpu_model=model, nominal=len(inventory.gpus))
    _, raw = BootstrapToken.issue(note="device check")
    print(raw)


def run(args) -> None:
    """Inventory, telemetry, a training job with a checkpoint request, cancel; one JSON line."""
    _django()
    from portal.cluster.models import Node

    def wait(predicate, what: str):
        return wait_until(predicate, what, args.agent_pid)

    node = wait(lambda: Node.objects.filter(connected=True).first(), "the agent to connect")
    gpus = wait(lambda: list(node.gpus.all()), "the agent's GPUs")
    show_inventory(node, gpus)
    samples = sample_telemetry(node.id, seconds=args.telemetry_s)
    if not samples:
        fail(f"no telemetry in {args.telemetry_s} s")
    workload, log = start_training(args.backend, node, Path(args.state_dir), wait)
    command, saved = request_checkpoint(node, workload, wait)
    busy = sample_telemetry(node.id, seconds=2)  # while the job runs
    recovery = recover_from_hang(node, workload, log, wait)
    device = cancel_training(workload, log, wait)
    if args.backend == "nvml" and not device.startswith("cuda"):
        fail(f"train_tiny.py ran on {device}, not on the GPU")
    summary = {
        "ok": True,
        "backend": args.backend,
        "gpus": len(gpus),
        "gpu_model": node.gpu_model.name,
        "driver": node.facts.get("driver_version"),
        "cuda": node.facts.get("cuda_version"),
        "telemetry_samples": len(samples) + len(busy),
        "train_device": device,
        "checkpoint_step": saved.step,
        "ack_ok": command.state == "done",
        "recovery": recovery.outcome,
        "resumed_from_step": recovery.resume_step,
        "seconds": round(time.time() - args.started, 1),
    }
    print(json.dumps(summary))


def show_inventory(node, gpus) -> None:
    """What the agent enrolled with and said hello with, as the portal recorded it."""
    say(f"node {node.name} (agent {node.agent_version}), {node.gpu_model} x {node.gpu_count}")
    say(f"facts: {json.dumps(node.facts, sort_keys=True)}")
    for gpu in gpus:
        say(f"  gpu {gpu.index}: {gpu.uuid}  {gpu.memory_mb} MiB")


def start_training(backend: str, node, state_dir: Path, wait):
    """Submit train_tiny.py on one GPU, run a scheduling cycle, wait for RUNNING and the first
    steps; return the workload and its log file."""
    from portal.quotas.models import Queue
    from portal.workloads.cycle import scheduling_cycle
    from portal.workloads.models import Workload

    queue = Queue.objects.select_related("tenant").get()  # the one `setup` made
    workload = Workload.objects.create(
        tenant=queue.tenant,
        queue=queue,
        name="device-check",
        gpu_model=node.gpu_model,
        gpus=1,
        command=train_command(backend),
        checkpoint_policy="triggered",
        env={"PYTHONPATH": str(ROOT)},
    )
    scheduling_cycle()
    wait(lambda: job_state(workload) == "running", f"workload {workload.pk} to be RUNNING")
    log = state_dir / "workloads" / str(workload.pk) / LOG_FILE
    wait(lambda: "step " in _read(log), "the first training steps")
    return workload, log


def request_checkpoint(node, workload, wait):
    """Send a checkpoint command; wait for its ack and the Checkpoint row it leads to."""
    from portal.cluster.commands import send_command
    from portal.cluster.models import NodeCommand
    from portal.workloads.models import Checkpoint

    command = send_command(node.id, "checkpoint", workload.pk, reason="device check")
    answered = NodeCommand.objects.filter(pk=command.pk).exclude(state="sent")
    wait(answered.exists, "the checkpoint command's ack")
    command.refresh_from_db()
    say(f"ack: {command.state} ({command.detail})")
    if command.state != "done":
        fail(f"the agent refused the checkpoint: {command.detail}")
    requested = Checkpoint.objects.filter(workload=workload, kind="requested")
    saved = wait(requested.first, "the Checkpoint row")
    say(f"checkpoint: step {saved.step} {saved.status} {saved.size_bytes} bytes "
        f"in {saved.duration_s:.3f} s at {saved.location}")  # fmt: skip
    return command, saved


def recover_from_hang(node, workload, log: Path, wait):
    """Record a hang of the job on the node, as the portal does when its steps stop (a drill
    cannot break a real GPU), and wait for the recovery: the healthy process saves from memory
    on request, and the job restarts in place as a new attempt resuming from that save."""
    from portal.agents.intake import record_fault
    from portal.workloads.models import Recovery
    from scheduler import faults

    record_fault(node.id, faults.lookup("hang"), "device check", 0)
    done = Recovery.objects.filter(workload=workload, step="done")
    recovery = wait(done.first, "the recovery to finish")
    wait(lambda: "resumed from step" in _read(log), "the new attempt to resume")
    wait(lambda: job_state(workload) == "running", "the job to run again")
    say(f"recovery: {recovery.outcome}, {recovery.detail}; resumed from step "
        f"{recovery.resume_step}")  # fmt: skip
    if recovery.resume_step is None:
        fail("the job restarted without a checkpoint")
    return recovery


def cancel_training(workload, log: Path, wait) -> str:
    """Cancel the job and wait until its processes are gone; return the device it trained on."""
    from portal.workloads.lifecycle import cancel

    pgid = int((log.parent / PGID_FILE).read_text())
    cancel(workload)
    wait(lambda: not _group_alive(pgid), "the agent to stop the cancelled job")
    lines = _read(log).splitlines()
    say("train_tiny.py output, last lines:")
    for line in lines[-5:]:
        say(f"  {line}")
    started = [line for line in lines if line.startswith("training on ")]
    return started[0].removeprefix("training on ") if started else "?"


def train_command(backend: str) -> str:
    """examples/train_tiny.py, slowed down so there is time to ask for a checkpoint; on the
    NVML backend it must use CUDA (a CPU fallback would prove nothing)."""
    device = "cuda" if backend == "nvml" else "auto"
    script = str(ROOT / "examples" / "train_tiny.py")
    return shlex.join([sys.executable, script, *TRAIN_ARGS.split(), "--device", device])


def job_state(workload) -> str:
    """The workload's state; fails the check if it ended."""
    workload.refresh_from_db()
    if workload.is_finished:
        fail(
            f"workload {workload.pk} ended {workload.state} (exit code {workload.exit_code}); "
            "see its output.log in the agent's state directory"
        )
    return workload.state


def sample_telemetry(node_id: int, seconds: float) -> list[dict]:
    """The node's heartbeats as the portal keeps them (what its API page shows), printed."""
    from portal.cluster.summary import node_live

    seen, deadline = {}, time.monotonic() + seconds
    while time.monotonic() < deadline:
        sample = node_live(node_id)
        if sample and sample["ts"] not in seen:
            seen[sample["ts"]] = sample
            for gpu in sample["gpus"]:
                say(
                    f"  telemetry gpu {gpu['index']}: util {gpu['util']:.0f}% "
                    f"mem {gpu['memory_used_mb']} MiB {gpu['temperature_c']:.0f} C "
                    f"{gpu['power_w']:.0f} W ecc sbe/dbe {gpu['ecc_sbe']}/{gpu['ecc_dbe']} "
                    f"retired {gpu['retired_pages']}"
                )
        time.sleep(0.2)
    return list(seen.values())


def wait_until(predicate, what: str, agent_pid: int, timeout_s: float = TIMEOUT_S):
    """Poll `predicate` until it returns something true; fail on timeout or a dead agent."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if not _alive(agent_pid):
            fail(f"the agent exited while waiting for {what}")
        time.sleep(0.2)
    fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def say(line: str) -> None:
    """Progress goes to stderr; stdout carries only what the shell script reads."""
    print(line, file=sys.stderr, flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _read(path: Path) -> str:
    with contextlib.suppress(FileNotFoundError):
        return path.read_text(errors="replace")
    return ""


# Run by each share job of the MPS check: its pinned limit from the agent's variable, then a
# JSON line of what it could allocate and the SMs CUDA shows it, held a while for the other.
MPS_PROBE = """
import json, os, time, torch
limit_mb = int(os.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].split("=")[1].removesuffix("MB"))
def fits(mb):
    try:
        block = torch.empty(mb * 2**20, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        return False
    del block
    torch.cuda.empty_cache()
    return True
started = time.time()
seen = {"sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "within": fits(limit_mb // 2), "over": fits(limit_mb + 2048)}
time.sleep(5)
print(json.dumps({**seen, "started": started, "ended": time.time()}), flush=True)
"""


def mps(args) -> None:
    """Two quarter-GPU jobs side by side on GPU 0 under MPS; one JSON line."""
    try:
        machine = NvmlMachine(socket.gethostname())
    except NvmlUnavailable as exc:
        fail(f"NVML not available: {exc}")
    pipes = Path(tempfile.mkdtemp(prefix="wanka-mps-"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipes), "CUDA_MPS_LOG_DIRECTORY": str(pipes)}
    if mps_running():  # a daemon serves the default pipe directory: use it, leave it be
        env, ours = {}, False
    else:
        try:
            subprocess.run(["nvidia-cuda-mps-control", "-d"], env=os.environ | env, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            fail(f"cannot start the MPS control daemon: {exc}")
        ours = True
    try:
        wait_until(lambda: mps_running(env), "the MPS daemon", os.getpid())
        result = asyncio.run(_two_quarters(machine, Path(args.state_dir or pipes), env))
    finally:
        if ours:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True,
                           env=os.environ | env, check=False)  # fmt: skip
        machine.close()
    print(json.dumps(result))


async def _two_quarters(machine, state_dir: Path, env: dict) -> dict:
    backend = ProcessBackend(machine, state_dir, base_env=os.environ | env, job_users=False,
                             mps=lambda: mps_running(env))  # fmt: skip
    command = shlex.join([sys.executable, "-c", MPS_PROBE])
    for wid in (1, 2):
        await backend.start(Assignment(wid, (0,), command, slices=2))
    limits = backend.share(1)
    exits = [await backend.wait(wid) for wid in (1, 2)]
    seen = []
    for wid, ended in zip((1, 2), exits, strict=True):
        lines = _read(state_dir / "workloads" / str(wid) / LOG_FILE).strip().splitlines()
        if ended.exit_code != 0 or not lines:
            fail(f"share job {wid} exited with {ended.exit_code}: {lines[-5:]}")
        seen.append(json.loads(lines[-1]))
    if not limits or not limits.mps:
        fail("the agent saw no MPS daemon: it would time-slice")
    for wid, job in enumerate(seen, start=1):
        if not job["within"]:
            fail(f"share job {wid} could not allocate half its pinned memory")
        if job["over"]:
            fail(f"share job {wid} allocated 2 GB over its pinned memory: MPS did not limit it")
    together = seen[0]["started"] < seen[1]["ended"] and seen[1]["started"] < seen[0]["ended"]
    if not together:
        fail("the two share jobs did not run at the same time")
    return {"ok": True, "mps": True, "sm_percent": limits.sm_percent,
            "pinned_mb": limits.memory_mb, "jobs": seen, "side_by_side": together}  # fmt: skip


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()


def main() -> None:
    """Parse the subcommand and run it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["setup", "run", "mps", "mig"])
    parser.add_argument("--backend", choices=["nvml", "processes"], default="nvml")
    parser.add_argument("--datacenter", default="dc-check")
    parser.add_argument("--gpus", type=int, default=2, help="simulated GPUs (processes)")
    parser.add_argument("--gpu-model", default="H100-SXM-80GB", help="simulated (processes)")
    parser.add_argument("--agent-pid", type=int, default=0)
    parser.add_argument("--state-dir", default="")
    parser.add_argument("--started", type=float, default=time.time())
    parser.add_argument("--telemetry-s", type=float, default=5.0)
    parser.add_argument("--set", action="store_true", help="mig: also run a MIG job on GPU 0")
    args = parser.parse_args()
    if args.step == "setup":
        setup(args)
    elif args.step == "mps":
        mps(args)
    elif args.step == "mig":
        mig(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
