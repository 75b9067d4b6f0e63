"""The scheduling engine: `plan(snapshot, now) -> Plan`, pure Python, no I/O, no clock."""

from scheduler.engine.cycle import Clock, plan
from scheduler.engine.model import (
    Admission,
    Cohort,
    Node,
    Pending,
    Placement,
    Plan,
    Preemption,
    PreemptionPolicy,
    Queue,
    Quota,
    Reservation,
    Shrink,
    Snapshot,
    Strategy,
    TopologyLevel,
    Workload,
)

__all__ = [
    "Admission",
    "Clock",
    "Cohort",
    "Node",
    "Pending",
    "Placement",
    "Plan",
    "Preemption",
    "PreemptionPolicy",
    "Queue",
    "Quota",
    "Reservation",
    "Shrink",
    "Snapshot",
    "Strategy",
    "TopologyLevel",
    "Workload",
    "plan",
]
