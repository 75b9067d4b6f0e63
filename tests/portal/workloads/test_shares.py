"""Shares of a GPU in the database: booked as eighths, never past a GPU's whole, charged as held."""

import threading
import time

import pytest
from django.db import IntegrityError, connection, transaction

from portal.workloads.allocations import add, release
from portal.workloads.choices import State
from portal.workloads.cycle import apply, build_snapshot
from portal.workloads.models import Allocation, UsageRecord, Workload
from portal.workloads.usage import held_now
from scheduler import engine
from tests.builders import make_workload


def share(queue, name, slices):
    return make_workload(queue, name, gpus=1, slices=slices)


def admit(node, *workloads, index=0):
    """Apply a plan admitting each workload on GPU `index` of `node`."""
    placement = engine.Placement(node.id, (index,))
    apply(engine.Plan(admissions=[engine.Admission(w.pk, (placement,)) for w in workloads]))


@pytest.mark.django_db
def test_four_quarters_book_one_gpu_and_count_as_one(acme_llm, cluster):
    node = cluster[0]
    quarters = [share(acme_llm, f"q{i}", 2) for i in range(4)]
    admit(node, *quarters)
    assert list(Allocation.objects.values_list("gpu_index", "slices")) == [(0, 2)] * 4
    assert held_now(Workload.objects.all())[0] == 1
    # The engine sees the GPU as taken, and each job holding a quarter.
    snapshot = build_snapshot()
    [seen] = [n for n in snapshot.nodes if n.id == node.id]
    assert 0 not in seen.free
    assert {w.slices for w in snapshot.workloads} == {2}


@pytest.mark.django_db
def test_gpus_added_to_a_share_job_are_booked_as_its_share(acme_llm, cluster):
    """A GPU booked to a share job later (as a move books its new GPU) is booked as its
    eighths, as its admission was, not as a whole GPU that no other share could join."""
    quarter = share(acme_llm, "moved", 2)
    admit(cluster[0], quarter)
    add(quarter, [(cluster[0].id, (1,))])
    assert list(quarter.allocations.values_list("gpu_index", "slices")) == [(0, 2), (1, 2)]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "slices, index, books",
    [
        pytest.param(5, 0, False, id="shares past eight eighths roll the plan back"),
        pytest.param(0, 0, False, id="a whole GPU beside shares rolls the plan back"),
        pytest.param(4, 0, True, id="a half beside a half is booked"),
        pytest.param(0, 1, True, id="a whole GPU on the node of a shared one is booked"),
    ],
)
def test_a_gpu_is_never_booked_past_its_whole(acme_llm, cluster, slices, index, books):
    node = cluster[0]
    admit(node, share(acme_llm, "half", 4))
    late = share(acme_llm, "late", slices) if slices else make_workload(acme_llm, "w", gpus=1)
    if books:
        admit(node, late, index=index)
    else:
        with pytest.raises(IntegrityError):
            admit(node, late, index=index)
    late.refresh_from_db()
    assert (late.state == State.ADMITTED) is books
    assert Allocation.objects.filter(workload=late).exists() is books


@pytest.mark.django_db
def test_a_share_books_its_share_of_the_gpu_hours(acme_llm, cluster):
    quarter = share(acme_llm, "q", 2)
    admit(cluster[0], quarter)
    release(quarter)
    [record] = UsageRecord.objects.all()
    assert record.gpus == 0.25
    span_h = (record.ended_at - record.started_at).total_seconds() / 3600
    assert record.gpu_hours == pytest.approx(span_h * 0.25)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_transactions_cannot_overfill_one_gpu_with_shares(acme_llm, cluster):
    """Each books 5/8 of GPU 0 of one node; the second while the first is still open. The node
    lock makes the second wait for the first's commit and see its row: it fails whole."""
    node = cluster[0]
    first, second = share(acme_llm, "first", 5), share(acme_llm, "second", 5)
    first_booked = threading.Event()
    outcomes = [None, None]

    def run(i, workload):
        try:
            if i:
                first_booked.wait(timeout=10)
            with transaction.atomic():
                admit(node, workload)
                if not i:
                    first_booked.set()
                    time.sleep(1)  # still open while the second books
        except Exception as error:  # noqa: BLE001 - the outcome is what the test inspects
            outcomes[i] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes[0] is None
    assert isinstance(outcomes[1], IntegrityError)
    assert list(Allocation.objects.values_list("workload_id", flat=True)) == [first.pk]


@pytest.mark.django_db
def test_the_cycle_puts_two_quarters_on_one_gpu_and_the_queue_holds_a_half(acme_llm, cluster):
    from portal.dashboard.queues import gpus_held
    from portal.workloads.cycle import scheduling_cycle

    share(acme_llm, "a", 2), share(acme_llm, "b", 2)
    scheduling_cycle()
    booked = set(Allocation.objects.values_list("node_id", "gpu_index", "slices"))
    assert len(booked) == 1 and booked.pop()[2] == 2
    assert Allocation.objects.count() == 2
    assert gpus_held()[acme_llm.pk, "H800"] == 0.5


@pytest.mark.django_db
def test_the_invariants_hold_for_shares_and_see_a_gpu_booked_past_its_whole(acme_llm, cluster):
    from portal.workloads.invariants import overfilled_gpus, unreconciled_usage

    quarters = [share(acme_llm, f"q{i}", 2) for i in range(3)]
    admit(cluster[0], *quarters)
    release(quarters[0])
    assert not unreconciled_usage() and not overfilled_gpus()
    # Written past the booking's check, as a bug would: the invariant sees it.
    Allocation.objects.create(workload=quarters[0], node=cluster[0], gpu_index=0, slices=5)
    assert overfilled_gpus() == [f"node {cluster[0].name} GPU 0 is booked past its whole"]
