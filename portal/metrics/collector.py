"""The Prometheus families of /metrics, worked out at scrape time from the database and Redis.
A scrape reaches one of several ASGI processes and Celery workers do the scheduling, so
nothing here is counted in the scraped process: timings come from `core.measure`, which every
process adds to.

`FleetCollector` is the default scrape: a few grouped queries and Redis reads, its size set by
the numbers of data centers, queues and tenants, not of nodes. `dcgm_exposition`
(/metrics/gpus) relays each GPU's latest heartbeat under the DCGM exporter's names: 100,000
series a family on a 12,500-node cluster, so it is a scrape job of its own."""

import json
import logging
import time
from collections import Counter, defaultdict
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Min, OuterRef, Q, Subquery, Sum
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from redis import RedisError

from portal.cluster.choices import Health
from portal.cluster.models import FaultEvent, Gpu, Node
from portal.cluster.summary import STALE_S, TELEMETRY
from portal.core import measure
from portal.core.redis import client
from portal.quotas.models import Queue, QueueQuota
from portal.services.models import Service, ServiceSample
from portal.workloads.choices import State
from portal.workloads.ettr import window_report
from portal.workloads.models import Allocation, Checkpoint, Recovery, Workload
from portal.workloads.usage import CHARGED, OCCUPIED, as_gpus

log = logging.getLogger(__name__)

DC, MODEL = "leaf__pod__datacenter__name", "gpu_model__name"
ETTR_WINDOW = timedelta(hours=24)
SERVICE = ["tenant", "service"]


def gpus_and_nodes() -> list[Metric]:
    """GPUs by state and nodes by health: two grouped queries."""
    gpus = GaugeMetricFamily(
        "wanka_gpus",
        "GPUs by state: allocated (booked to a workload), free (unbooked on a ready, connected "
        "node; hot spares included), unavailable (unbooked on any other node)",
        labels=["datacenter", "gpu_model", "state"],
    )
    nodes = GaugeMetricFamily(
        "wanka_nodes",
        "Nodes by health and agent connection",
        labels=["datacenter", "health", "connected"],
    )
    states = defaultdict(lambda: {"allocated": 0, "free": 0, "unavailable": 0})
    counts = Counter()
    for row in Node.objects.values(DC, MODEL, "health", "connected").annotate(
        n=Count("id"), gpus=Sum("gpu_count")
    ):
        states[row[DC], row[MODEL]][_unbooked(row)] += row["gpus"]
        counts[row[DC], row["health"], str(row["connected"]).lower()] += row["n"]
    for labels, n in sorted(counts.items()):
        nodes.add_metric(labels, n)
    # A share counts as its share of a GPU: a GPU four quarters hold is one allocated.
    booked = Allocation.objects.values(
        f"node__{DC}", f"node__{MODEL}", "node__health", "node__connected"
    ).annotate(n=Sum(OCCUPIED))
    for row in booked:
        row["n"] = as_gpus(row["n"])
        node = {key.removeprefix("node__"): value for key, value in row.items()}
        of_group = states[node[DC], node[MODEL]]
        of_group[_unbooked(node)] -= row["n"]
        of_group["allocated"] += row["n"]
    for (datacenter, model), by_state in sorted(states.items()):
        for state, n in by_state.items():
            gpus.add_metric([datacenter, model, state], n)
    return [gpus, nodes]


def _unbooked(node: dict) -> str:
    """What an unbooked GPU of a node with this health and connection is."""
    return "free" if node["health"] == Health.READY and node["connected"] else "unavailable"


def queues() -> list[Metric]:
    """Each queue's quota and use per GPU model, and what waits in it."""
    labels = ["tenant", "queue", "gpu_model"]
    guaranteed = GaugeMetricFamily(
        "wanka_queue_guaranteed_gpus", "GPUs of the queue's quota never lent", labels=labels
    )
    nominal = GaugeMetricFamily("wanka_queue_nominal_gpus", "The queue's quota", labels=labels)
    used = GaugeMetricFamily(
        "wanka_queue_used_gpus", "GPUs booked to the queue's workloads", labels=labels
    )
    pending = GaugeMetricFamily(
        "wanka_queue_pending_workloads", "Workloads waiting in the queue", labels=labels[:2]
    )
    oldest = GaugeMetricFamily(
        "wanka_queue_oldest_pending_seconds",
        "How long the queue's longest-waiting workload has waited since it was submitted",
        labels=labels[:2],
    )
    booked = {
        tuple(row): as_gpus(n)
        for *row, n in Allocation.objects.values_list(
            "workload__queue__tenant__slug", "workload__queue__name", f"workload__{MODEL}"
        ).annotate(n=Sum(CHARGED))
    }
    quotas = QueueQuota.objects.values_list(
        "queue__tenant__slug", "queue__name", MODEL, "guarantee", "nominal"
    )
    for *queue, guarantee, quota in quotas:
        guaranteed.add_metric(queue, guarantee)
        nominal.add_metric(queue, quota)
        booked.setdefault(tuple(queue), 0)
    for queue, n in sorted(booked.items()):
        used.add_metric(queue, n)
    waiting = {
        row["queue_id"]: row
        for row in Workload.objects.filter(state=State.PENDING)
        .values("queue_id")
        .annotate(n=Count("id"), since=Min("submitted_at"))
    }
    now = timezone.now()
    for queue_id, *queue in Queue.objects.values_list("id", "tenant__slug", "name"):
        row = waiting.get(queue_id, {"n": 0, "since": now})
        pending.add_metric(queue, row["n"])
        oldest.add_metric(queue, (now - row["since"]).total_seconds())
    return [guaranteed, nominal, used, pending, oldest]


def workloads() -> list[Metric]:
    family = GaugeMetricFamily("wanka_workloads", "Workloads by state", labels=["tenant", "state"])
    for row in Workload.objects.values("tenant__slug", "state").annotate(n=Count("id")):
        family.add_metric([row["tenant__slug"], row["state"]], row["n"])
    return [family]


def scheduling() -> list[Metric]:
    """The scheduling cycles' durations, and the last one's snapshot load and steps."""
    buckets, total = measure.histogram(client().hgetall(measure.CYCLE))
    cycles = HistogramMetricFamily(
        "wanka_scheduling_cycle_seconds",
        "Scheduling cycles' durations: snapshot load, plan and apply",
        buckets=buckets,
        sum_value=total,
    )
    last = measure.last_cycle()
    steps = GaugeMetricFamily(
        "wanka_scheduling_step_seconds", "The last cycle's plan steps", labels=["step"]
    )
    for step, seconds in last.get("steps", {}).items():
        steps.add_metric([step], seconds)
    snapshot = GaugeMetricFamily(
        "wanka_snapshot_load_seconds", "How long the last cycle took to load its snapshot"
    )
    if last:
        snapshot.add_metric([], last["snapshot_s"])
    return [cycles, steps, snapshot]


def fanin() -> list[Metric]:
    """Agent messages per ASGI process, from the counters each keeps in Redis."""
    labels = ["process"]
    handled = CounterMetricFamily(
        "wanka_agent_messages", "Agent messages handled by the process", labels=labels
    )
    seconds = HistogramMetricFamily(
        "wanka_agent_message_handling_seconds",
        "How long the process took to handle an agent message",
        labels=labels,
    )
    connected = GaugeMetricFamily(
        "wanka_agents_connected", "Node agents connected to the process", labels=labels
    )
    for process, fields in measure.fanin_processes().items():
        buckets, total = measure.histogram(fields)
        handled.add_metric([process], float(fields.get("count", 0)))
        seconds.add_metric([process], buckets, total)
        connected.add_metric([process], float(fields.get("connected", 0)))
    return [handled, seconds, connected]


def faults_and_recoveries() -> list[Metric]:
    """Counts of rows deleted only with their node or workload, so counters."""
    faults = CounterMetricFamily(
        "wanka_faults",
        "Faults recorded, by kind (the catalogue's code, such as xid-79) and severity",
        labels=["kind", "severity"],
    )
    for row in FaultEvent.objects.values("kind", "severity").annotate(n=Count("id")):
        faults.add_metric([row["kind"], row["severity"]], row["n"])
    recoveries = CounterMetricFamily(
        "wanka_recoveries", "Recoveries from faults ended, by outcome", labels=["outcome"]
    )
    ended = Recovery.objects.exclude(outcome="").values("outcome").annotate(n=Count("id"))
    for row in ended:
        recoveries.add_metric([row["outcome"]], row["n"])
    return [faults, recoveries]


def ettr() -> list[Metric]:
    """ETTR and goodput per tenant over the last 24 hours, from the workloads ever admitted
    (one never admitted adds nothing to either) that were in that window; checkpoint stalls
    per tenant since the start."""
    until = timezone.now()
    since = until - ETTR_WINDOW
    ratio = GaugeMetricFamily(
        "wanka_ettr_ratio", "Effective training time ratio over the last 24 h", labels=["tenant"]
    )
    goodput = GaugeMetricFamily(
        "wanka_goodput_ratio",
        "Productive GPU-hours over GPU-hours held, over the last 24 h",
        labels=["tenant"],
    )
    admitted = Workload.objects.filter(admitted_at__isnull=False)
    active = (
        admitted.filter(submitted_at__lt=until)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))
        .order_by()
        .values_list("tenant_id", "tenant__slug")
        .distinct()
    )
    for tenant_id, slug in sorted(active, key=lambda row: row[1]):
        report = window_report(admitted.filter(tenant_id=tenant_id), since, until)
        if report["ettr"] is not None:
            ratio.add_metric([slug], report["ettr"])
        if report["goodput"] is not None:
            goodput.add_metric([slug], report["goodput"])
    stalls = CounterMetricFamily(
        "wanka_checkpoint_stall_seconds",
        "Seconds training stood still for checkpoint saves",
        labels=["tenant"],
    )
    for row in Checkpoint.objects.values("workload__tenant__slug").annotate(s=Sum("stall_s")):
        stalls.add_metric([row["workload__tenant__slug"]], row["s"])
    return [ratio, goodput, stalls]


def celery_queues() -> list[Metric]:
    family = GaugeMetricFamily(
        "wanka_celery_queue_length", "Tasks waiting in each Celery queue", labels=["queue"]
    )
    names = sorted({route["queue"] for route in settings.CELERY_TASK_ROUTES.values()})
    with client().pipeline(transaction=False) as pipe:
        for name in names:
            pipe.llen(name)
        lengths = pipe.execute()
    for name, length in zip(names, lengths, strict=True):
        family.add_metric([name], length)
    return [family]


def services() -> list[Metric]:
    """Each active service's replicas wanted and ready, its load and panic at the
    autoscaler's latest tick: one query."""
    families = {
        "wanted": GaugeMetricFamily(
            "wanka_service_replicas_wanted", "Replicas the autoscaler wants", labels=SERVICE
        ),
        "ready": GaugeMetricFamily(
            "wanka_service_replicas_ready", "Replicas serving at the latest tick", labels=SERVICE
        ),
        "in_flight": GaugeMetricFamily(
            "wanka_service_requests_in_flight", "Requests the replicas hold", labels=SERVICE
        ),
        "panic": GaugeMetricFamily("wanka_service_panic", "1 while in panic", labels=SERVICE),
    }
    newest = ServiceSample.objects.filter(service=OuterRef("pk")).order_by("-at")
    rows = Service.objects.filter(active=True).values_list(
        "tenant__slug",
        "name",
        "desired_replicas",
        Subquery(newest.values("ready")[:1]),
        Subquery(newest.values("in_flight")[:1]),
        "panic",
    )
    for tenant, name, *figures in rows:
        for family, value in zip(families.values(), figures, strict=True):
            if value is not None:
                family.add_metric([tenant, name], int(value))
    return list(families.values())


class FleetCollector(Collector):
    """Everything but the per-GPU telemetry. A part that fails on Redis is left out (and
    logged), so that an outage of Redis still leaves the database's families."""

    parts = (
        gpus_and_nodes,
        queues,
        workloads,
        scheduling,
        fanin,
        faults_and_recoveries,
        ettr,
        services,
        celery_queues,
    )

    def collect(self):
        for part in self.parts:
            try:
                yield from part()
            except RedisError:
                log.warning("metrics: %s left out, Redis failed", part.__name__, exc_info=True)


# DCGM exporter field -> (this protocol's heartbeat field, help).
DCGM = {
    "DCGM_FI_DEV_GPU_UTIL": ("util", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mb", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", "Power draw (in W)."),
}


def dcgm_exposition() -> str:
    """Each GPU's latest heartbeat (if under STALE_S old) under the DCGM exporter's names and
    labels (gpu, UUID, device, modelName, Hostname), so that DCGM dashboards work. Written out
    here in the text format: at 100,000 GPUs prometheus_client's writer takes ten times as long.
    """
    nodes = {
        pk: f'modelName="{_escape(model)}",Hostname="{_escape(name)}"'
        for pk, name, model in Node.objects.values_list("id", "name", MODEL)
    }
    uuids = {(n, i): uuid for n, i, uuid in Gpu.objects.values_list("node_id", "index", "uuid")}
    gpus = []  # (labels, GPU sample)
    cutoff = time.time() - STALE_S
    for node_id, raw in client().hscan_iter(TELEMETRY, count=1000):
        sample, node_id = json.loads(raw), int(node_id)
        if sample["ts"] < cutoff or node_id not in nodes:
            continue
        for gpu in sample["gpus"]:
            index = gpu["index"]
            uuid = _escape(uuids.get((node_id, index), ""))
            labels = f'gpu="{index}",UUID="{uuid}",device="nvidia{index}",{nodes[node_id]}'
            gpus.append((labels, gpu))
    lines = []
    for name, (field, doc) in DCGM.items():
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        lines += [f"{name}{{{labels}}} {floatToGoString(gpu[field])}" for labels, gpu in gpus]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """A label value as the text format quotes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
