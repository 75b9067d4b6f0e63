"""What the fleet looks like now: capacity and allocation from SQL (a few aggregate queries),
the latest telemetry from Redis (never one SQL row per sample), which the agents' server writes
on every heartbeat."""

import json
import time
from collections import defaultdict

from django.db.models import Case, Count, F, IntegerField, Q, Sum, Value, When

from portal.cluster.choices import Health
from portal.cluster.models import Node
from portal.core.live import CLUSTER_GROUP, send_now
from portal.core.redis import client
from scheduler.engine.model import SLICES

# Redis keys, under "wanka:" so that none is ever taken for a Celery queue of the same name.
TELEMETRY = "wanka:telemetry"  # Redis hash: node id -> latest heartbeat, as JSON
# Redis hash: node id -> a heartbeat in brief (`brief`), as JSON: what the dashboard's busy GPUs
# and the cluster map read for every node, without the 12 MB of full samples at 12,500 nodes.
BUSY = "wanka:busy"
HISTORY = "wanka:utilization:history"  # Redis list of cluster utilization points, newest last
HISTORY_POINTS = 900  # 30 minutes at one point every 2 s
# The same rolled up, each point the mean of the finer points of its minute or hour: a day of
# minutes and 30 days of hours; `ROLLED` holds the newest minute and hour already rolled.
ROLLUPS = {  # resolution: (Redis list, seconds a point, points kept, rolled from)
    "minute": ("wanka:utilization:minutes", 60, 1440, HISTORY),
    "hour": ("wanka:utilization:hours", 3600, 720, "wanka:utilization:minutes"),
}
ROLLED = "wanka:utilization:rolled"
# The ranges the charts offer: (resolution or None for the raw points, seconds shown).
RANGES = {
    "30m": (None, 1800), "1h": ("minute", 3600), "6h": ("minute", 6 * 3600),
    "24h": ("minute", 86400), "7d": ("hour", 7 * 86400), "30d": ("hour", 30 * 86400),
}  # fmt: skip
STALE_S = 30  # telemetry older than this no longer counts as busy
LAST_SEEN = "wanka:heartbeats"  # Redis sorted set: node id by time of its last heartbeat
# Since when LAST_SEEN has been kept (set by the lost-node check when missing): a Redis that
# restarted empty knows no heartbeat from before then, which is not silence.
SEEN_SINCE = "wanka:heartbeats:since"
# The web tier's own heartbeat: each ASGI process that serves agents writes the time here every
# second (`listening`); when it finds the last one over WEB_GAP_S old (every process was down,
# or Redis restarted empty), or it has just started (the agents of the process it replaces are
# coming back to it), it writes the time in WEB_UP_SINCE too. Silence from before then is the
# control plane's deafness, not the nodes'.
WEB_BEAT = "wanka:web:beat"
WEB_UP_SINCE = "wanka:web:since"
WEB_GAP_S = 3.0


def listening(redis, now: float, started: bool = False) -> None:
    """An ASGI process serving agents is up at `now` (a synchronous Redis client); `started`:
    it has just started."""
    last = redis.getset(WEB_BEAT, now)
    if started or last is None or now - float(last) > WEB_GAP_S:
        redis.set(WEB_UP_SINCE, now)


def deaf_since(redis, now: float) -> float:
    """Since when the control plane could hear heartbeats without a break: when Redis began
    keeping them and the web tier came back, whichever is later; `now` while the web tier is
    down. 0 where no web process has ever said (nothing known)."""
    beat, since = redis.mget(WEB_BEAT, WEB_UP_SINCE)
    if beat is None:
        return 0.0
    return now if now - float(beat) > WEB_GAP_S else float(since or now)


REPORTED = "wanka:reported_generation"  # Redis hash: node id -> the generation its agent reached


def write_heartbeat(pipe, node_id: int, now: float, message: dict, group: tuple) -> None:
    """Queue on `pipe` a heartbeat's sample and its brief; `group` is the node's (data center,
    GPU model)."""
    sample = {"ts": now, "gpus": message["gpus"], "workloads": message["workloads"]}
    pipe.hset(TELEMETRY, node_id, json.dumps(sample))
    pipe.hset(BUSY, node_id, json.dumps(brief(now, message["gpus"], group)))


def brief(now: float, gpus: list[dict], group: tuple) -> list:
    """[time, busy GPUs (the sum of their utilization: 8 at 50 % make 4.0), data center, GPU
    model, GPUs reported, memory used (MiB), hottest GPU (C), power (W)]."""
    return [
        now,
        sum(g["util"] for g in gpus) / 100,
        *group,
        len(gpus),
        sum(g["memory_used_mb"] for g in gpus),
        max((g["temperature_c"] for g in gpus), default=None),
        round(sum(g["power_w"] for g in gpus)),
    ]


def busy_gpus() -> dict[tuple[str, str], float]:
    """Busy GPUs per (data center, GPU model): the sum of fresh heartbeats' utilization in GPUs
    (8 GPUs at 50 % make 4.0). Kept apart from the full samples, so this reads small values."""
    cutoff = time.time() - STALE_S
    busy = defaultdict(float)
    for raw in client().hvals(BUSY):
        ts, gpus, datacenter, model, *_ = json.loads(raw)
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
    eighths = held_eighths("allocations__")
    allocated = {
        (r["leaf__pod__datacenter__name"], r["gpu_model__name"]): from_eighths(r["n"] or 0)
        for r in Node.objects.values("leaf__pod__datacenter__name", "gpu_model__name").annotate(
            n=Sum(eighths)
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


def held_eighths(path: str = "") -> Case:
    """What an allocation (at `path`, e.g. "allocations__") holds of its GPU, in eighths: a
    whole GPU, or a share's (a MIG instance's memory slots)."""
    return Case(
        When(**{f"{path}slices": 0}, then=Value(SLICES)),
        default=F(f"{path}slices"),
        output_field=IntegerField(),
    )


def from_eighths(eighths: int) -> int | float:
    """GPUs from eighths: whole ones stay an int, as they always were."""
    return eighths // SLICES if eighths % SLICES == 0 else eighths / SLICES


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
    roll_up(point["ts"])
    return point


def roll_up(now: float) -> None:
    """Append the mean point of every minute (and hour) that has ended since the last roll to
    that resolution's list, from the finer points it holds; a minute with none is skipped. One
    writer: the beat task that records."""
    redis = client()
    for resolution, (key, step, keep, finer) in ROLLUPS.items():
        current = int(now // step)
        last = redis.hget(ROLLED, resolution)
        if last is not None and int(last) >= current - 1:
            continue
        ended = defaultdict(list)
        for p in map(json.loads, redis.lrange(finer, -keep, -1)):
            if (last is None or int(p["ts"] // step) > int(last)) and p["ts"] < current * step:
                ended[int(p["ts"] // step)].append(p)
        for slot, points in sorted(ended.items()):
            mean = {k: sum(p[k] for p in points) / len(points) for k in ("allocated", "busy")}
            redis.rpush(key, json.dumps({"ts": slot * step, "gpus": points[-1]["gpus"], **mean}))
        redis.ltrim(key, -keep, -1)
        redis.hset(ROLLED, resolution, current - 1)


def publish_utilization() -> None:
    """Roll up the latest telemetry, keep the point in the history and push both to every
    signed-in browser."""
    summary = cluster_summary()
    point = record_point(summary)
    payload = {"point": point, "summary": summary}
    send_now(CLUSTER_GROUP, {"type": "live.event", "event": "utilization", "payload": payload})


def history(span: str = "30m", now: float | None = None) -> list[dict]:
    """Utilization points over one of `RANGES` up to now: every 2 s for the last 30 minutes,
    a point a minute up to a day, an hour up to 30 days."""
    resolution, seconds = RANGES[span]
    key = HISTORY if resolution is None else ROLLUPS[resolution][0]
    since = (time.time() if now is None else now) - seconds
    return [p for p in map(json.loads, client().lrange(key, 0, -1)) if p["ts"] >= since]


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


def reported_steps(samples: dict[int, dict], workload_id: int, attempt: int) -> dict[int, int]:
    """From `heartbeats`: the training step that attempt of the workload reports on each node
    that runs it and reports one (the contract's progress); a job that reports none has none."""
    steps = {}
    for node_id, sample in samples.items():
        for item in sample.get("workloads", []):
            if (
                item["workload_id"] == workload_id
                and item["state"] == "running"
                and item.get("attempt", 0) == attempt
                and item.get("progress") is not None
            ):
                steps[node_id] = item["progress"]
    return steps


def reported_share(samples: dict[int, dict], workload_id: int, attempt: int) -> dict | None:
    """From `heartbeats`: how the node running that attempt of a share job holds it to its
    share (the agent's `share` record), or None when no agent says."""
    for sample in samples.values():
        for item in sample.get("workloads", []):
            if (
                item["workload_id"] == workload_id
                and item["state"] == "running"
                and item.get("attempt", 0) == attempt
                and item.get("share")
            ):
                return item["share"]
    return None
