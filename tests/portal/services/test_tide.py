"""The tide end to end, every layer real (the ASGI server, a Celery worker, simulated agents
whose replicas serve HTTP on sockets): a service created through the API gets a burst of
requests, scales up by reclaiming the GPUs its queue lent to training (which saves first),
scales down when the burst is over, and the training job runs again."""

import asyncio
import threading
import time

import pytest

from portal.services import autoscaling
from portal.services.models import Service
from portal.workloads import invariants
from portal.workloads.choices import CheckpointKind, Kind, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from scheduler.inference import Request
from scheduler.loadgen import drive
from tests.builders import api_client, make_queue, make_workload
from tests.portal.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def ticking_until(predicate, timeout, what):
    """Run the autoscaler every half second (beat's job in production) until `predicate`."""

    def ticked():
        autoscaling.tick()
        return predicate()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ticked():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def replicas(service, state=None):
    found = Workload.objects.filter(replica__service=service, kind=Kind.INFERENCE)
    return found.filter(state=state) if state else found


def burst(endpoints, seconds=12, rps=3):
    """Requests of 5 s each (200 output tokens on an H800), `rps` a second, in a thread."""
    arrivals = [Request(i / rps, 100, 200) for i in range(int(seconds * rps))]
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(report=asyncio.run(drive(arrivals, endpoints)))
    )
    thread.start()
    return thread, result


def test_a_burst_takes_back_lent_gpus_and_gives_them_back_after(fleet, acme, globex, bob):
    infer = make_queue(acme, "infer", cohort="tide", h800=32)
    infer.reclaim_deadline_s = 20
    infer.save()
    make_queue(globex, "train", cohort="tide", h800=32)
    training = make_workload(
        globex.queues.get(), "pretrain", gpus=56, simulated_duration_s=3600
    )  # borrows 24 of acme's 32
    scheduling_cycle()
    wait_until(
        lambda: training.__class__.objects.get(pk=training.pk).state == State.RUNNING,
        30,
        "training to run",
    )

    api = api_client(bob)
    created = api.post(
        "/api/v1/services/",
        {
            "name": "chat",
            "queue": "infer",
            "gpu_model": "H800",
            "gpus_per_replica": 8,
            "min_replicas": 1,
            "max_replicas": 4,
            "target_concurrency": 2,
            "stable_window_s": 6,
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    service = Service.objects.get(pk=created.json()["id"])
    ticking_until(lambda: replicas(service, State.RUNNING).count() == 1, 30, "one replica")
    ticking_until(
        lambda: len(api.get(f"/api/v1/services/{service.pk}/endpoints/").json()) == 1,
        15,
        "its endpoint",
    )
    assert Workload.objects.get(pk=training.pk).state == State.RUNNING  # it fitted beside

    def endpoints():
        answer = api.get(f"/api/v1/services/{service.pk}/endpoints/").json()
        return [(e["host"], e["port"]) for e in answer]

    thread, result = burst(endpoints)
    ticking_until(lambda: replicas(service, State.RUNNING).count() == 4, 60, "four replicas")
    service.refresh_from_db()
    assert service.desired_replicas == 4
    # The training job made room: asked to save, saved, stopped, waiting again.
    events = list(training.events.values_list("to_state", flat=True))
    assert State.PREEMPTING in events and events[-1] == State.PENDING
    assert training.checkpoints.filter(kind=CheckpointKind.REQUESTED).exists()
    thread.join(60)
    report = result["report"]
    assert report.sent == 36 and report.failed == 0, report.errors

    # The burst is over: down to one replica, drained, and training runs again from its save.
    ticking_until(lambda: replicas(service, State.RUNNING).count() == 1, 90, "one replica")
    wait_until(
        lambda: Workload.objects.get(pk=training.pk).state == State.RUNNING,
        60,
        "training to run again",
    )
    stopped = replicas(service, State.STOPPED)
    assert stopped.count() == 3
    assert all("scaled down" in w.events.last().reason for w in stopped)
    samples = api.get(f"/api/v1/services/{service.pk}/samples/").json()
    assert max(s["in_flight"] for s in samples) >= 8
    wait_until(lambda: invariants.violations() == [], 15, "the invariants to hold")
