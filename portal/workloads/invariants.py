"""What must hold between the database and the fleet whatever happens: checked by tests, the
soak run and `manage.py check_invariants`. Each check returns the violations it found, as
sentences an operator can act on."""

import time
from collections import defaultdict

from django.conf import settings
from django.db.models import Min, Sum
from django.utils import timezone

from portal.cluster.models import Node
from portal.cluster.summary import heartbeats
from portal.workloads.allocations import past_whole
from portal.workloads.choices import HOLDING, State
from portal.workloads.models import Allocation, UsageRecord, Workload
from portal.workloads.usage import CHARGED, usage_rows

MISSED_HEARTBEATS = 3  # as the lost-node check counts them


def violations() -> list[str]:
    """Every invariant's violations, in a stable order; empty when all hold."""
    checks = (
        overfilled_gpus,
        unbooked_processes,
        stranger_processes,
        stale_allocations,
        mixed_attempts,
        busy_spares,
        unattended_work,
        unreconciled_usage,
    )
    return [violation for check in checks for violation in check()]


def overfilled_gpus() -> list[str]:
    """No GPU booked past its whole: its shares come to eight eighths at most, and a GPU
    booked whole holds nothing else."""
    shared = Allocation.objects.filter(slices__gt=0).values("node_id")  # only where shares are
    over = past_whole(Allocation.objects.filter(node_id__in=shared))
    names = dict(Node.objects.filter(pk__in={n for n, _ in over}).values_list("pk", "name"))
    return [f"node {names[node]} GPU {index} is booked past its whole" for node, index in over]


def unbooked_processes() -> list[str]:
    """No GPU held by two live processes: an agent that has reached its node's newest desired
    state runs only workloads that hold GPUs there (a process left on GPUs booked to another
    workload would share them)."""
    found = []
    for name, sample, booked in _converged_nodes():
        held = {workload_id for workload_id, _ in booked}
        for item in sample.get("workloads", []):
            if item["state"] == "running" and item["workload_id"] not in held:
                found.append(
                    f"node {name} runs workload {item['workload_id']}, which holds none of its GPUs"
                )
    return found


def stranger_processes() -> list[str]:
    """Every process an agent sees on a GPU (NVML's compute processes, or the processes
    backend's own) belongs to the workload booked that GPU: not to a process no workload
    started (a leftover of a crashed agent), nor to a workload booked elsewhere."""
    found = []
    for name, sample, booked in _converged_nodes():
        for gpu in sample["gpus"]:
            for process in gpu.get("processes", []):
                owner = process["workload_id"]
                if (owner, gpu["index"]) in booked:
                    continue
                whose = "no workload's" if owner is None else f"workload {owner}'s"
                found.append(
                    f"node {name} GPU {gpu['index']}: pid {process['pid']} is {whose}, "
                    "which does not hold that GPU"
                )
    return found


def _converged_nodes():
    """(name, latest heartbeat, {(workload, GPU index) booked}) of each connected node whose
    agent has reached its newest desired state: one still converging has what it runs on its
    way out or in."""
    nodes = dict(Node.objects.filter(connected=True).values_list("pk", "generation"))
    booked = defaultdict(set)
    for node_id, workload_id, index in Allocation.objects.filter(node_id__in=nodes).values_list(
        "node_id", "workload_id", "gpu_index"
    ):
        booked[node_id].add((workload_id, index))
    names = dict(Node.objects.filter(pk__in=nodes).values_list("pk", "name"))
    for node_id, sample in sorted(heartbeats(nodes).items()):
        if sample["reported_generation"] == nodes[node_id]:
            yield names[node_id], sample, booked[node_id]


def stale_allocations() -> list[str]:
    """No GPU booked to a job that does not hold GPUs (finished, or back in its queue)."""
    stale = (
        Allocation.objects.exclude(workload__state__in=HOLDING)
        .values_list("workload_id", "workload__state")
        .distinct()
    )
    return [f"workload {w} is {state} but still holds GPUs" for w, state in sorted(stale)]


def mixed_attempts() -> list[str]:
    """Every node of a RUNNING job runs its current attempt, as its agent reports it."""
    running = dict(Workload.objects.filter(state=State.RUNNING).values_list("pk", "attempt"))
    on_nodes = defaultdict(set)
    for workload_id, node_id in Allocation.objects.filter(workload_id__in=running).values_list(
        "workload_id", "node_id"
    ):
        on_nodes[workload_id].add(node_id)
    samples = heartbeats({n for nodes in on_nodes.values() for n in nodes})
    found = []
    for workload_id, nodes in sorted(on_nodes.items()):
        for node_id in sorted(nodes & set(samples)):
            attempts = {
                item.get("attempt", 0)
                for item in samples[node_id].get("workloads", [])
                if item["workload_id"] == workload_id and item["state"] == "running"
            }
            if attempts and attempts != {running[workload_id]}:
                found.append(
                    f"workload {workload_id} is running attempt {running[workload_id]}, but "
                    f"node {node_id} runs attempt {sorted(attempts)}"
                )
    return found


def busy_spares() -> list[str]:
    """Hot spares are free: they wait for recoveries."""
    busy = Node.objects.filter(spare=True, allocations__isnull=False).distinct()
    return [f"hot spare {name} holds GPUs of a job" for name in busy.values_list("name", flat=True)]


def unattended_work() -> list[str]:
    """Every node holding a live job is connected, or its agent left less than the lost-node
    check's grace ago (after which a fault takes the job elsewhere)."""
    grace = MISSED_HEARTBEATS * settings.WANKA["HEARTBEAT_S"]
    cutoff = time.time() - grace - 5  # one more beat of the check's own period
    live = (State.ADMITTED, State.STARTING, State.RUNNING)
    nodes = Node.objects.filter(connected=False, allocations__workload__state__in=live).distinct()
    return [
        f"node {name} holds a running job but its agent left and no fault handles it"
        for name, last_seen in nodes.values_list("name", "last_seen_at")
        if last_seen is None or last_seen.timestamp() < cutoff
    ]


TOLERANCE = 0.001  # booked GPU-hours reconcile with the allocation records to 0.1 %


def unreconciled_usage() -> list[str]:
    """What the usage report bills reconciles with the allocation records: per tenant, over
    all time, the booked stretches (UsageRecords) plus every GPU held now (an Allocation, so
    the GPUs actually held, not those asked for) from its start, to within 0.1 %, and the
    same GPUs in use; and no stretch books more GPU-hours than its GPUs held for its span."""
    now = timezone.now()
    first = UsageRecord.objects.aggregate(at=Min("started_at"))["at"] or now
    booked = dict(
        UsageRecord.objects.values("tenant__name")
        .annotate(hours=Sum("gpu_hours"))
        .values_list("tenant__name", "hours")
    )
    held = Allocation.objects.annotate(share=CHARGED).values_list(
        "workload__tenant__name",
        "created_at",
        "workload__started_at",
        "workload__admitted_at",
        "share",  # a share is billed as its share, a MIG instance as its profile's
    )
    gpus: dict[str, float] = defaultdict(float)
    hours: dict[str, float] = defaultdict(float, booked)
    for tenant, booked_at, started, admitted, share in held:
        gpus[tenant] += share
        since = max(started or admitted or now, booked_at)
        hours[tenant] += (now - since).total_seconds() / 3600 * share
        first = min(first, booked_at)
    billed = {
        row["tenant"]: row
        for row in usage_rows(Workload.objects.all(), first, now, ("tenant",), now)
    }
    found = []
    for tenant in sorted(set(hours) | set(billed)):
        row = billed.get(tenant, {"gpu_hours": 0.0, "in_use": 0})
        expected = hours.get(tenant, 0.0)
        if abs(row["gpu_hours"] - expected) > TOLERANCE * expected + 1e-6:
            found.append(
                f"tenant {tenant} is billed {row['gpu_hours']:.3f} GPU-hours, but its "
                f"allocation records come to {expected:.3f}"
            )
        if abs(row["in_use"] - gpus.get(tenant, 0)) > 1e-9:
            found.append(
                f"tenant {tenant} is billed for {row['in_use']} GPUs in use, but holds "
                f"{gpus.get(tenant, 0)}"
            )
    return found + _overbooked()


def _overbooked() -> list[str]:
    """Stretches that book more GPU-hours than their GPUs held for their whole span."""
    found = []
    for workload, gpus, start, end, hours in UsageRecord.objects.order_by("pk").values_list(
        "workload_id", "gpus", "started_at", "ended_at", "gpu_hours"
    ):
        most = gpus * (end - start).total_seconds() / 3600
        if hours > most * (1 + TOLERANCE) + 1e-6:
            found.append(
                f"workload {workload} booked {hours:.3f} GPU-hours for a stretch its "
                f"{gpus} GPUs held for {most:.3f}"
            )
    return found
