"""Hangs and stragglers, noticed from the training steps jobs report, which agents put in
every heartbeat (the contract's progress file; `scheduler.agent.contract`). A job that reports
no steps is judged by none of this: only by its processes being alive, as its agents report
them, never by how seldom it saves.

Every few seconds (beat) each running job's latest steps per node are compared with what was
seen before, kept in Redis per job and attempt:
- a job none of whose nodes has made a step for HANG_STEPS of its own step times (never less
  than HANG_FLOOR_S; the catalogue's HANG_AFTER_S while its step time is not known yet) is
  hung: a `hang` fault on its rank-0 node hits that job only, and recovery restarts it in
  place, saving from memory first where its policy does;
- a node whose steps come STRAGGLER_FACTOR times slower than its peers' median (rates over
  at least RATE_OVER_S), for STRAGGLER_FOR_S on end, is a straggler: a `straggler` fault,
  and where the job's queue says so, a recovery that moves its part to a hot spare (the
  others save first).

The same looks time each run's steps for the fleet's calibration (`workloads.calibration`).
"""

import json
import math
import statistics
import time
from collections import defaultdict

from django.conf import settings
from django.db import transaction

from portal.agents.intake import record_fault
from portal.cluster.summary import heartbeats, reported_steps
from portal.core.redis import client
from portal.quotas.choices import StragglerPolicy
from portal.workloads import calibration, recovery
from portal.workloads.choices import State
from portal.workloads.models import Allocation, Recovery, Workload
from scheduler import faults

SEEN = "wanka:progress:"  # Redis key per workload: what its steps were, as JSON
KEEP_S = 86400
RATE_OVER_S = 8.0


def detect(now: float | None = None) -> list[str]:
    """Look at every running job once: a few queries and Redis round trips for any number.
    Returns what was found, as fault codes with ids."""
    now = time.time() if now is None else now
    running = Workload.objects.filter(state=State.RUNNING).select_related("queue").in_bulk()
    nodes = defaultdict(dict)  # workload -> node -> its rank
    for workload_id, node_id, rank in Allocation.objects.filter(
        workload_id__in=running
    ).values_list("workload_id", "node_id", "node_rank"):
        nodes[workload_id][node_id] = rank
    samples = heartbeats({n for on in nodes.values() for n in on})
    ids = sorted(nodes)
    raws = client().mget([f"{SEEN}{w}" for w in ids]) if ids else []
    found, paces = [], {}  # paces: each run's seconds per iteration, due to be recorded
    for workload_id, raw in zip(ids, raws, strict=True):
        workload = running[workload_id]
        on = nodes[workload_id]
        steps = reported_steps(
            {n: samples[n] for n in on if n in samples}, workload_id, workload.attempt
        )
        if steps:
            found += _look(workload, on, steps, json.loads(raw) if raw else None, now, paces)
    calibration.record(paces)
    return found


def _look(workload: Workload, nodes, steps, seen: dict | None, now: float, paces) -> list[str]:
    run = [workload.attempt, workload.started_at.timestamp() if workload.started_at else 0]
    if seen is None or seen.get("run") != run:  # a new run (a restart, or admitted again)
        top = max(steps.values())
        seen = {"run": run, "first": [now, top], "last": [now, top]}
        seen.update(nodes={str(n): [now, s] for n, s in steps.items()}, slow={})
    found = _hang(workload, nodes, steps, seen, now) or _stragglers(workload, steps, seen, now)
    if not found and (seconds := calibration.pace(seen, now)) is not None:
        paces[workload.pk] = seconds  # a hung or straggling run's pace is not the plan's
    client().set(f"{SEEN}{workload.pk}", json.dumps(seen), ex=KEEP_S)
    return found


def _hang(workload, nodes, steps, seen, now) -> list[str]:
    """No node made a step since the last look that saw one, for longer than the limit."""
    top = max(steps.values())
    before, seen["steps"] = seen.get("steps", {}), {str(n): s for n, s in steps.items()}
    if any(step > before.get(str(node), -1) for node, step in steps.items()):
        seen["last"] = [now, max(top, seen["last"][1])]
        return []
    (first_at, first), (last_at, last) = seen["first"], seen["last"]
    config = settings.WANKA
    if last > first:
        step_s = (last_at - first_at) / (last - first)
        limit = max(config["HANG_FLOOR_S"], config["HANG_STEPS"] * step_s)
    else:
        limit = faults.HANG_AFTER_S
    if faults.hang_fault(now - last_at, limit) is None:
        return []
    master = min(nodes, key=nodes.get)
    message = f"no step for {now - last_at:.0f} s (limit {limit:.0f} s), stuck at step {top}"
    with transaction.atomic():
        fault = record_fault(master, faults.lookup("hang"), message, workload=workload)
        # The time it stood still is lost, whatever the save it resumes from keeps.
        Recovery.objects.filter(fault=fault).update(lost_s=now - last_at)
    seen["first"] = seen["last"] = [now, top]  # the restart is judged afresh
    return [f"hang:{workload.pk}"]


def _stragglers(workload, steps, seen, now) -> list[str]:
    """Step rates node by node against the peers' median, each over at least RATE_OVER_S
    since the look it is measured from (whole steps counted over a second or two would read
    a step in flight as a straggler)."""
    looks = [seen["nodes"].get(str(node_id)) for node_id in steps]
    if any(look is not None and now - look[0] < RATE_OVER_S for look in looks):
        return []
    rates = {}
    for node_id, step in steps.items():
        at, before = seen["nodes"].get(str(node_id), (now, step))
        if now > at:
            rates[node_id] = (step - before) / (now - at)
        seen["nodes"][str(node_id)] = [now, step]
    found = []
    step_s = {node_id: 1 / rate if rate > 0 else math.inf for node_id, rate in rates.items()}
    for node_id, seconds in step_s.items():
        peers = [s for n, s in step_s.items() if n != node_id]
        slow = faults.straggler_fault(seconds, peers) is not None and math.isfinite(
            statistics.median(peers)
        )
        since = seen["slow"].get(str(node_id))
        if not slow:
            seen["slow"].pop(str(node_id), None)
        elif since is None:
            seen["slow"][str(node_id)] = now
        elif since > 0 and now - since >= settings.WANKA["STRAGGLER_FOR_S"]:
            seen["slow"][str(node_id)] = -1  # reported: once per attempt
            _straggler(workload, node_id, rates[node_id], 1 / statistics.median(peers))
            found.append(f"straggler:{workload.pk}:{node_id}")
    return found


def _straggler(workload: Workload, node_id: int, rate: float, peers: float) -> None:
    kind = faults.lookup("straggler")
    message = f"{rate:.3g} steps/s against its peers' {peers:.3g}"
    with transaction.atomic():
        fault = record_fault(node_id, kind, message, workload=workload)
        if workload.queue.straggler_policy == StragglerPolicy.REPLACE:
            recovery.start(workload, fault, kind, leave_node=True)
