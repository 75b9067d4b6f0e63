"""Scripted incidents: a fault, a lost agent, a hang, a straggler or a drain on one node of one
job, at a set time, recovered as the portal recovers them.

Random faults (`faultmodel`) keep the job on GPUs it holds, as if spares never ran out. A
scripted incident names the node, so it follows the portal's recovery (`portal.workloads.
recovery`) step by step: it is noticed after the delay its kind takes in the control plane
(`Detection`); a hang stops the job's steps and a straggler slows them meanwhile; then the
healthy ranks save from memory where the policy and `faults.triggered_save_possible` allow (a
drain saves whenever the policy saves at all); a job that must leave the node
(`faults.leaves_node`, a drain, a straggler when stragglers are replaced) moves its part to a
hot spare of the same pod, else shrinks without the node if it is elastic and keeps its
minimum, else is requeued; the node it left takes no more work. Then it restarts.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler import faults

# The catalogue kind each incident is recorded as.
KINDS = {"disconnect": "heartbeat-loss"}
SLOWDOWNS = {"hang": 0.0, "straggler": 0.5}  # the job's speed while it lasts: none, or half


@dataclass(frozen=True)
class Incident:
    """`code` (a fault catalogue code, or "disconnect": the node's agent goes silent) on the
    node of rank `node_rank` of job `job_id`, at `at_s` of the trace."""

    at_s: float
    job_id: int
    node_rank: int
    code: str

    @property
    def kind(self) -> faults.FaultKind:
        return faults.lookup(KINDS.get(self.code, self.code))


@dataclass(frozen=True)
class Detection:
    """How long the control plane takes to notice what it cannot be told: a silent agent after
    its grace, a hang after its limit, a straggler after it stayed slow this long; and whether
    stragglers are replaced (`Queue.straggler_policy`) or only reported."""

    lost_after_s: float = 15.0  # three heartbeats of 5 s
    hang_after_s: float = 120.0  # HANG_FLOOR_S
    straggler_for_s: float = 120.0  # STRAGGLER_FOR_S
    replace_stragglers: bool = False

    def delay(self, code: str) -> float:
        return {
            "disconnect": self.lost_after_s,
            "hang": self.hang_after_s,
            "straggler": self.straggler_for_s,
        }.get(code, 0.0)

    def leaves(self, incident: Incident) -> bool:
        """Whether the job must leave the incident's node."""
        if incident.code == "straggler":
            return self.replace_stragglers
        return incident.code == "drain" or faults.leaves_node(incident.kind)

    def recovers(self, incident: Incident) -> bool:
        """Whether the incident restarts the job (a straggler that is only reported does not)."""
        return incident.kind.kills_job or self.leaves(incident)
