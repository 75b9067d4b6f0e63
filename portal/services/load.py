"""What replicas' nodes last said about them: where each listens and its load, from the
heartbeats kept in Redis (`cluster.summary.heartbeats`); nothing is written per heartbeat."""

import time

from portal.cluster.summary import heartbeats
from portal.workloads.choices import TERMINAL
from portal.workloads.models import Allocation

# A report older than this (three heartbeats) no longer counts: the replica is not ready.
FRESH_S = 15.0


def serving(workload_ids) -> dict[int, dict]:
    """Each replica's latest `serving` record (host, port, in_flight, requests_per_s), from
    its first node, for those whose node reported one within FRESH_S."""
    first_nodes = dict(
        Allocation.objects.filter(workload_id__in=list(workload_ids), node_rank=0)
        .values_list("workload_id", "node_id")
        .distinct()
    )
    beats = heartbeats(set(first_nodes.values()))
    fresh_after = time.time() - FRESH_S
    found = {}
    for workload_id, node_id in first_nodes.items():
        beat = beats.get(node_id)
        if beat is None or beat["ts"] < fresh_after:
            continue
        for item in beat["workloads"]:
            if item["workload_id"] == workload_id and "serving" in item:
                found[workload_id] = item["serving"]
    return found


def endpoints(service) -> list[dict]:
    """The replicas serving now, for a load balancer: running, not draining, reported by their
    node within FRESH_S; each with its workload, host, port and requests in flight."""
    replicas = service.replicas.filter(draining_since=None).exclude(workload__state__in=TERMINAL)
    found = serving(replicas.values_list("workload_id", flat=True))
    return [
        {"workload": wid, "host": s["host"], "port": s["port"], "in_flight": s.get("in_flight")}
        for wid, s in sorted(found.items())
    ]
