"""Which pods are due for defragmentation now, and how many moves each may still make: what
the engine's defragmentation pass is told (`scheduler.engine.Snapshot.defrag`).

A pod (`portal.cluster.models.Pod`) is the pool an operator turns it on for. It is due for an
hour from its daily time (`Pod.defrag_at`, the portal's time zone) and, where the operator asks,
at any time (`Pod.defrag_when_scattered`): the engine moves jobs only where a waiting gang has
the free GPUs in the pod but not the whole nodes. Its moves are counted over the last hour by
the recoveries that moved a job off its nodes (`RecoveryOutcome.DEFRAGMENTED`)."""

from collections import Counter
from datetime import datetime, timedelta

from django.utils import timezone

from portal.cluster.models import Node, Pod
from portal.workloads.choices import RecoveryOutcome
from portal.workloads.models import Recovery

RUN = timedelta(hours=1)


def due(now: datetime) -> tuple[tuple[str, int], ...]:
    """(pod, moves it may still make) of each pod due now, the pod named as the engine's
    nodes name it (`data center/pod`); no query beyond the pods' when none has it on."""
    pods = [
        pod
        for pod in Pod.objects.filter(defrag=True).select_related("datacenter")
        if pod.defrag_when_scattered or in_window(pod.defrag_at, now)
    ]
    if not pods:
        return ()
    made = moves_made(now - RUN)
    return tuple(
        (f"{pod.datacenter.name}/{pod.name}", max(0, pod.defrag_moves - made[pod.pk]))
        for pod in pods
    )


def in_window(at, now: datetime) -> bool:
    """Whether `now` falls in the hour from the daily time `at` (None: never)."""
    if at is None:
        return False
    local = timezone.localtime(now)
    start = local.replace(hour=at.hour, minute=at.minute, second=0, microsecond=0)
    if start > local:
        start -= timedelta(days=1)
    return local - start < RUN


def moves_made(since: datetime) -> Counter:
    """Per pod id, the jobs defragmentation moved off its nodes since `since`."""
    left = Recovery.objects.filter(
        outcome=RecoveryOutcome.DEFRAGMENTED, started_at__gte=since
    ).values_list("lost_nodes", flat=True)
    first = [nodes[0] for nodes in left if nodes]
    pods = dict(Node.objects.filter(pk__in=first).values_list("pk", "leaf__pod_id"))
    return Counter(pods[node] for node in first if node in pods)
