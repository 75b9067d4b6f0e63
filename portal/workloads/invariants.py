"""What must hold between the database and the fleet whatever happens: checked by tests, the
soak run and `manage.py check_invariants`. Each check returns the violations it found, as
sentences an operator can act on."""

import time
from collections import defaultdict

from django.conf import settings

from portal.cluster.models import Node
from portal.cluster.summary import heartbeats
from portal.workloads.choices import HOLDING, State
from portal.workloads.models import Allocation, Workload

MISSED_HEARTBEATS = 3  # as the lost-node check counts them


def violations() -> list[str]:
    """Every invariant's violations, in a stable order; empty when all hold."""
    checks = (unbooked_processes, stale_allocations, mixed_attempts, busy_spares, unattended_work)
    return [violation for check in checks for violation in check()]


def unbooked_processes() -> list[str]:
    """No GPU held by two live processes: an agent that has reached its node's newest desired
    state runs only workloads that hold GPUs there (a process left on GPUs booked to another
    workload would share them)."""
    nodes = dict(Node.objects.filter(connected=True).values_list("pk", "generation"))
    booked = defaultdict(set)
    for node_id, workload_id in Allocation.objects.filter(node_id__in=nodes).values_list(
        "node_id", "workload_id"
    ):
        booked[node_id].add(workload_id)
    names = dict(Node.objects.filter(pk__in=nodes).values_list("pk", "name"))
    found = []
    for node_id, sample in sorted(heartbeats(nodes).items()):
        if sample["reported_generation"] != nodes[node_id]:
            continue  # still converging: what it runs is on its way out or in
        for item in sample.get("workloads", []):
            if item["state"] == "running" and item["workload_id"] not in booked[node_id]:
                found.append(
                    f"node {names[node_id]} runs workload {item['workload_id']}, which holds "
                    "none of its GPUs"
                )
    return found


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
