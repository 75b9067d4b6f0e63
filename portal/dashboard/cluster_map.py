"""The cluster map for operators: every node of every data center, pod and leaf as one cell of
a heatmap (health, GPUs held, utilization, memory, temperature, power), drawn from the node
records and the latest heartbeats in Redis; a cell's hover names the workloads on the node, a
click opens the node's page (its GPUs now and over time, its workloads, faults and lifecycle).

Built for 12,500 nodes: four queries and one Redis read, and columns (one list per figure)
rather than a record per node, so the page's JSON stays small and the browser draws it at once.
"""

import csv
import json
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Q, Sum
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from portal.cluster import gpu_history
from portal.cluster.choices import Health
from portal.cluster.models import FaultEvent, Gpu, Node
from portal.cluster.summary import BUSY, STALE_S, node_live
from portal.core.access import operator_page
from portal.core.models import AuditEvent
from portal.core.redis import client
from portal.dashboard import nodes
from portal.dashboard.views import RANGE_NAMES
from portal.workloads.models import Allocation
from portal.workloads.usage import OCCUPIED, as_gpus
from scheduler import faults

# A cell's health is its index here; "failed": down because a fault took it down (drawn apart
# from a node an operator took down or that drained empty).
HEALTH = [*Health.values, "failed"]


def cluster_map() -> dict:
    """The map's columns: per node its row (a leaf, "datacenter / pod / leaf"), column (its
    place in the leaf), name, health, GPUs and GPUs held, and from a heartbeat fresher than
    STALE_S its mean utilization and memory used (%), hottest GPU (C) and power (W); None
    without one. `mig`: its GPUs' MIG instances ("" where none is in MIG mode)."""
    nodes = Node.objects.order_by(
        "leaf__pod__datacenter__name", "leaf__pod__name", "leaf__name", "name"
    ).values_list(
        "id", "name", "leaf__pod__datacenter__name", "leaf__pod__name", "leaf__name", "health",
        "gpu_count",
    )  # fmt: skip
    held, shared = {}, False
    for node_id, occupied, shares_here in (
        Allocation.objects.values("node_id")
        .annotate(n=Sum(OCCUPIED), shares=Count("id", filter=Q(slices__gt=0)))
        .values_list("node_id", "n", "shares")
    ):
        held[node_id], shared = occupied, shared or bool(shares_here)
    shares = _shares() if shared else {}  # a query more only where GPUs are shared
    memory, in_mig = {}, False
    for node_id, mb, mig_gpus in (
        Gpu.objects.values("node_id")
        .annotate(mb=Sum("memory_mb"), mig=Count("id", filter=~Q(mig={})))
        .values_list("node_id", "mb", "mig")
    ):
        memory[node_id], in_mig = mb, in_mig or bool(mig_gpus)
    jobs = defaultdict(set)
    for node_id, name in Allocation.objects.values_list("node_id", "workload__name").distinct():
        jobs[node_id].add(name)
    failed = _failed()
    beats = client().hgetall(BUSY)
    fresh_after = time.time() - STALE_S
    rows, columns = [], defaultdict(list)
    leaf, place = None, 0
    for node_id, name, datacenter, pod, leaf_name, health, gpus in nodes:
        if (datacenter, pod, leaf_name) != leaf:
            leaf, place = (datacenter, pod, leaf_name), 0
            rows.append(f"{datacenter} / {pod} / {leaf_name}")
        figures = _figures(beats.get(str(node_id)), fresh_after, memory.get(node_id))
        for key, value in (
            ("id", node_id), ("row", len(rows) - 1), ("col", place), ("name", name),
            ("health", HEALTH.index("failed" if node_id in failed else health)),
            ("gpus", gpus), ("held", as_gpus(held.get(node_id, 0))),
            ("shares", shares.get(node_id, "")),
            *figures.items(), ("jobs", ", ".join(sorted(jobs.get(node_id, ())))),
        ):  # fmt: skip
            columns[key].append(value)
        place += 1
    mig = _mig() if in_mig else {}  # a query more only where GPUs are in MIG mode
    columns["mig"] = [mig.get(node_id, "") for node_id in columns["id"]]
    return {"rows": rows, "health_names": HEALTH, **columns}


def _shares() -> dict[int, str]:
    """Per node with shared GPUs, each of them: how much of it its share jobs hold, and how
    many they are ("GPU 3: 6/8 held by 3 share jobs"); one query, of shares only (a MIG job's
    booking holds memory slots, and its GPU's line is in `_mig`)."""
    gpus = defaultdict(lambda: [0, 0])
    shares = Allocation.objects.filter(slices__gt=0, workload__mig="")
    for node_id, index, slices in shares.values_list("node_id", "gpu_index", "slices"):
        gpus[node_id, index][0] += slices
        gpus[node_id, index][1] += 1
    said = defaultdict(list)
    for (node_id, index), (eighths, jobs) in sorted(gpus.items()):
        words = ngettext(
            "GPU %(index)s: %(eighths)s/8 held by %(jobs)s share job",
            "GPU %(index)s: %(eighths)s/8 held by %(jobs)s share jobs",
            jobs,
        )
        said[node_id].append(words % {"index": index, "eighths": eighths, "jobs": jobs})
    return {node_id: "; ".join(lines) for node_id, lines in said.items()}


def _mig() -> dict[int, str]:
    """Per node with GPUs in MIG mode (or going to it), a line per such GPU: its MIG devices'
    profiles and which are in use ("GPU 0: 3g.40gb (in use), 2g.20gb"); one query, of those
    GPUs only."""
    said = defaultdict(list)
    for node_id, index, layout in Gpu.objects.exclude(mig={}).values_list(
        "node_id", "index", "mig"
    ):
        said[node_id].append(_mig_line(index, layout))
    return {node_id: "<br>".join(lines) for node_id, lines in said.items()}


def _mig_line(index: int, layout: dict) -> str:
    """A GPU's MIG layout in a line, in the reader's language."""
    if not layout["enabled"]:
        return _("GPU %(index)s: MIG on at its next reset") % {"index": index}
    devices = [
        _("%(profile)s (in use)") % {"profile": d["profile"]} if d["in_use"] else d["profile"]
        for d in layout["devices"]
    ]
    line = _("GPU %(index)s: %(devices)s") % {
        "index": index,
        "devices": ", ".join(devices) or _("MIG on, no MIG instance"),
    }
    return line if layout["pending"] else _("%(line)s; MIG off at its next reset") % {"line": line}


def _failed() -> set[int]:
    """Down nodes a fault took down: one it recorded as it moved them (a second before)."""
    took_down = FaultEvent.objects.filter(
        node__health=Health.DOWN,
        occurred_at__lte=F("node__health_changed_at"),
        occurred_at__gte=F("node__health_changed_at") - timedelta(seconds=1),
    ).exclude(kind__in=faults.OPERATOR_KINDS)
    return set(took_down.values_list("node_id", flat=True))


def _figures(raw: str | None, fresh_after: float, memory_mb: int | None) -> dict:
    """A node's figures from its heartbeat's brief (`summary.brief`), None each without a
    fresh one."""
    brief = json.loads(raw) if raw else [0]
    if brief[0] < fresh_after or len(brief) < 8 or not brief[4]:  # stale, old or empty
        return {"util": None, "memory": None, "temperature": None, "power": None}
    _, busy, _, _, gpus, used, hottest, power = brief
    return {
        "util": round(100 * busy / gpus, 1),
        "memory": round(100 * used / memory_mb, 1) if memory_mb else None,
        "temperature": hottest,
        "power": power,
    }


@operator_page
def cluster_map_page(request):
    # In the reader's language.
    labels = [str(Health(value).label) for value in HEALTH[:-1]] + [_("Failed")]
    return render(
        request, "dashboard/cluster_map.html", {"map": {**cluster_map(), "health_labels": labels}}
    )


@operator_page
def node_page(request, pk):
    """One node: where it sits and its state, each GPU's latest figures, MIG instances and
    history over `?range=` (1 h by default), the workloads on it, its faults and its lifecycle
    (the audit trail of its moves)."""
    node = get_object_or_404(
        Node.objects.select_related("leaf__pod__datacenter", "gpu_model"), pk=pk
    )
    span = request.GET.get("range")
    span = span if span in gpu_history.SPANS else "1h"
    history = AuditEvent.objects.filter(object_type="cluster.node", object_id=str(node.pk))
    live = node_live(node.pk)
    return render(
        request,
        "dashboard/node.html",
        {
            "node": node,
            "live": live,
            "seen": datetime.fromtimestamp(live["ts"], UTC) if live else None,
            "workloads": nodes.jobs_here(node),
            "mig": node.gpus.exclude(mig={}),
            "moves": nodes.allowed(node),
            "faults": node.faults.all()[:50],
            "history": history.select_related("actor").order_by("-at", "-id")[:50],
            "telemetry": gpu_history.by_gpu(gpu_history.node_history(node.pk, span)),
            "ranges": {key: RANGE_NAMES[key] for key in gpu_history.SPANS},
        },
    )


# DCGM exporter's names for the figures, as a CSV's columns.
DCGM = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE"]  # fmt: skip


def node_telemetry(request, pk, fmt):
    """A node's GPU history over `?range=` (1h to 30d): JSON in columns for its page's charts,
    or CSV with a row per time and GPU. Operators only: anyone else is refused (403)."""
    if not (request.user.is_active and request.user.is_staff):
        raise PermissionDenied
    if fmt not in ("json", "csv"):
        raise Http404
    node = get_object_or_404(Node.objects.only("name"), pk=pk)
    span = request.GET.get("range", "1h")
    if span not in gpu_history.SPANS:
        error = _("Unknown range “%(range)s”: ask for one of %(ranges)s.") % {
            "range": span,
            "ranges": ", ".join(gpu_history.SPANS),
        }
        return JsonResponse({"error": error}, status=400)
    found = gpu_history.node_history(node.pk, span)
    if fmt == "json":
        return JsonResponse(gpu_history.by_gpu(found))
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{node.name}-gpus-{span}.csv"'
    writer = csv.writer(response)
    writer.writerow(["time", "gpu", *DCGM])
    for ts, rows in found["points"]:
        at = datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")
        writer.writerows([at, *row] for row in rows)
    return response
