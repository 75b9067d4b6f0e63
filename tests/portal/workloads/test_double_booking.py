"""Two transactions racing for one GPU on PostgreSQL: one wins, the other fails whole."""

import threading

import pytest
from django.db import IntegrityError, connection, transaction

from portal.workloads.choices import State
from portal.workloads.cycle import apply
from portal.workloads.models import Allocation, Workload
from scheduler import engine
from tests.builders import make_workload

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _race(*jobs):
    """Run each job in its own thread and connection; return what each raised (or None)."""
    outcomes = [None] * len(jobs)

    def run(i, job):
        try:
            job()
        except Exception as error:  # noqa: BLE001 - the outcome is what the test inspects
            outcomes[i] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return outcomes


def test_overlapping_transactions_cannot_book_one_gpu_twice(acme_llm, cluster):
    node = cluster[0]
    first, second = make_workload(acme_llm, "first"), make_workload(acme_llm, "second")
    both_inside = threading.Barrier(2)

    def book(workload, own_index):
        def job():
            with transaction.atomic():
                Allocation.objects.create(workload=workload, node=node, gpu_index=own_index)
                both_inside.wait(timeout=10)  # both transactions are open and have written
                Allocation.objects.create(workload=workload, node=node, gpu_index=0)

        return job

    outcomes = _race(book(first, 1), book(second, 2))
    assert sum(isinstance(o, IntegrityError) for o in outcomes) == 1
    assert outcomes.count(None) == 1
    winner = first if outcomes[0] is None else second
    rows = set(Allocation.objects.values_list("workload_id", "gpu_index"))
    assert rows == {(winner.pk, 0), (winner.pk, 1 if winner is first else 2)}


def test_two_cycles_placing_onto_the_same_gpus_leave_one_admitted(acme_llm, cluster):
    node = cluster[0]
    first, second = (
        make_workload(acme_llm, "first", gpus=8),
        make_workload(acme_llm, "second", gpus=8),
    )

    def plan_for(workload):
        placement = engine.Placement(node.id, tuple(range(8)))
        return lambda: apply(engine.Plan(admissions=[engine.Admission(workload.pk, (placement,))]))

    outcomes = _race(plan_for(first), plan_for(second))
    assert sum(isinstance(o, IntegrityError) for o in outcomes) == 1
    states = dict(Workload.objects.values_list("name", "state"))
    assert sorted(states.values()) == [State.ADMITTED, State.PENDING]
    admitted = Workload.objects.get(state=State.ADMITTED)
    assert set(Allocation.objects.values_list("workload_id", flat=True)) == {admitted.pk}
    assert Allocation.objects.count() == 8
    loser = Workload.objects.get(state=State.PENDING)
    assert not loser.events.exists()  # its transition rolled back with its bookings
