"""Cluster-wide figures: capacity and allocation from SQL (a few aggregate queries), busy GPUs
from the latest telemetry in Redis (never one SQL row per sample)."""

import json
import time
from collections import defaultdict

from django.db.models import Count, Q, Sum

from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.core.redis import client
from portal.workloads.models import Allocation

TELEMETRY = "telemetry"  # Redis hash: node id -> latest heartbeat, as JSON
BUSY = "busy"  # Redis hash: node id -> [time, busy GPUs, data center, GPU model], as JSON
HISTORY = "utilization:history"  # Redis list of cluster utilization points, newest last
HISTORY_POINTS = 900  # 30 minutes at one point every 2 s
STALE_S = 30  # telemetry older than this no longer counts as busy
LAST_SEEN = "heartbeats"  # Redis sorted set: node id by time of its last heartbeat
REPORTED = "reported_generation"  # Redis hash: node id -> the generation its agent reached
SAVES_SEEN = "checkpoint:"  # Redis keys "<prefix><workload>:<step>": a save already recorded


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
        (r["node__leaf__pod__datacenter__name"], r["node__gpu_model__name"]): r["n"]
        for r in Allocation.objects.values(
            "node__leaf__pod__datacenter__name", "node__gpu_model__name"
        ).annotate(n=Count("id"))
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


def history() -> list[dict]:
    return [json.loads(raw) for raw in client().lrange(HISTORY, 0, -1)]
