"""What the control plane tells node agents. The database is the truth: an agent is only ever
told "look again" and then sent its whole desired state, so a lost message costs a delay."""

from collections import defaultdict

from portal.cluster.models import Node
from portal.core.live import node_group, send_now

MASTER_PORT_BASE = 29500


def desired_state(node: Node) -> dict:
    """The `desired_state` message fields for `node`: every assignment it should run."""
    from portal.workloads.models import Allocation

    here = Allocation.objects.filter(node=node).values("workload_id")
    gangs = defaultdict(lambda: defaultdict(list))
    workloads = {}
    for alloc in Allocation.objects.filter(workload_id__in=here).select_related(
        "workload", "node"
    ):
        gangs[alloc.workload_id][alloc.node.name].append(alloc.gpu_index)
        workloads[alloc.workload_id] = alloc.workload
    assignments = []
    for workload_id, by_node in sorted(gangs.items()):
        names = sorted(by_node)
        workload = workloads[workload_id]
        assignments.append({
            "workload_id": workload_id,
            "gpu_indices": sorted(by_node[node.name]),
            "command": workload.command,
            "env": {str(k): str(v) for k, v in workload.env.items()},
            "simulated_duration_s": workload.simulated_duration_s,
            "nnodes": len(names),
            "node_rank": names.index(node.name),
            "master_addr": names[0],
            "master_port": MASTER_PORT_BASE + workload_id % 1000,
        })
    return {"generation": node.generation, "assignments": assignments}


def sync_nodes(node_ids) -> None:
    """Ask the agents of these nodes to take their desired state again."""
    for node_id in sorted(node_ids):
        send_now(node_group(node_id), {"type": "agent.sync"})
