"""Time loading the scheduling snapshot from the database at 100,000 GPUs.

    DATABASE_URL=postgres://... python -m bench.snapshot [--gpus 100000] [--repeat 5]

Builds a throwaway test database (created and dropped here): 12,500 nodes of 8 GPUs in two
data centers of 10 pods of 25 leaves, 85 % of the GPUs allocated to running gangs, 200 queues
and 10,000 pending workloads; then times `build_snapshot()`, the query side of every scheduling
cycle. The last line is JSON: gpus, nodes, running (workloads), pending, load_s_median,
load_s_max, reference_s (the reference loop, `bench.reference`, timed first) and load_ref (the
median in reference loops).
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

from bench.reference import in_loops, reference_s

SIZES = (1, 1, 1, 1, 2, 2, 4, 8, 16, 64)  # nodes of a running gang


def seed(gpus: int, pending: int, rng: random.Random, sizes=SIZES) -> dict:
    """`gpus` H800 GPUs (12,500 nodes at 100,000), 20 tenants of 10 queues each, 85 % of the
    nodes held by running gangs of `sizes` nodes, and `pending` waiting workloads."""
    from portal.demo import installation
    from portal.quotas.models import Queue, QueueQuota
    from portal.tenancy.models import Tenant
    from portal.workloads.models import Allocation, Workload

    nodes_per_leaf, leaves_per_pod = 25, 25  # 200 GPUs a leaf, 5,000 a pod
    pods = max(1, gpus // 8 // nodes_per_leaf // leaves_per_pod // 2)
    layout = {
        dc: {f"p{p}": ("H800", leaves_per_pod) for p in range(1, pods + 1)} for dc in ("dc1", "dc2")
    }
    nodes = installation.build_cluster(layout, nodes_per_leaf)
    tenants = Tenant.objects.bulk_create(Tenant(name=f"t{i}", slug=f"t{i}") for i in range(20))
    queues = Queue.objects.bulk_create(
        Queue(
            tenant=tenants[i % 20], name=f"q{i}", region_id=nodes[0].leaf.pod.datacenter.region_id
        )
        for i in range(200)
    )
    model = nodes[0].gpu_model
    QueueQuota.objects.bulk_create(
        QueueQuota(queue=q, gpu_model=model, nominal=gpus // 200) for q in queues
    )
    running, allocations = [], []
    free_nodes = list(nodes)
    rng.shuffle(free_nodes)
    target = int(len(nodes) * 0.85)
    while target > 0:
        size = min(target, rng.choice(sizes))
        queue = rng.choice(queues)
        running.append(
            (
                Workload(
                    tenant_id=queue.tenant_id,
                    queue=queue,
                    name="r",
                    gpu_model=model,
                    gpus=size * 8,
                    state="running",
                ),
                [free_nodes.pop() for _ in range(size)],
            )
        )
        target -= size
    Workload.objects.bulk_create(w for w, _ in running)
    for workload, held in running:
        allocations += [
            Allocation(workload=workload, node=node, node_rank=rank, gpu_index=i, started=True)
            for rank, node in enumerate(held)
            for i in range(8)
        ]
    Allocation.objects.bulk_create(allocations, batch_size=5000)
    waiting = []
    for _ in range(pending):
        queue = rng.choice(queues)
        waiting.append(
            Workload(
                tenant_id=queue.tenant_id,
                queue=queue,
                name="p",
                gpu_model=model,
                gpus=rng.choice([1, 2, 4, 8, 16, 64, 256]),
            )
        )
    Workload.objects.bulk_create(waiting, batch_size=5000)
    return {
        "gpus": len(nodes) * 8,
        "nodes": len(nodes),
        "running": len(running),
        "pending": pending,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.db import connection

    from portal.workloads.cycle import build_snapshot

    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        started = time.perf_counter()
        figures = seed(args.gpus, args.pending, random.Random(7))
        print(
            f"seeded {figures} into {connection.vendor} {test_db} in "
            f"{time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            snapshot = build_snapshot()
            times.append(time.perf_counter() - started)
            print(
                f"snapshot: {len(snapshot.nodes)} nodes, {len(snapshot.workloads)} workloads "
                f"in {times[-1]:.3f} s",
                file=sys.stderr,
            )
    finally:
        connection.creation.destroy_test_db(test_db, verbosity=0)
    print(
        json.dumps(
            {
                **figures,
                "database": connection.vendor,
                "load_s_median": round(statistics.median(times), 3),
                "load_s_max": round(max(times), 3),
                "reference_s": reference,
                "load_ref": in_loops(statistics.median(times), reference),
            }
        )
    )


if __name__ == "__main__":
    main()
