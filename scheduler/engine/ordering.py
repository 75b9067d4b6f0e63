"""The order in which a cycle considers pending workloads."""

from __future__ import annotations

from scheduler.engine.model import Workload


def queue_order(workload: Workload, queue_priority: int = 0) -> tuple[int, int, float, int]:
    """Sort key for pending workloads, first considered first.

    Criteria, in order:
    1. higher priority of the workload's queue first (operators set it, so a tenant cannot jump
       other tenants' work by marking its own jobs critical);
    2. higher workload `priority` first;
    3. earlier `submitted_at` first;
    4. lower `id` first, so equal priority and submit time still give one order.
    """
    return (-queue_priority, -workload.priority, workload.submitted_at, workload.id)
