"""Fault recovery of one large job: how long from the fault to the restart on every node.

    python -m bench.recovery [--nodes 1000] [--processes 1] [--heartbeat 5]

A fresh throwaway database with one pod of `nodes` + 1 nodes (8 GPUs each, the last a hot
spare), `--processes` daphne processes (the agents spread evenly over them), one Celery
worker, and the simulated fleet in this process, each agent on its own WebSocket. One job
with the fault-triggered checkpoint policy takes every node but the spare. Once it runs, XID
79 is injected on one node through the real path (operator command -> agent -> fault event ->
cordon -> recovery task). Measured from the fault event (its database timestamp):

- save_s: until the healthy ranks' triggered save is acked by all of them;
- fault_to_restart_push_s: until every agent holds the restart (the new attempt), seen by the
  agents themselves;
- fault_to_all_acks_s: until every node reports the new attempt running and the job is RUNNING.

The last line is JSON: processes, nodes, save_s, fault_to_restart_push_s, fault_to_all_acks_s,
ms_per_node (wall time over nodes), and the CPU the recovery cost the ASGI processes
(together), the worker and this process (the simulated fleet), from the fault to the end, read
from /proc (Linux): the per-node CPU of the ASGI processes is what projects the recovery at
12,500 nodes; and reference_s, the reference loop (`bench.reference`) timed first. Past
`--timeout` seconds it says what it was waiting for and exits 1; its processes are stopped
then, on failure and on SIGTERM.
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from bench import database, processes
from bench.agents import connected_nodes, database_url, servers
from bench.reference import reference_s


def start_worker(log_path, url: str) -> subprocess.Popen:
    from django.conf import settings

    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    worker = processes.start(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "-Q",
            "scheduling,recovery,telemetry",
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--loglevel",
            "INFO",
        ],
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while "ready." not in log_path.read_text():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker did not start:\n{log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    return worker


def build(nodes: int):
    """The cluster, the spare, a tenant and the job; returns (job, node specs)."""
    from portal.cluster.models import Node
    from portal.demo import installation
    from portal.quotas.models import Queue, QueueQuota
    from portal.tenancy.models import Tenant
    from portal.workloads.models import Workload
    from scheduler.agent.fleet import NodeSpec

    per_leaf = 50
    leaves = -(-(nodes + 1) // per_leaf)
    built = installation.build_cluster({"bench": {"p1": ("H800", leaves)}}, nodes_per_leaf=per_leaf)
    built = built[: nodes + 1]
    Node.objects.exclude(pk__in=[n.pk for n in built]).delete()
    Node.objects.filter(pk=built[-1].pk).update(spare=True)
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    queue = Queue.objects.create(
        tenant=tenant, name="train", region=built[0].leaf.pod.datacenter.region
    )
    model = built[0].gpu_model
    QueueQuota.objects.create(queue=queue, gpu_model=model, nominal=8 * nodes)
    job = Workload.objects.create(
        tenant=tenant,
        queue=queue,
        name="big",
        gpu_model=model,
        gpus=8 * nodes,
        checkpoint_policy="triggered",
        topology="pod",
        simulated_duration_s=24 * 3600,
    )
    specs = [NodeSpec(hostname=n.name, token=n.issue_token(), gpu_model="H800") for n in built]
    return job, specs


def db(func, *args, **kwargs):
    """Run an ORM call on a worker thread with its own connection, closed after."""
    from django.db import connection

    def call():
        try:
            return func(*args, **kwargs)
        finally:
            connection.close()

    return asyncio.to_thread(call)


async def wait_for(predicate, what: str, timeout: float = 300, every: float = 0.05):
    deadline = time.monotonic() + timeout
    with processes.waiting_for(what):
        while not (value := await predicate()):
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {timeout} s waiting for {what}")
            await asyncio.sleep(every)
    return value


def measure(nodes: int, heartbeat: float, count: int = 1) -> dict:
    from django.conf import settings

    job, specs = build(nodes)
    logs = settings.DATA_DIR / "bench-recovery"
    logs.mkdir(parents=True, exist_ok=True)
    with servers(count, logs) as started:
        worker = start_worker(logs / "worker.log", database_url())
        try:
            result = recover(job, specs, heartbeat, started, worker)
        finally:
            worker.terminate()
            worker.wait(timeout=15)
    return {"processes": count, **result}


def recover(job, specs, heartbeat: float, started, worker) -> dict:
    """The fault and the recovery, with the agents spread over the `started` servers (each a
    process and its port)."""
    from portal.cluster.commands import send_command
    from portal.cluster.models import FaultEvent
    from portal.workloads.cycle import scheduling_cycle
    from portal.workloads.models import Recovery, Workload
    from scheduler.agent.fleet import build_agent

    nodes = len(specs) - 1
    ports = [port for _, port in started]
    agents = [
        build_agent(spec, f"ws://127.0.0.1:{ports[i % len(ports)]}/ws/agent/", heartbeat)
        for i, spec in enumerate(specs)
    ]
    pids = [server.pid for server, _ in started]

    def asgi_cpu_s() -> float:
        return sum(_cpu_s(pid) for pid in pids)

    def state():
        return Workload.objects.get(pk=job.pk).state

    async def restarted_everywhere():
        """The moment every node of the job (the spare in, the victim out) holds attempt 1."""
        holding = sum(
            any(w["workload_id"] == job.pk and w["attempt"] == 1 for w in agent.workload_report())
            for agent in agents
            if agent.hostname != victim_name
        )
        curve.append((time.time(), holding))
        return holding == nodes and time.time()

    async def run():
        nonlocal victim_name
        tasks = []
        for agent in agents:
            tasks.append(asyncio.create_task(agent.run()))
            await asyncio.sleep(0.02)  # the fleet's ramp: 50 connections a second
        await wait_for(lambda: _at_least(nodes + 1), "every agent to connect", every=0.5)
        await db(scheduling_cycle)
        await wait_for(lambda: _is(db(state), "running"), "the job to run", every=0.2)
        victim = await db(lambda: job.allocations.get(node_rank=nodes // 2, gpu_index=0).node)
        victim_name = victim.name
        cpu.update(asgi=asgi_cpu_s(), worker=_cpu_s(worker.pid), fleet=time.process_time())
        await db(send_command, victim.pk, "inject_fault", code="xid-79", gpu_index=0)
        pushed_at = await wait_for(
            restarted_everywhere, "every node to hold the restart", every=0.2
        )
        await wait_for(lambda: _is(db(state), "running"), "the job to run again", every=0.05)
        cpu.update(
            asgi=asgi_cpu_s() - cpu["asgi"],
            worker=_cpu_s(worker.pid) - cpu["worker"],
            fleet=time.process_time() - cpu["fleet"],
        )
        fault = await db(lambda: FaultEvent.objects.get(node=victim))
        recovery = await db(lambda: Recovery.objects.get(workload_id=job.pk))
        with processes.waiting_for("the agents to stop"):
            await asyncio.gather(*(agent.stop() for agent in agents))
        for task in tasks:
            task.cancel()
        return fault, recovery, pushed_at

    victim_name, curve, cpu = "", [], {}
    with processes.waiting_for(f"the recovery of {nodes} nodes"):
        fault, recovery, pushed_at = asyncio.run(run())
    t0 = fault.occurred_at.timestamp()
    print(
        "nodes holding the restart, by seconds after the fault:",
        " ".join(f"{t - t0:.1f}:{n}" for t, n in curve if n),
        file=sys.stderr,
    )
    saved = recovery.restart_pushed_at.timestamp() - t0
    all_acks = recovery.finished_at.timestamp() - t0
    return {
        "nodes": nodes,
        "save_s": round(saved, 2),
        "fault_to_restart_push_s": round(pushed_at - t0, 2),
        "fault_to_all_acks_s": round(all_acks, 2),
        "ms_per_node": round(1000 * all_acks / nodes, 2),
        "asgi_cpu_s": round(cpu["asgi"], 2),
        "worker_cpu_s": round(cpu["worker"], 2),
        "fleet_cpu_s": round(cpu["fleet"], 2),
        "asgi_cpu_ms_per_node": round(1000 * cpu["asgi"] / nodes, 2),
        "outcome": recovery.outcome,
    }


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _at_least(count: int) -> bool:
    return await db(connected_nodes) >= count


async def _is(awaitable, value) -> bool:
    return await awaitable == value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=1, help="daphne processes")
    parser.add_argument("--heartbeat", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=900, help="seconds in all")
    args = parser.parse_args(argv)
    processes.supervise(args.timeout)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    with database.throwaway():
        result = measure(args.nodes, args.heartbeat, args.processes)
    print(json.dumps({**result, "reference_s": reference}))


if __name__ == "__main__":
    main()
