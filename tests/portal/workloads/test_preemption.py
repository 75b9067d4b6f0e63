"""The portal carries the engine's preemptions out gracefully: a victim saves, stops, and gives
its GPUs back only once its processes are gone; its claimant starts after; the work lost since
its save is booked."""

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.agents.intake import record_acks, record_fault
from portal.cluster.models import Node, NodeCommand
from portal.workloads import lifecycle, preemption, recovery
from portal.workloads.checkpoints import record_saved
from portal.workloads.choices import CheckpointPolicy, PriorityClass, RecoveryOutcome, State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.desired import desired_state
from portal.workloads.ettr import job_report
from portal.workloads.models import Allocation, Recovery, UsageRecord, Workload
from scheduler import faults
from tests.builders import make_cluster, make_queue, make_workload


def _refreshed(workload):
    workload.refresh_from_db()
    return workload


def _running(workload):
    """As if its agents reported it running on every node."""
    for node_id in set(workload.allocations.values_list("node_id", flat=True)):
        lifecycle.mark_started_many([(workload.pk, node_id, 0)])
    assert _refreshed(workload).state == State.RUNNING


def _nodes(workload):
    return set(workload.allocations.values_list("node_id", flat=True))


def _exit_everywhere(workload, code=-15):
    """What the agents report once they stopped its processes."""
    for node_id in _nodes(workload):
        lifecycle.finish(workload.pk, node_id, code, workload.attempt)


@pytest.fixture
def reclaim(cluster, acme, globex):
    """Globex borrows Acme's idle H800s and runs; then Acme needs its quota back."""
    acme_q = make_queue(acme, "llm", cohort="research", h800=48)
    globex_q = make_queue(globex, "train", cohort="research", h800=48)
    borrower = make_workload(globex_q, "borrower", gpus=64)
    scheduling_cycle()
    _running(borrower)
    claimant = make_workload(acme_q, "claimant", gpus=48)
    plan = scheduling_cycle()
    assert [p.workload_id for p in plan.preemptions] == [borrower.pk]
    return borrower, claimant


def test_a_victim_saves_then_stops_and_only_then_its_claimant_starts(reclaim):
    borrower, claimant = reclaim
    held = _nodes(borrower)
    # 1. Saving: it keeps its GPUs and runs on, and each of its nodes is asked for a save.
    assert _refreshed(borrower).state == State.PREEMPTING
    saves = NodeCommand.objects.filter(workload=borrower, action="checkpoint")
    assert {c.node_id for c in saves} == held and {c.args["kind"] for c in saves} == {"requested"}
    assert all(desired_state(Node.objects.get(pk=n))["assignments"] for n in held)
    scheduling_cycle()
    assert _refreshed(claimant).state == State.PENDING  # its room is held, not yet free
    # 2. The ranks save and ack: it is told to stop (its nodes no longer list it), but its GPUs
    # stay booked until its processes are gone.
    node = next(iter(held))
    record_saved(borrower.pk, node, {"step": 40, "kind": "requested", "location": "s3://ck/40"})
    record_acks([(c.node_id, str(c.pk), True, "saved step 40") for c in saves])
    assert preemption.advance() == [borrower.pk]
    assert not any(desired_state(Node.objects.get(pk=n))["assignments"] for n in held)
    assert _nodes(borrower) == held
    scheduling_cycle()
    assert _refreshed(claimant).state == State.PENDING
    # 3. Every node reports its processes gone: the GPUs go back, it is requeued with nothing
    # lost, and the next cycle starts the claimant.
    _exit_everywhere(borrower)
    assert _refreshed(borrower).state == State.PENDING
    assert not borrower.allocations.exists()
    assert UsageRecord.objects.filter(workload=borrower, gpus=64).exists()
    assert borrower.events.last().reason == "requeued after preemption, from its save"
    assert job_report(borrower)["seconds"]["lost"] == 0
    scheduling_cycle()
    assert _refreshed(claimant).state == State.ADMITTED


def test_a_victim_that_does_not_save_stops_at_once_and_its_work_is_booked_lost(
    cluster, acme, globex
):
    acme_q = make_queue(acme, "llm", cohort="research", h800=48)
    globex_q = make_queue(globex, "train", cohort="research", h800=48)
    borrower = make_workload(globex_q, "borrower", gpus=64, checkpoint_policy=CheckpointPolicy.NONE)
    scheduling_cycle()
    _running(borrower)
    ten_minutes_ago = timezone.now() - timedelta(minutes=10)
    Workload.objects.filter(pk=borrower.pk).update(started_at=ten_minutes_ago)
    borrower.events.update(at=ten_minutes_ago)  # it has been running since
    make_workload(acme_q, "claimant", gpus=48)
    scheduling_cycle()
    assert _refreshed(borrower).state == State.PREEMPTING
    assert not NodeCommand.objects.filter(workload=borrower).exists()
    assert not any(desired_state(Node.objects.get(pk=n))["assignments"] for n in _nodes(borrower))
    _exit_everywhere(borrower)
    assert _refreshed(borrower).state == State.PENDING
    assert "600 s of work since its last save lost" in borrower.events.last().reason
    assert job_report(borrower)["seconds"]["lost"] == pytest.approx(600, abs=5)


def test_a_save_that_takes_longer_than_the_grace_is_cut_short(reclaim):
    borrower, _ = reclaim
    Workload.objects.filter(pk=borrower.pk).update(preempt_deadline=timezone.now())
    assert preemption.advance() == [borrower.pk]
    assert _refreshed(borrower).stop_requested_at is not None


def test_processes_that_never_stop_leave_their_nodes_cordoned_as_suspect(reclaim):
    borrower, claimant = reclaim
    Workload.objects.filter(pk=borrower.pk).update(preempt_deadline=timezone.now())
    preemption.advance()  # told to stop
    silent, *others = sorted(_nodes(borrower))
    for node_id in others:
        lifecycle.finish(borrower.pk, node_id, -15, 0)
    assert _refreshed(borrower).state == State.PREEMPTING  # one node still runs it
    Workload.objects.filter(pk=borrower.pk).update(preempt_deadline=timezone.now())
    preemption.advance()
    assert _refreshed(borrower).state == State.PENDING and not borrower.allocations.exists()
    node = Node.objects.get(pk=silent)
    assert node.health == "cordoned" and "did not stop" in node.health_reason
    assert [n.health for n in Node.objects.filter(pk__in=others)] == ["ready"] * len(others)


def test_the_grace_is_the_queues_unless_the_job_sets_its_own(reclaim):
    borrower, _ = reclaim
    borrower.refresh_from_db()
    grace = (borrower.preempt_deadline - borrower.preempted_at).total_seconds()
    assert grace == pytest.approx(borrower.queue.preemption_grace_s)


def test_work_within_its_queues_quota_is_left_alone(cluster, acme, globex):
    acme_q = make_queue(acme, "llm", cohort="research", h800=48)
    globex_q = make_queue(globex, "train", cohort="research", h800=48)
    owner = make_workload(globex_q, "owner", gpus=48)
    scheduling_cycle()
    waiting = make_workload(acme_q, "waiting", gpus=64)  # more than its own quota of 48
    scheduling_cycle()
    scheduling_cycle()
    assert _refreshed(owner).state == State.ADMITTED
    assert _refreshed(waiting).state == State.PENDING
    assert waiting.pending_reason


def test_a_cycle_that_preempts_several_jobs_tells_the_agents_once(
    cluster, acme, globex, monkeypatch, django_capture_on_commit_callbacks
):
    """Two borrowers that do not save evicted in one cycle: one desired-state pass for every
    node that changed, not one per victim and one more for the admissions."""
    acme_q = make_queue(acme, "llm", cohort="research", h800=64)
    globex_q = make_queue(globex, "train", cohort="research", h800=0)
    borrowers = [
        make_workload(globex_q, f"borrower-{i}", gpus=32, checkpoint_policy=CheckpointPolicy.NONE)
        for i in range(2)
    ]
    scheduling_cycle()
    assert {_refreshed(b).state for b in borrowers} == {State.ADMITTED}
    held = set(Allocation.objects.values_list("node_id", flat=True))
    passes = []
    monkeypatch.setattr("portal.workloads.desired.sync_nodes", passes.append)
    make_workload(acme_q, "claimant", gpus=64)
    with django_capture_on_commit_callbacks(execute=True):
        plan = scheduling_cycle()
    assert len(plan.preemptions) == 2
    assert len(passes) == 1
    assert passes[0] == held  # the victims' nodes (the claimant waits for them to stop)


def test_a_shrink_saves_first_then_restarts_the_job_in_its_new_world(db, acme, globex):
    """An elastic borrower gives back half its nodes for a reclaim. It first saves, keeping
    every GPU meanwhile (the claimant waits for them, and nothing else is stopped for it);
    then the rest restart as a new attempt told the new node count and ranks, from that save,
    and run again once every node runs that attempt; then the claimant starts."""
    make_cluster({"dc1": {"p1": ("H800", 2)}})  # 8 nodes: the borrower takes them all
    acme_q = make_queue(acme, "llm", cohort="research", h800=32)
    globex_q = make_queue(globex, "train", cohort="research", h800=32)
    elastic = make_workload(globex_q, "elastic", gpus=64, min_gpus=32)
    scheduling_cycle()
    _running(elastic)
    claimant = make_workload(acme_q, "claimant", gpus=32)
    plan = scheduling_cycle()
    assert [s.workload_id for s in plan.shrinks] == [elastic.pk] and not plan.preemptions
    elastic.refresh_from_db()
    assert (elastic.state, elastic.attempt, elastic.allocations.count()) == (
        State.RECOVERING, 0, 64,
    )  # fmt: skip
    saves = NodeCommand.objects.filter(workload=elastic, action="checkpoint")
    assert saves.count() == 8
    again = scheduling_cycle()  # the GPUs it gives back count as already on their way
    assert not again.preemptions and not again.shrinks and not again.admissions
    assert "waiting for 1 preempted workload" in _refreshed(claimant).pending_reason

    master = elastic.allocations.get(node_rank=0, gpu_index=0).node_id
    record_saved(elastic.pk, master, {"step": 500, "kind": "requested", "location": "/c/500",
                                      "size_bytes": 1, "duration_s": 1.0})  # fmt: skip
    record_acks([(c.node_id, str(c.pk), True, "saved") for c in saves])
    recovery.advance(elastic.recoveries.get().pk)
    elastic.refresh_from_db()
    assert (elastic.state, elastic.attempt, elastic.allocations.count()) == (
        State.RECOVERING, 1, 32,
    )  # fmt: skip
    kept = sorted(elastic.allocations.values_list("node_rank", flat=True).distinct())
    assert kept == [0, 1, 2, 3]  # renumbered
    state = desired_state(elastic.allocations.first().node)
    [assignment] = [a for a in state["assignments"] if a["workload_id"] == elastic.pk]
    assert (assignment["nnodes"], assignment["attempt"]) == (4, 1)
    assert assignment["env"]["WANKA_RESUME_FROM"] == "/c/500"
    done = elastic.recoveries.get()
    assert (done.outcome, done.resume_step, done.lost_s) == ("shrunk", 500, 0.0)
    for node_id in _nodes(elastic):
        lifecycle.mark_started_many([(elastic.pk, node_id, 1)])
    assert _refreshed(elastic).state == State.RUNNING
    scheduling_cycle()
    assert _refreshed(claimant).state == State.ADMITTED


def test_a_job_that_never_saves_shrinks_at_once(db, acme, globex):
    make_cluster({"dc1": {"p1": ("H800", 2)}})
    acme_q = make_queue(acme, "llm", cohort="research", h800=32)
    globex_q = make_queue(globex, "train", cohort="research", h800=32)
    elastic = make_workload(globex_q, "elastic", gpus=64, min_gpus=32, checkpoint_policy="none")
    scheduling_cycle()
    _running(elastic)
    make_workload(acme_q, "claimant", gpus=32)
    scheduling_cycle()
    elastic.refresh_from_db()
    assert (elastic.state, elastic.attempt, elastic.allocations.count()) == (
        State.RECOVERING, 1, 32,
    )  # fmt: skip


def test_a_refused_save_stops_the_victim_at_once(reclaim):
    borrower, _ = reclaim
    first, *_ = NodeCommand.objects.filter(workload=borrower, action="checkpoint")
    record_acks([(first.node_id, str(first.pk), False, "checkpoint: no space left")])
    assert preemption.advance() == [borrower.pk]  # not the whole grace later
    assert _refreshed(borrower).stop_requested_at is not None


def test_a_node_lost_while_a_shrinking_job_saves_is_not_restarted_on(db, acme, globex):
    """The borrower is saving before it gives back 4 of its 8 nodes when one of the 4 it keeps
    fails: the recovery counts that node lost too (no spare, and 24 GPUs are below its minimum
    of 32, so it is requeued) instead of restarting on it."""
    make_cluster({"dc1": {"p1": ("H800", 2)}})
    acme_q = make_queue(acme, "llm", cohort="research", h800=32)
    globex_q = make_queue(globex, "train", cohort="research", h800=32)
    elastic = make_workload(globex_q, "elastic", gpus=64, min_gpus=32)
    scheduling_cycle()
    _running(elastic)
    make_workload(acme_q, "claimant", gpus=32)
    scheduling_cycle()
    kept = elastic.allocations.get(node_rank=0, gpu_index=0).node_id
    record_fault(kept, faults.lookup("xid-79"))
    saves = NodeCommand.objects.filter(workload=elastic, action="checkpoint")
    record_acks([(c.node_id, str(c.pk), True, "saved") for c in saves if c.node_id != kept])
    active = elastic.recoveries.get()
    Recovery.objects.filter(pk=active.pk).update(save_deadline=timezone.now())
    recovery.advance(active.pk)
    active.refresh_from_db()
    assert active.outcome == RecoveryOutcome.REQUEUED and kept in active.lost_nodes
    assert _refreshed(elastic).state == State.PENDING and not elastic.allocations.exists()


def test_later_claimants_wait_for_the_rest_of_a_stopping_victim_not_evict_more(
    cluster, acme, globex
):
    """Globex borrows the whole H800 fleet: a wide job of the lowest priority and four narrow
    ones. Acme's two small jobs reclaim; the first evicts the wide job, and the second waits
    for one of the wide job's other nodes rather than evicting a narrow one beside it."""
    acme_q = make_queue(acme, "llm", cohort="research", h800=80)
    globex_q = make_queue(globex, "train", cohort="research", h800=16)
    wide = make_workload(
        globex_q,
        "wide",
        gpus=64,
        priority=PriorityClass.LOW,
        checkpoint_policy=CheckpointPolicy.NONE,
    )
    scheduling_cycle()  # the one pod of 8 nodes
    narrow = [make_workload(globex_q, f"narrow-{i}", gpus=8) for i in range(4)]
    scheduling_cycle()
    for job in [wide, *narrow]:
        _running(job)
    first = make_workload(acme_q, "first", gpus=4)
    second = make_workload(acme_q, "second", gpus=8)
    plan = scheduling_cycle()
    assert [p.workload_id for p in plan.preemptions] == [wide.pk]
    assert "waiting for 1 preempted workload to stop" in _refreshed(second).pending_reason
    held = {r.workload_id: set(r.nodes) for r in plan.reservations}
    assert held[first.pk] | held[second.pk] <= _nodes(wide)
    # The wide job (which does not save) stops: both start on its nodes, and the narrow jobs
    # ran on throughout.
    _exit_everywhere(wide)
    scheduling_cycle()
    assert _refreshed(first).state == _refreshed(second).state == State.ADMITTED
    assert _nodes(first) | _nodes(second) <= held[first.pk] | held[second.pk]
    assert {_refreshed(job).state for job in narrow} == {State.RUNNING}
