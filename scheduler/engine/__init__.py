"""The scheduling engine: `plan(snapshot, now) -> Plan`, pure Python, no I/O, no clock."""

from scheduler.engine.cycle import plan
from scheduler.engine.model import (
    Admission,
    Node,
    Pending,
    Placement,
    Plan,
    Queue,
    Quota,
    Snapshot,
    TopologyLevel,
    Workload,
)

__all__ = [
    "Admission",
    "Node",
    "Pending",
    "Placement",
    "Plan",
    "Queue",
    "Quota",
    "Snapshot",
    "TopologyLevel",
    "Workload",
    "plan",
]
