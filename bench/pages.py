"""Server time and queries of every page at full size, for a tenant's member and an operator.

    DATABASE_URL=postgres://... python -m bench.pages [--gpus 100000] [--pending 10000]
        [--repeat 10] [--check]

A throwaway database with `bench.snapshot`'s fleet: 12,500 nodes of 8 GPUs at 100,000 GPUs, 20
tenants of 10 queues each in 20 cohorts, 85 % of the nodes held by about 5,000 running jobs
(gangs of 1 to 4 nodes), `--pending` waiting jobs, a finished job per 5 GPUs with its booked
GPU-hours over the last 30 days, every job's events and 1,000 faults; a Redis server of its own
holding a heartbeat of every node. Each page is asked for once to warm up, then `--repeat`
times through Django's test client, what pages keep forgotten before each (the process's cache,
the tenants' day charts; the cluster's are kept by a beat task, which is timed apart): the
server's whole work for a page (middleware, views, templates; not the network or the browser),
timed on the wall clock, its queries counted. One line per page: median, 95th percentile and
slowest time, queries, kilobytes. The last line is JSON: gpus, nodes, running, pending, pages
({name:
{p50_ms, p95_ms, queries, kb}}), worst_p95_ms, over_budget (pages whose p95 is 500 ms or more),
day_charts_ms (the cluster's dashboard charts of a day, a week and a month, worked out by a beat
task: the day's every 30 s, the others before they expire),
reference_s (the reference loop, `bench.reference`, timed first) and load_average. With
`--check` it exits 1 when a page is over budget.
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench import database
from bench.reference import reference_s
from bench.snapshot import seed as seed_fleet

BUDGET_MS = 500
RUNNING_SIZES = (1, 1, 1, 1, 2, 2, 2, 3, 4, 4)  # nodes a running job holds: about 5,000 jobs


def seed(gpus: int, pending: int, rng: random.Random) -> dict:
    """The fleet and its history; returns the figures and the objects the pages are about."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from portal.cluster.models import FaultEvent, Node
    from portal.quotas.models import Cohort, Queue
    from portal.tenancy.choices import Role
    from portal.tenancy.models import Membership, Tenant
    from portal.workloads.models import Allocation, UsageRecord, Workload

    figures = seed_fleet(gpus, pending, rng, RUNNING_SIZES)
    now = timezone.now()
    cohorts = Cohort.objects.bulk_create(Cohort(name=f"cohort-{i}") for i in range(20))
    queues = list(Queue.objects.order_by("id"))
    for i, queue in enumerate(queues):
        queue.cohort = cohorts[i % 20]
    Queue.objects.bulk_update(queues, ["cohort"])
    began = now - timedelta(hours=6)
    Workload.objects.filter(state="running").update(started_at=began, admitted_at=began)
    Allocation.objects.update(created_at=began)
    tenant = Tenant.objects.get(slug="t0")
    member = User.objects.create_user("member", password="pw-member")
    Membership.objects.create(user=member, tenant=tenant, role=Role.MEMBER)
    operator = User.objects.create_superuser("operator", password="pw-operator")
    Workload.objects.filter(tenant=tenant).update(submitted_by=member)
    model = queues[0].quotas.first().gpu_model
    runs = []
    count = gpus // 5  # 20,000 at 100,000 GPUs
    for i in range(count):
        started = now - timedelta(days=30 * i / count, hours=12)
        runs.append((rng.choice(queues), started, started + timedelta(hours=rng.uniform(0.1, 12))))
    finished = Workload.objects.bulk_create(
        (
            Workload(
                tenant_id=queue.tenant_id,
                queue=queue,
                name="done",
                gpu_model=model,
                gpus=8,
                state="succeeded",
                submitted_at=started,
                started_at=started,
                finished_at=ended,
            )  # fmt: skip
            for queue, started, ended in runs
        ),
        batch_size=5000,
    )
    UsageRecord.objects.bulk_create(
        (
            UsageRecord(
                tenant_id=w.tenant_id,
                workload=w,
                gpu_model=model,
                gpus=8,
                started_at=w.started_at,
                ended_at=w.finished_at,
                gpu_hours=8 * (w.finished_at - w.started_at).total_seconds() / 3600,
            )  # fmt: skip
            for w in finished
        ),
        batch_size=5000,
    )
    _events(began)
    nodes = list(Node.objects.values_list("id", flat=True))
    FaultEvent.objects.bulk_create(
        FaultEvent(node_id=rng.choice(nodes), kind="xid", code=79, severity="critical")
        for _ in range(1000)
    )
    _heartbeats(rng)
    job = Workload.objects.filter(tenant=tenant, state="running").order_by("id").first()
    return {
        **figures,
        "running": Workload.objects.filter(state="running").count(),
        "member": member,
        "operator": operator,
        "job": job,
        "node": job.allocations.first().node_id,
    }


def _events(began) -> None:
    """Each running job's way from the queue to running, each finished one's to its end: the
    history ETTR is read from."""
    from django.db.models import OuterRef, Subquery

    from portal.workloads.models import Workload, WorkloadEvent

    path = [("pending", "admitted"), ("admitted", "starting"), ("starting", "running")]
    for state, steps in (("running", path), ("succeeded", [*path, ("running", "succeeded")])):
        ids = list(Workload.objects.filter(state=state).values_list("id", flat=True))
        WorkloadEvent.objects.bulk_create(
            (WorkloadEvent(workload_id=i, from_state=a, to_state=b) for i in ids for a, b in steps),
            batch_size=5000,
        )
    WorkloadEvent.objects.filter(workload__state="running").update(at=began)
    finished = Workload.objects.filter(pk=OuterRef("workload_id"))
    WorkloadEvent.objects.filter(workload__state="succeeded").update(
        at=Subquery(finished.values("started_at")[:1])
    )
    WorkloadEvent.objects.filter(to_state="succeeded").update(
        at=Subquery(finished.values("finished_at")[:1])
    )


def _heartbeats(rng: random.Random) -> None:
    """A fresh heartbeat of every node in Redis, written as the agents' server writes them."""
    from portal.cluster.models import Node
    from portal.cluster.summary import write_heartbeat
    from portal.core.redis import client

    now = time.time()
    nodes = list(Node.objects.values_list("id", "leaf__pod__datacenter__name", "gpu_model__name"))
    for start in range(0, len(nodes), 1000):
        with client().pipeline(transaction=False) as pipe:
            for node, *group in nodes[start : start + 1000]:
                gpus = [
                    {
                        "index": i,
                        "util": rng.uniform(0, 100),
                        "memory_used_mb": rng.randrange(81_920),
                        "temperature_c": 60.0,
                        "power_w": 500.0,
                        "ecc_sbe": 0,
                        "ecc_dbe": 0,
                        "retired_pages": 0,
                    }  # fmt: skip
                    for i in range(8)
                ]
                message = {"gpus": gpus, "workloads": []}
                write_heartbeat(pipe, node, now, message, tuple(group))
            pipe.execute()


def pages(objects: dict) -> list[tuple[str, str, str]]:
    """(name, who, path) of every page."""
    job, node = objects["job"].pk, objects["node"]
    member = [
        ("dashboard", "/"), ("workloads", "/workloads/"),
        ("workloads pending", "/workloads/?state=pending"), ("workload", f"/workloads/{job}/"),
        ("submit", "/workloads/new/"), ("services", "/services/"), ("quota", "/quota/"),
        ("queues", "/queues/"), ("usage", "/usage/"), ("tokens", "/tokens/"),
        ("notifications", "/notifications/"),
    ]  # fmt: skip
    operator = [
        ("dashboard", "/"), ("queues", "/queues/"), ("usage", "/usage/"),
        ("cluster map", "/ops/cluster/"), ("node", f"/ops/nodes/{node}/"),
        ("all workloads", "/ops/workloads/"), ("all pending", "/ops/workloads/?state=pending"),
        ("workload", f"/ops/workloads/{job}/"), ("preempt", f"/ops/workloads/{job}/preempt/"),
        ("drain", f"/ops/nodes/{node}/drain/"), ("requests", "/ops/quota-requests/"),
        ("fault drill", "/ops/drill/"),
        ("what-if", "/ops/whatif/"),
    ]  # fmt: skip
    return [(name, "member", path) for name, path in member] + [
        (name, "operator", path) for name, path in operator
    ]


def forget_kept() -> None:
    """Empty the process's cache and the tenants' day charts (kept a minute after a page
    worked them out); the cluster's stay, as the beat task keeps them."""
    from django.core.cache import cache

    from portal.core.redis import client
    from portal.workloads.charts import KEY

    cache.clear()
    if kept := [key for key in client().keys(f"{KEY}*") if not key.endswith(":all")]:
        client().delete(*kept)


def measure(client, path: str, repeat: int) -> dict:
    """Each request with what pages keep forgotten first (`forget_kept`): what a page costs
    when nothing it worked out before is kept."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    answer = client.get(path)  # warm
    if answer.status_code != 200:
        raise SystemExit(f"{path} answered {answer.status_code}")
    times = []
    for _ in range(repeat):
        forget_kept()
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            answer = client.get(path)
            times.append(time.perf_counter() - started)
    times.sort()
    return {
        "p50_ms": round(1000 * statistics.median(times), 1),
        "p95_ms": round(1000 * times[min(len(times) - 1, int(0.95 * len(times)))], 1),
        "max_ms": round(1000 * times[-1], 1),
        "queries": len(queries.captured_queries),
        "kb": round(len(answer.content) / 1024, 1),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--check", action="store_true", help=f"exit 1 past {BUDGET_MS} ms")
    args = parser.parse_args(argv)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    from portal import redis_server

    with tempfile.TemporaryDirectory(prefix="wanka-pages-") as scratch:
        os.environ["REDIS_URL"] = redis_server.ensure(Path(scratch))
        with database.throwaway():
            from django.test import Client

            started = time.perf_counter()
            objects = seed(args.gpus, args.pending, random.Random(7))
            print(
                f"seeded {objects['gpus']} GPUs, {objects['nodes']} nodes, {objects['running']}"
                f" running, {objects['pending']} pending in {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            clients = {}
            for who in ("member", "operator"):
                clients[who] = Client()
                clients[who].force_login(objects[who])
            from portal.core.collector import freeze_loaded

            freeze_loaded()  # as the servers do once loaded (here: after the seeding)
            from portal.workloads.charts import refresh_cluster

            started = time.perf_counter()
            refresh_cluster()  # what the beat task does every 30 s, off the pages
            charts_ms = round(1000 * (time.perf_counter() - started), 1)
            print(f"the cluster's day charts (a beat task): {charts_ms} ms", file=sys.stderr)
            results = {}
            for name, who, path in pages(objects):
                figures = results[f"{who}: {name}"] = measure(clients[who], path, args.repeat)
                print(
                    f"{who:8} {name:18} {path:28} p50 {figures['p50_ms']:7.1f} ms  p95 "
                    f"{figures['p95_ms']:7.1f} ms  max {figures['max_ms']:7.1f} ms  "
                    f"{figures['queries']:3} queries  {figures['kb']:7.1f} kB",
                    file=sys.stderr,
                    flush=True,
                )
    over = [name for name, figures in results.items() if figures["p95_ms"] >= BUDGET_MS]
    summary = {
        **{key: objects[key] for key in ("gpus", "nodes", "running", "pending")},
        "pages": results,
        "worst_p95_ms": max(figures["p95_ms"] for figures in results.values()),
        "over_budget": over,
        "day_charts_ms": charts_ms,
        "reference_s": reference,
        "load_average": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))
    if args.check and over:
        sys.exit(1)


if __name__ == "__main__":
    main()
