"""The order in which a cycle considers pending workloads."""

from __future__ import annotations

from scheduler.engine.model import Workload


def queue_order(workload: Workload) -> tuple[int, float, int]:
    """Sort key for pending workloads, first considered first.

    Criteria, in order:
    1. higher `priority` first;
    2. earlier `submitted_at` first;
    3. lower `id` first, so equal priority and submit time still give one order.
    """
    return (-workload.priority, workload.submitted_at, workload.id)
