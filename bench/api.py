"""The REST API under many clients at once: the workload list, with some submissions.

    DATABASE_URL=postgres://... python -m bench.api [--clients 50] [--seconds 60] [--servers N]

A fresh throwaway database with the demo installation and `--workloads` more of Acme's jobs;
`--servers` daphne processes (default: one a core, as deploy/ advises; the clients spread over
them, as a load balancer would); each client a thread with a keep-alive connection and an API
token of its own (one member's; the API's rate is counted per token), asking for the first page
of the workload list as fast as it is answered, and one request in `--submit-every` a
submission (with an Idempotency-Key). Reported: requests a second, the median and 99th
percentile latency of the list (the target's) and of the submissions, and the answers by
status; the last line is JSON: clients, servers, rps, p50_ms, p99_ms (the list's),
submit_p50_ms, submit_p99_ms, errors_5xx, statuses, reference_s (the reference loop,
`bench.reference`, timed first). Past `--timeout` seconds it says what it was waiting for and
exits 1; its processes are stopped then, on failure and on SIGTERM.
"""

import argparse
import gc
import http.client
import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from bench import database, processes
from bench.agents import servers
from bench.reference import reference_s


def seed(workloads: int, clients: int) -> list[str]:
    """The demo installation, `workloads` more jobs for Acme; returns an API token of bob's for
    each client (the API's rate is counted per token)."""
    from django.contrib.auth import get_user_model

    from portal.demo import installation
    from portal.tenancy.models import ApiToken, Tenant
    from portal.workloads.models import Workload

    installation.seed()
    acme = Tenant.objects.get(slug="acme")
    queue = acme.queues.get(name="llm")
    model = queue.quotas.first().gpu_model
    Workload.objects.bulk_create(
        Workload(tenant=acme, queue=queue, name=f"bench-{i}", gpus=8, gpu_model=model)
        for i in range(workloads)
    )
    bob = get_user_model().objects.get(username="bob")
    return [ApiToken.issue(bob, f"bench {i}")[1] for i in range(clients)]


def client(port: int, token: str, until: float, submit_every: int, phase: int, out: list) -> None:
    """One client: requests until `until`, each (submitted, status, seconds) appended to
    `out`; its submissions are its requests `phase`, `phase + submit_every` and so on (the
    clients' phases differ, or all would submit at once each round: a server answering in
    turn keeps them in step)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    n = 0
    while time.monotonic() < until:
        n += 1
        started = time.perf_counter()
        submits = bool(submit_every) and n % submit_every == phase
        try:
            if submits:
                body = json.dumps(
                    {
                        "name": f"b-{uuid.uuid4().hex[:8]}",
                        "queue": "llm",
                        "gpu_model": "H800",
                        "gpus": 8,
                    }
                )
                key = {"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}
                connection.request("POST", "/api/v1/workloads/", body, {**headers, **key})
            else:
                connection.request("GET", "/api/v1/workloads/?limit=50", headers=headers)
            answer = connection.getresponse()
            answer.read()
            status = answer.status
        except (OSError, http.client.HTTPException):
            status = 0  # no answer: counted as a failure
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        out.append((submits, status, time.perf_counter() - started))
    connection.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run(args) -> tuple[list[tuple[bool, int, float]], float]:
    """Seed, start the servers, run the clients: each answer's (submitted, status, seconds),
    and the seconds they ran."""
    from django.conf import settings
    from django.db import connection

    tokens = seed(args.workloads, args.clients)
    connection.close()
    logs = Path(settings.DATA_DIR) / "bench-api"
    logs.mkdir(parents=True, exist_ok=True)
    with servers(args.servers, logs) as started:
        ports = [port for _, port in started]
        print(
            f"{args.clients} clients on {args.servers} server(s) for {args.seconds:g} s",
            file=sys.stderr,
        )
        results: list[tuple[bool, int, float]] = []
        until = time.monotonic() + args.seconds
        threads = [
            threading.Thread(
                target=client,
                args=(
                    ports[i % len(ports)],
                    tokens[i],
                    until,
                    args.submit_every,
                    i % args.submit_every if args.submit_every else 0,
                    results,
                ),
            )
            for i in range(args.clients)
        ]
        # The clients stand for people on machines of their own: this process's full
        # collections (the loaded portal walked) would hold them all at once.
        gc.collect()
        gc.freeze()
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results, time.monotonic() - started


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument(
        "--servers",
        type=int,
        default=os.cpu_count() or 1,
        help="daphne processes (default: one a core, as deploy/ advises)",
    )
    parser.add_argument("--workloads", type=int, default=2000, help="Acme's jobs in the list")
    parser.add_argument("--submit-every", type=int, default=20, help="0: lists only")
    parser.add_argument("--timeout", type=float, help="seconds in all (default: --seconds + 600)")
    args = parser.parse_args(argv)
    processes.supervise(args.timeout or args.seconds + 600)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    with database.throwaway():
        results, elapsed = run(args)
    statuses = Counter(status for _, status, _ in results)
    lists = [seconds * 1e3 for submits, _, seconds in results if not submits]
    submissions = [seconds * 1e3 for submits, _, seconds in results if submits]
    summary = {
        "clients": args.clients,
        "servers": args.servers,
        "rps": round(len(results) / elapsed, 1),
        "p50_ms": round(percentile(lists, 0.5), 1),
        "p99_ms": round(percentile(lists, 0.99), 1),
        "submit_p50_ms": round(percentile(submissions, 0.5), 1),
        "submit_p99_ms": round(percentile(submissions, 0.99), 1),
        "errors_5xx": sum(n for status, n in statuses.items() if status >= 500 or status == 0),
        "statuses": {str(status): n for status, n in sorted(statuses.items())},
        "reference_s": reference,
    }
    print(summary, file=sys.stderr)
    if summary["errors_5xx"]:
        server_errors()
    print(json.dumps(summary))


def server_errors() -> None:
    """The servers' logged errors with their tracebacks, so that a failed run says why."""
    from django.conf import settings

    for log in sorted((Path(settings.DATA_DIR) / "bench-api").glob("daphne-*.log")):
        lines = log.read_text(errors="replace").splitlines()
        errors = [i for i, line in enumerate(lines) if " ERROR " in line]
        for i in errors[:3]:
            print(f"{log.name}:", *lines[i : i + 40], sep="\n  ", file=sys.stderr)


if __name__ == "__main__":
    main()
