"""What the control plane tells node agents. The database is the truth: an agent is only ever
told "look again" and then sent its whole desired state, so a lost message costs a delay."""

from collections import defaultdict

from portal.cluster.models import Node
from portal.core.live import node_group, send_many

MASTER_PORT_BASE = 29500


def desired_state(node: Node) -> dict:
    """The `desired_state` message fields for `node`: every assignment it should run.

    Queries: this node's GPUs, the checkpoints its workloads resume from, and per workload
    on it two index lookups (its master, rank 0, and its last rank), never a scan of a gang's
    allocations: a restart of a 1,000-node job asks this of all 1,000 nodes at once.
    """
    from portal.workloads.choices import CheckpointStatus
    from portal.workloads.models import Allocation, Checkpoint

    mine = defaultdict(list)
    ranks, workloads = {}, {}
    for alloc in Allocation.objects.filter(node=node).select_related("workload"):
        mine[alloc.workload_id].append(alloc.gpu_index)
        ranks[alloc.workload_id] = alloc.node_rank
        workloads[alloc.workload_id] = alloc.workload
    if not mine:
        return {"generation": node.generation, "assignments": []}
    masters, last_rank = {}, {}
    for workload_id in mine:
        gang = Allocation.objects.filter(workload_id=workload_id).order_by("node_rank",
                                                                            "gpu_index")
        masters[workload_id] = gang.values("node__name", "gpu_index").first()
        last_rank[workload_id] = gang.order_by("-node_rank").values_list(
            "node_rank", flat=True).first()
    # Every (re)start resumes from the newest complete checkpoint.
    resume = {}
    for workload_id, location in (
        Checkpoint.objects.filter(workload_id__in=mine, status=CheckpointStatus.COMPLETE)
        .order_by("workload_id", "step").values_list("workload_id", "location")
    ):
        resume[workload_id] = location
    assignments = []
    for workload_id in sorted(mine):
        workload, master = workloads[workload_id], masters[workload_id]
        assignments.append({
            "workload_id": workload_id,
            "gpu_indices": sorted(mine[workload_id]),
            "command": workload.command,
            "env": _env(workload, resume.get(workload_id)),
            "attempt": workload.attempt,
            "simulated_duration_s": workload.simulated_duration_s,
            "nnodes": last_rank[workload_id] + 1,
            "node_rank": ranks[workload_id],
            "master_addr": master["node__name"],
            # GPUs are exclusive, so the master's first GPU index makes the port unique there.
            "master_port": MASTER_PORT_BASE + master["gpu_index"],
        })
    return {"generation": node.generation, "assignments": assignments}


def _env(workload, resume_from: str | None) -> dict[str, str]:
    env = {str(k): str(v) for k, v in workload.env.items()}
    if workload.checkpoint_interval_s:
        env["WANKA_CHECKPOINT_INTERVAL_S"] = str(workload.checkpoint_interval_s)
    env["WANKA_CHECKPOINT_POLICY"] = workload.checkpoint_policy
    if resume_from:
        env["WANKA_RESUME_FROM"] = resume_from
    return env


def sync_nodes(node_ids) -> None:
    """Ask the agents of these nodes to take their desired state again (all at once: a
    recovery of a 1,000-node job tells 1,000 agents)."""
    send_many([(node_group(node_id), {"type": "agent.sync"}) for node_id in sorted(node_ids)])
