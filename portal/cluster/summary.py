"""Cluster-wide figures: capacity and allocation from SQL (a few aggregate queries), busy GPUs
from the latest telemetry in Redis (never one SQL row per sample)."""

import json
import time

from django.db.models import Count, Q, Sum

from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.core.redis import client
from portal.workloads.models import Allocation

TELEMETRY = "telemetry"  # Redis hash: node id -> latest heartbeat, as JSON
HISTORY = "utilization:history"  # Redis list of cluster utilization points, newest last
HISTORY_POINTS = 900  # 30 minutes at one point every 2 s
STALE_S = 30  # telemetry older than this no longer counts as busy
LAST_SEEN = "heartbeats"  # Redis sorted set: node id by time of its last heartbeat


def busy_gpus() -> dict[int, float]:
    """Per node, the sum of its GPUs' utilization as GPU-equivalents (8 x 50 % = 4.0)."""
    now = time.time()
    busy = {}
    for node_id, raw in client().hgetall(TELEMETRY).items():
        sample = json.loads(raw)
        if now - sample["ts"] < STALE_S:
            busy[int(node_id)] = sum(gpu["util"] for gpu in sample["gpus"]) / 100
    return busy


def cluster_summary() -> dict:
    """GPUs, allocated and busy GPUs and ready nodes, per data center and GPU model."""
    rows = (
        Node.objects.values("leaf__pod__datacenter__name", "gpu_model__name")
        .annotate(nodes=Count("id"),
                  ready=Count("id", filter=Q(health=Health.READY, connected=True)),
                  gpus=Sum("gpu_count"))
        .order_by("leaf__pod__datacenter__name", "gpu_model__name")
    )
    allocated = {
        (r["node__leaf__pod__datacenter__name"], r["node__gpu_model__name"]): r["n"]
        for r in Allocation.objects.values(
            "node__leaf__pod__datacenter__name", "node__gpu_model__name"
        ).annotate(n=Count("id"))
    }
    busy_by_node = busy_gpus()
    busy = {}
    for node_id, dc, model in Node.objects.filter(id__in=busy_by_node).values_list(
        "id", "leaf__pod__datacenter__name", "gpu_model__name"
    ):
        busy[dc, model] = busy.get((dc, model), 0) + busy_by_node[node_id]
    groups = [
        {"datacenter": r["leaf__pod__datacenter__name"], "gpu_model": r["gpu_model__name"],
         "nodes": r["nodes"], "ready_nodes": r["ready"], "gpus": r["gpus"],
         "allocated": allocated.get((r["leaf__pod__datacenter__name"], r["gpu_model__name"]), 0),
         "busy": round(busy.get((r["leaf__pod__datacenter__name"], r["gpu_model__name"]), 0), 1)}
        for r in rows
    ]
    total = {key: sum(g[key] for g in groups)
             for key in ("nodes", "ready_nodes", "gpus", "allocated", "busy")}
    return {"ts": time.time(), "total": total, "groups": groups}


def record_point(summary: dict) -> dict:
    """Append the summary's totals to the utilization history and return the point."""
    total = summary["total"]
    point = {"ts": summary["ts"], "gpus": total["gpus"], "allocated": total["allocated"],
             "busy": round(total["busy"], 1)}
    redis = client()
    redis.rpush(HISTORY, json.dumps(point))
    redis.ltrim(HISTORY, -HISTORY_POINTS, -1)
    return point


def history() -> list[dict]:
    return [json.loads(raw) for raw in client().lrange(HISTORY, 0, -1)]
