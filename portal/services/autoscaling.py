"""The autoscaler's tick, every couple of seconds (beat): for each active service, its load is
read from its replicas' heartbeats (`load`), `scheduler.autoscale` decides how many replicas it
needs, and the replicas follow.

More: new replicas are pending workloads of kind inference at the service's priority; the
scheduling cycle places them, reclaiming GPUs its queue lent (elastic training shrinks first,
else is preempted with a save, within the queue's reclaim deadline). Fewer: a replica not yet
serving is stopped at once; a serving one leaves the endpoints and drains, and is stopped once
it has nothing in flight (or after DRAIN_S), its GPUs going to waiting work at once. A replica
that ended (a fault, a preemption) is replaced at the next tick.

A replica scaled down, or stopped with its service, ends `stopped`, not `cancelled`: its
service ended it, no person cancelled it.
"""

import contextlib
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from portal.core.live import publish_tenant
from portal.services import load
from portal.services.models import Replica, Service, ServiceSample
from portal.workloads import lifecycle
from portal.workloads.choices import TERMINAL, CheckpointPolicy, Kind, Topology
from portal.workloads.models import IllegalTransition, Workload
from scheduler.autoscale import Autoscaler, Settings
from scheduler.words import phrase

DRAIN_S = 30
SAMPLES_KEPT = timedelta(hours=24)
# Why a replica stopped.
SCALED_DOWN_EARLY = phrase("scaled down before it served")
DRAINED = phrase("scaled down, drained")
DRAIN_ENDED = phrase("scaled down after {seconds} s")
SERVICE_STOPPED = phrase("its service was stopped")


def settings_of(service: Service) -> Settings:
    return Settings(
        target=service.target_concurrency,
        min_replicas=service.min_replicas,
        max_replicas=service.max_replicas,
        scale_to_zero=service.scale_to_zero,
        stable_window_s=service.stable_window_s,
        panic_window_s=service.stable_window_s / 10,  # Knative's panic-window-percentage
        scale_down_delay_s=service.scale_down_delay_s,
    )


def tick(now=None) -> dict[int, int]:
    """Scale every active service once; returns each one's wanted replicas. A service another
    worker is scaling right now is skipped."""
    now = now or timezone.now()
    wanted = {}
    for service_id in Service.objects.filter(active=True).values_list("pk", flat=True):
        with transaction.atomic():
            service = (
                Service.objects.select_for_update(skip_locked=True).filter(pk=service_id).first()
            )
            if service is not None:
                wanted[service_id] = scale(service, now)
    ServiceSample.objects.filter(at__lt=now - SAMPLES_KEPT).delete()
    return wanted


def scale(service: Service, now) -> int:
    """One autoscaler step for a locked service: observe, decide, converge, record."""
    live = list(
        service.replicas.exclude(workload__state__in=TERMINAL).select_related("workload__tenant")
    )
    serving = load.serving(r.workload_id for r in live)
    ready = [r for r in live if r.draining_since is None and r.workload_id in serving]
    in_flight = sum(serving[r.workload_id].get("in_flight", 0) for r in ready)
    scaler = Autoscaler(settings_of(service), service.autoscaler_state)
    scaler.observe(now.timestamp(), in_flight)
    decision = scaler.decide(now.timestamp(), len(ready))
    said = (service.desired_replicas, service.panic, service.scale_reason)
    if said != (decision.replicas, decision.panic, decision.reason):  # its page draws it again
        publish_tenant(service.tenant_id, "service.scaled", {"id": service.pk})
    service.desired_replicas, service.panic = decision.replicas, decision.panic
    service.scale_reason, service.autoscaler_state = decision.reason, scaler.state()
    service.save(update_fields=["desired_replicas", "panic", "scale_reason", "autoscaler_state"])
    ServiceSample.objects.create(
        service=service,
        at=now,
        in_flight=in_flight,
        requests_per_s=sum(serving[r.workload_id].get("requests_per_s", 0) for r in ready),
        ready=len(ready),
        desired=decision.replicas,
    )
    converge(service, live, serving, decision.replicas, now)
    return decision.replicas


def converge(service: Service, live: list[Replica], serving: dict, wanted: int, now) -> None:
    """Add or drain replicas until `wanted` are up or coming; stop the drained ones."""
    active = [r for r in live if r.draining_since is None]
    draining = [r for r in live if r.draining_since is not None]
    if len(active) < wanted:
        back = draining[: wanted - len(active)]  # a draining replica is the quickest to have
        Replica.objects.filter(pk__in=[r.pk for r in back]).update(draining_since=None)
        draining = draining[len(back) :]
        add(service, wanted - len(active) - len(back))
    elif len(active) > wanted:
        # Not yet serving first, then the least busy, then the newest.
        order = sorted(
            active,
            key=lambda r: (r.workload_id in serving, _in_flight(serving, r), -r.pk),
        )
        for replica in order[: len(active) - wanted]:
            if replica.workload_id in serving:
                replica.draining_since = now
                replica.save(update_fields=["draining_since"])
                draining.append(replica)
            else:
                _stop(replica, SCALED_DOWN_EARLY)
    for replica in draining:
        idle = _in_flight(serving, replica) == 0
        if idle or now - replica.draining_since >= timedelta(seconds=DRAIN_S):
            _stop(replica, DRAINED if idle else DRAIN_ENDED.format(seconds=DRAIN_S))


def add(service: Service, count: int) -> None:
    """`count` new replicas, pending for the scheduling cycle."""
    made = service.replicas.count()
    for number in range(made + 1, made + count + 1):
        workload = Workload.objects.create(
            tenant=service.tenant,
            queue=service.queue,
            name=f"{service.name}-{number}",
            kind=Kind.INFERENCE,
            gpu_model=service.gpu_model,
            gpus=service.gpus_per_replica,
            slices=service.replica_slices,
            priority=service.priority,
            topology=Topology.NODE if service.gpus_per_replica <= 8 else Topology.LEAF,
            checkpoint_policy=CheckpointPolicy.NONE,  # a server has nothing to save
            command=service.command,
            serve_port=service.port,
            spread=f"service-{service.pk}",  # replicas on different nodes and leaves
            submitted_by=service.created_by,
        )
        Replica.objects.create(service=service, workload=workload)
        lifecycle.submitted(workload)


def stop(service: Service, actor=None) -> None:
    """The service is stopped: no more ticks, every replica stopped."""
    with transaction.atomic():
        Service.objects.filter(pk=service.pk).update(active=False, desired_replicas=0)
        for replica in service.replicas.exclude(workload__state__in=TERMINAL):
            _stop(replica, SERVICE_STOPPED, actor)


def _stop(replica: Replica, reason: str, actor=None) -> None:
    with contextlib.suppress(IllegalTransition):  # it ended meanwhile
        lifecycle.stop(replica.workload, reason, actor=actor)


def _in_flight(serving: dict, replica: Replica) -> int:
    return serving.get(replica.workload_id, {}).get("in_flight", 0)
