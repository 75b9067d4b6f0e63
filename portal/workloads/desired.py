"""The desired state of each node: every assignment its agent should run. The database is the
truth: an agent is sent its whole desired state, and on every hello its state again, so a lost
message costs a delay.

Every change to a node's assignments ends in `nodes_changed`, which bumps the nodes'
generations and tells their agents once the transaction commits: one pass per transaction,
however many workloads it moved.
"""

from collections import defaultdict

from django.db import transaction
from django.db.models import Count, F, Max

from portal.cluster.delivery import tell
from portal.cluster.models import Node
from portal.cluster.summary import REPORTED
from portal.core.redis import client
from portal.workloads import allocations, parallel, words
from portal.workloads.choices import CheckpointStatus, State
from portal.workloads.models import (
    Allocation,
    Checkpoint,
    IllegalTransition,
    Workload,
    transition,
)
from scheduler.agent import contract, protocol

MASTER_PORT_BASE = 29500
SHARE_PORTS = 20_000  # master ports of share jobs, after those of whole GPUs
# Redis hash: node id -> the generation its agent was behind at, on the last sweep.
BEHIND = "wanka:behind_generation"


def desired_state(node: Node) -> dict:
    """The `desired_state` message fields for `node`: every assignment it should run."""
    return desired_states([node.pk])[node.pk]


def desired_states(node_ids) -> dict[int, dict]:
    """The `desired_state` message fields of each node, all at once: eight queries for any
    number of nodes and workloads, so telling the 1,000 nodes of a restarted job costs one
    pass, not 1,000.

    An assignment that cannot be sent (it breaks the protocol, or is too large for an agent's
    frame) is left out and its workload failed with the reason, so one bad job never keeps a
    node from hearing about the others."""
    generations = dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "generation"))
    gpus = defaultdict(lambda: defaultdict(list))
    ranks = {}
    for node_id, workload_id, index, rank in Allocation.objects.filter(
        node_id__in=generations
    ).values_list("node_id", "workload_id", "gpu_index", "node_rank"):
        gpus[node_id][workload_id].append(index)
        ranks[node_id, workload_id] = rank
    workloads = Workload.objects.in_bulk({w for on_node in gpus.values() for w in on_node})
    for workload_id, workload in list(workloads.items()):
        if workload.state == State.PREEMPTING and workload.stop_requested_at is not None:
            del workloads[workload_id]  # told to stop: its GPUs stay booked until it has
            for on_node in gpus.values():
                on_node.pop(workload_id, None)
    gangs = _gangs(workloads)
    # Every (re)start resumes from the newest complete checkpoint.
    resume = dict(
        Checkpoint.objects.filter(workload_id__in=workloads, status=CheckpointStatus.COMPLETE)
        .order_by("workload_id", "step")
        .values_list("workload_id", "location")
    )
    plans = parallel.current(workloads)
    states, refused = {}, {}
    for node_id, generation in generations.items():
        sized = []
        for w in sorted(gpus[node_id]):
            assignment = _assignment(
                workloads[w],
                sorted(gpus[node_id][w]),
                ranks[node_id, w],
                gangs[w],
                _env(workloads[w], resume.get(w), plans.get(w)),
            )
            size, why = measured(assignment)
            if why := refused.get(w) or why:
                refused[w] = why
            else:
                sized.append((size, assignment))
        states[node_id] = {"generation": generation, "assignments": _fit(sized, refused)}
    if refused:
        _fail(refused)
    return states


# An assignment this large cannot be what a job needs. A node's desired state goes in parts when
# it is large (`protocol.split_state`), up to DESIRED_STATE_BYTES, which 64 assignments of this
# size fill: more than a node runs at once. A state that would not fit is cut (`_fit`), never
# refused whole.
MAX_ASSIGNMENT_BYTES = protocol.DESIRED_STATE_BYTES // 64


def measured(assignment: dict) -> tuple[int, str | None]:
    """The assignment's size in a desired state, and why it cannot reach an agent (or None)."""
    try:
        size = len(protocol.encode("desired_state", generation=0, assignments=[assignment]))
    except protocol.ProtocolError as error:
        return 0, f"its assignment breaks the agent protocol ({error})"
    if size > MAX_ASSIGNMENT_BYTES:
        return (
            size,
            f"its assignment takes {size:,} bytes, over the {MAX_ASSIGNMENT_BYTES:,} allowed",
        )
    return size, None


def _fit(sized: list[tuple[int, dict]], refused: dict[int, str]) -> list[dict]:
    """The assignments (with their sizes), less the largest while together they would be over
    what an agent takes: those are refused, with the reason."""
    total = sum(size for size, _ in sized)
    kept = sorted(sized, key=lambda pair: pair[0])
    while total > protocol.DESIRED_STATE_BYTES:
        size, cut = kept.pop()
        total -= size
        refused[cut["workload_id"]] = (
            f"its node's desired state would be over the {protocol.DESIRED_STATE_BYTES:,} bytes "
            "an agent takes"
        )
    return sorted((a for _, a in kept), key=lambda a: a["workload_id"])


def _fail(refused: dict[int, str]) -> None:
    """Fail the workloads whose assignment cannot be sent, and free their GPUs."""
    for workload_id, why in refused.items():
        with transaction.atomic():
            workload = Workload.objects.select_for_update().get(pk=workload_id)
            try:
                transition(workload, State.FAILED, reason=words.NOT_SENT.format(why=why))
            except IllegalTransition:
                continue
            nodes_changed(allocations.release(workload))


def _gangs(workload_ids) -> dict[int, tuple[str, int, int, int]]:
    """Each workload's master (rank 0) node and first GPU there, its node count and the GPUs
    it holds: two queries for any number of workloads, never a scan of a large gang's
    allocations per job."""
    gang = Allocation.objects.filter(workload_id__in=workload_ids)
    nodes, held = {}, {}
    for workload_id, last, count in (
        gang.values("workload_id")
        .annotate(last=Max("node_rank"), held=Count("id"))
        .values_list("workload_id", "last", "held")
    ):
        nodes[workload_id], held[workload_id] = last, count
    masters = {}
    for workload_id, name, index in (
        gang.filter(node_rank=0)
        .order_by("-gpu_index")
        .values_list("workload_id", "node__name", "gpu_index")
    ):
        masters[workload_id] = (name, index)  # the lowest index comes last and wins
    return {w: (*masters[w], nodes[w] + 1, held[w]) for w in nodes if w in masters}


def _assignment(workload, indices, rank, gang, env) -> dict:
    master, first_gpu, nnodes, held = gang
    return (
        {
            "workload_id": workload.pk,
            "gpu_indices": indices,
            "command": workload.command,
            "env": env,
            "attempt": workload.attempt,
            "simulated_duration_s": workload.simulated_duration_s,
            # Simulated nodes run a job on fewer GPUs than it asked for that much slower.
            "simulated_speed": held / workload.gpus,
            "nnodes": nnodes,
            "node_rank": rank,
            "master_addr": master,
            "master_port": _master_port(workload, first_gpu),
            "tenant": workload.tenant_id,
        }
        | ({"serve_port": workload.serve_port} if workload.serve_port else {})
        | ({"slices": workload.slices} if workload.slices else {})
        | ({"mig": workload.mig} if workload.mig else {})
    )


def _master_port(workload, first_gpu: int) -> int:
    """A port of its own on its master node: a whole GPU is exclusive, so its master's first
    GPU index makes the port unique there; a share job, one node and one GPU shared with others,
    takes one of a range of its own by its id (two on one node collide one time in 20,000)."""
    if workload.slices or workload.mig:  # a MIG job shares its GPU too
        return MASTER_PORT_BASE + 256 + workload.pk % SHARE_PORTS
    return MASTER_PORT_BASE + first_gpu


def _env(workload, resume_from: str | None, plan: str | None) -> dict[str, str]:
    env = {str(k): str(v) for k, v in workload.env.items()}
    # No interval: the control plane asks for routine saves (`checkpoints.request_routine`).
    env[contract.ENV_CHECKPOINT_POLICY] = workload.checkpoint_policy
    if resume_from:
        env[contract.ENV_RESUME_FROM] = resume_from
    if plan:
        env[contract.ENV_PARALLEL_PLAN] = plan
    return env


def nodes_changed(node_ids) -> None:
    """The assignments of these nodes changed in the current transaction: bump their
    generations and tell their agents once it commits. Call it once per transaction with every
    node the transaction touched, so the agents hear once."""
    node_ids = set(node_ids)
    if not node_ids:
        return
    Node.objects.filter(id__in=node_ids).update(generation=F("generation") + 1)
    # Robust: the resync sweep (`resync_behind`) tells agents a failed send left behind.
    transaction.on_commit(lambda: sync_nodes(node_ids), robust=True)


def sync_nodes(node_ids) -> None:
    """Send the agents of these nodes their desired state, all at once (a recovery of a
    1,000-node job tells 1,000 agents). Called once the change has committed; a consumer that
    already sent a newer generation looks the state up again instead."""
    states = desired_states(list(node_ids))
    tell({node_id: {"type": "agent.sync", "state": state} for node_id, state in states.items()})


def resync_behind() -> list[int]:
    """Connected nodes whose agents are still behind the same generation as on the last sweep
    hear their whole desired state again. A worker that dies between a commit and its
    `sync_nodes`, or a channel message lost with a restarting Redis, then costs one sweep, not
    a job left admitted for good. A node behind for the first time is left alone: its state is
    on its way. One query and three Redis round trips for any number of nodes."""
    generations = dict(Node.objects.filter(connected=True).values_list("pk", "generation"))
    redis = client()
    reached = redis.hmget(REPORTED, list(generations)) if generations else []
    behind = {
        node_id: generation
        for (node_id, generation), at in zip(generations.items(), reached, strict=True)
        if int(at or 0) < generation
    }
    before = redis.hgetall(BEHIND)
    again = [
        node_id
        for node_id, generation in behind.items()
        if before.get(str(node_id)) == str(generation)
    ]
    with redis.pipeline() as pipe:
        pipe.delete(BEHIND)
        if behind:
            pipe.hset(BEHIND, mapping=behind)
        pipe.execute()
    if again:
        sync_nodes(again)
    return again
