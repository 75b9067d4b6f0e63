"""What the fleet looks like now: capacity and allocation from SQL (a few aggregate queries),
the latest telemetry from Redis (never one SQL row per sample), which the agents' server writes
on every heartbeat."""

import json
import time
from collections import defaultdict

from django.db.models import Count, Q, Sum

from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.core.live import CLUSTER_GROUP, send_now
from portal.core.redis import client

# Redis keys, under "wanka:" so that none is ever taken for a Celery queue of the same name.
TELEMETRY = "wanka:telemetry"  # Redis hash: node id -> latest heartbeat, as JSON
BUSY = "wanka:busy"  # Redis hash: node id -> [time, busy GPUs, data center, GPU model], as JSON
HISTORY = "wanka:utilization:history"  # Redis list of cluster utilization points, newest last
HISTORY_POINTS = 900  # 30 minutes at one point every 2 s
STALE_S = 30  # telemetry older than this no longer counts as busy
LAST_SEEN = "wanka:heartbeats"  # Redis sorted set: node id by time of its last heartbeat
# Since when LAST_SEEN has been kept (set by the lost-node check when missing): a Redis that
# restarted empty knows no heartbeat from before then, which is not silence.
SEEN_SINCE = "wanka:heartbeats:since"
REPORTED = "wanka:reported_generation"  # Redis hash: node id -> the generation its agent reached


def busy_gpus() -> dict[tuple[str, str], float]:
    """Busy GPUs per (data center, GPU model): the sum of fresh heartbeats' utilization in GPUs
    (8 GPUs at 50 % make 4.0). Kept apart from the full samples, so this reads small values."""
    cutoff = time.time() - STALE_S
    busy = defaultdict(float)
    for raw in client().hvals(BUSY):
        ts, gpus, datacenter, model = json.loads(raw)
        if ts >= cutoff:
            busy[datacenter, model] += gpus
    return busy


def cluster_summary() -> dict:
    """GPUs, allocated and busy GPUs and ready nodes, per data center and GPU model."""
    rows = (
        Node.objects.values("leaf__pod__datacenter__name", "gpu_model__name")
        .annotate(
            nodes=Count("id"),
            ready=Count("id", filter=Q(health=Health.READY, connected=True)),
            gpus=Sum("gpu_count"),
        )
        .order_by("leaf__pod__datacenter__name", "gpu_model__name")
    )
    allocated = {
        (r["leaf__pod__datacenter__name"], r["gpu_model__name"]): r["n"]
        for r in Node.objects.values("leaf__pod__datacenter__name", "gpu_model__name").annotate(
            n=Count("allocations")
        )
    }
    busy = busy_gpus()
    groups = []
    for r in rows:
        key = (r["leaf__pod__datacenter__name"], r["gpu_model__name"])
        groups.append(
            {
                "datacenter": key[0],
                "gpu_model": key[1],
                "nodes": r["nodes"],
                "ready_nodes": r["ready"],
                "gpus": r["gpus"],
                "allocated": allocated.get(key, 0),
                "busy": round(busy.get(key, 0), 1),
            }
        )
    total = {
        key: sum(g[key] for g in groups)
        for key in ("nodes", "ready_nodes", "gpus", "allocated", "busy")
    }
    return {"ts": time.time(), "total": total, "groups": groups}


def record_point(summary: dict) -> dict:
    """Append the summary's totals to the utilization history and return the point."""
    total = summary["total"]
    point = {
        "ts": summary["ts"],
        "gpus": total["gpus"],
        "allocated": total["allocated"],
        "busy": round(total["busy"], 1),
    }
    redis = client()
    redis.rpush(HISTORY, json.dumps(point))
    redis.ltrim(HISTORY, -HISTORY_POINTS, -1)
    return point


def publish_utilization() -> None:
    """Roll up the latest telemetry, keep the point in the history and push both to every
    signed-in browser."""
    summary = cluster_summary()
    point = record_point(summary)
    payload = {"point": point, "summary": summary}
    send_now(CLUSTER_GROUP, {"type": "live.event", "event": "utilization", "payload": payload})


def history() -> list[dict]:
    return [json.loads(raw) for raw in client().lrange(HISTORY, 0, -1)]


def node_live(node_id: int) -> dict:
    """A node's latest heartbeat (per GPU: utilization, memory, temperature, power, ECC) and
    the generation its agent has reached since; empty before its first heartbeat. (Shown to
    every tenant: it names no workload.)"""
    sample = heartbeats([node_id]).get(node_id)
    if sample is None:
        return {}
    return {key: sample[key] for key in ("ts", "gpus", "reported_generation")}


def heartbeats(node_ids) -> dict[int, dict]:
    """The latest heartbeat of each node that has one: its time, GPUs, the workloads its agent
    runs and the generation it has reached; two Redis round trips for any number of nodes."""
    node_ids = list(node_ids)
    if not node_ids:
        return {}
    redis = client()
    samples = redis.hmget(TELEMETRY, node_ids)
    reached = redis.hmget(REPORTED, node_ids)
    return {
        node_id: {**json.loads(sample), "reported_generation": int(generation or 0)}
        for node_id, sample, generation in zip(node_ids, samples, reached, strict=True)
        if sample is not None
    }
