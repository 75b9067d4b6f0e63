"""One job's checkpoints, faults and recoveries, step by step, with hand-computed figures."""

from __future__ import annotations

import pytest

from scheduler import calibration
from scheduler.checkpointing import Costs, PolicyKind
from scheduler.engine import Placement
from scheduler.sim.jobs import Cause, Checkpointing, Job, Phase
from scheduler.sim.trace import TraceJob

COSTS = Costs(
    save_stall_s=10.0,
    async_stall_s=10.0,
    async_persist_s=300.0,
    restart_s=20.0,
    triggered_save_s=30.0,
    step_s=10.0,
)
ONE_NODE = (Placement(1, tuple(range(8))),)


def job(kind: PolicyKind, interval: float | None, work: float = 10_000.0) -> Job:
    stall = COSTS.save_stall_s if kind is PolicyKind.PERIODIC else COSTS.async_stall_s
    persist = COSTS.async_persist_s if kind in (PolicyKind.ASYNC, PolicyKind.TRIGGERED) else 0.0
    started = Job(
        TraceJob(1, 0.0, 8, "H800", work, "q"), Checkpointing(kind, interval, stall, persist), COSTS
    )
    started.start(0.0, ONE_NODE)
    return started


def test_a_periodic_checkpoint_completes_at_the_end_of_its_stall() -> None:
    periodic = job(PolicyKind.PERIODIC, 100.0)
    assert periodic.next_phase_at() == 100.0
    periodic.phase_ended(100.0)
    assert (periodic.phase, periodic.next_phase_at(), periodic.saved) == (Phase.STALL, 110.0, 0.0)
    periodic.phase_ended(110.0)
    assert (periodic.phase, periodic.saved, periodic.last_checkpoint_at) == (
        Phase.COMPUTE,
        100.0,
        110.0,
    )
    assert periodic.next_phase_at() == 210.0


def test_a_fault_loses_the_work_since_the_last_complete_checkpoint_and_restarts() -> None:
    periodic = job(PolicyKind.PERIODIC, 100.0)
    periodic.phase_ended(100.0)
    periodic.phase_ended(110.0)
    periodic.fault(150.0, saves=False)  # not a triggered policy: no save from memory
    assert (periodic.progress, periodic.phase, periodic.next_phase_at()) == (
        100.0,
        Phase.RECOVER,
        170.0,
    )
    assert periodic.lost_gpu_s[Cause.FAULT] == 40.0 * 8
    periodic.phase_ended(170.0)
    assert (periodic.phase, periodic.next_phase_at()) == (Phase.COMPUTE, 270.0)
    assert periodic.lost_gpu_s[Cause.FAULT] == (40.0 + 20.0) * 8


def test_a_fault_during_a_periodic_save_loses_that_checkpoint() -> None:
    periodic = job(PolicyKind.PERIODIC, 100.0)
    periodic.phase_ended(100.0)
    periodic.fault(105.0, saves=False)
    assert (periodic.progress, periodic.saved) == (0.0, 0.0)


def test_a_fault_while_restarting_restarts_again() -> None:
    periodic = job(PolicyKind.PERIODIC, 100.0)
    periodic.fault(50.0, saves=False)
    periodic.fault(60.0, saves=False)
    assert (periodic.phase, periodic.next_phase_at(), periodic.faults) == (Phase.RECOVER, 80.0, 2)


def test_an_async_copy_counts_only_once_persisted() -> None:
    async_job = job(PolicyKind.ASYNC, 100.0)
    async_job.phase_ended(100.0)  # copy to host memory: 10 s stall
    async_job.phase_ended(110.0)  # then persisted in the background until 410
    assert (async_job.saved, async_job.persisting_until) == (0.0, 410.0)
    async_job.phase_ended(210.0)  # the next copy is due, but waits for the persist
    assert async_job.phase == Phase.COMPUTE
    async_job.persisted(410.0)
    assert (async_job.saved, async_job.phase, async_job.next_phase_at()) == (
        100.0,
        Phase.STALL,
        420.0,
    )
    async_job.phase_ended(420.0)  # a copy of 400 s of work, persisting until 720
    async_job.fault(500.0, saves=False)
    assert async_job.progress == 100.0  # the copy of 400 was not persisted yet
    assert async_job.persisting_until is None


@pytest.mark.parametrize(
    ("fault_at", "kept"),
    [
        pytest.param(1234.5, 1230.0, id="saved at the last whole step"),
        pytest.param(1240.0, 1240.0, id="a fault right at a step boundary loses nothing"),
    ],
)
def test_a_triggered_save_keeps_the_work_of_the_last_whole_step(
    fault_at: float, kept: float
) -> None:
    triggered = job(PolicyKind.TRIGGERED, None)
    triggered.fault(fault_at, saves=True)
    assert (triggered.phase, triggered.next_phase_at()) == (Phase.SAVE, fault_at + 30.0)
    triggered.phase_ended(fault_at + 30.0)
    assert (triggered.progress, triggered.saved) == (kept, kept)
    assert (triggered.phase, triggered.next_phase_at()) == (Phase.RECOVER, fault_at + 50.0)
    assert triggered.lost_gpu_s[Cause.FAULT] == pytest.approx((fault_at - kept + 30.0) * 8)


def test_a_fault_during_a_triggered_save_falls_back_to_the_last_checkpoint() -> None:
    triggered = job(PolicyKind.TRIGGERED, None)
    triggered.fault(1234.5, saves=True)
    triggered.fault(1240.0, saves=True)
    assert (triggered.progress, triggered.phase) == (0.0, Phase.RECOVER)


def test_a_triggered_save_impossible_for_the_fault_falls_back_too() -> None:
    triggered = job(PolicyKind.TRIGGERED, None)
    triggered.fault(1234.5, saves=False)
    assert (triggered.progress, triggered.phase) == (0.0, Phase.RECOVER)


def test_a_shrunk_job_loses_nothing_but_goes_on_at_its_new_size() -> None:
    elastic = Job(
        TraceJob(1, 0.0, 16, "H800", 1000.0, "q", min_gpus=8),
        Checkpointing(PolicyKind.NONE, None, 0.0, 0.0),
        COSTS,
    )
    elastic.start(0.0, (*ONE_NODE, Placement(2, tuple(range(8)))))
    elastic.resize(100.0, ONE_NODE)
    assert (elastic.progress, elastic.held, elastic.phase) == (100.0, 8, Phase.RECOVER)
    elastic.phase_ended(120.0)
    assert elastic.next_phase_at() == 120.0 + 900.0 * 2  # half the GPUs: half the speed


def test_a_preempted_job_saves_first_and_resumes_from_that_save_after_a_restart() -> None:
    periodic = job(PolicyKind.PERIODIC, 100.0)
    periodic.phase_ended(100.0)
    periodic.phase_ended(110.0)
    periodic.preempt(160.0)  # graceful: it saves, as the portal asks it to
    assert (periodic.progress, periodic.phase, periodic.held) == (150.0, Phase.PENDING, 0)
    assert (periodic.lost_gpu_s[Cause.PREEMPTION], periodic.last_checkpoint_at) == (0.0, 160.0)
    periodic.start(200.0, ONE_NODE)
    assert (periodic.phase, periodic.next_phase_at(), periodic.queued_s) == (
        Phase.RECOVER,
        220.0,
        40.0,
    )
    assert periodic.history == ["running", "preempting", "pending", "running"]


def test_a_preempted_job_that_never_saves_loses_its_work() -> None:
    never = job(PolicyKind.NONE, None)
    never.preempt(50.0)
    assert (never.progress, never.lost_gpu_s[Cause.PREEMPTION]) == (0.0, 50.0 * 8)


def test_ettr_is_productive_compute_over_wall_time_since_first_admission() -> None:
    periodic = job(PolicyKind.PERIODIC, 100.0, work=150.0)
    periodic.phase_ended(100.0)
    periodic.phase_ended(110.0)
    assert periodic.phase_ended(160.0) is True  # all 150 s of work done
    periodic.finish(160.0)
    assert periodic.ettr(1e9) == pytest.approx(150.0 / 160.0)


def test_a_calibrated_run_goes_at_the_fleets_pace_for_its_size() -> None:
    """With `SimConfig.calibration`, a job of a family measured 50 % slow on 8 GPUs goes at
    that pace when shrunk to 8; without, at the planner's."""
    spec = TraceJob(1, 0.0, 16, "H800", 1000.0, "q", min_gpus=8, model="llama3-8b", global_batch=64)
    ckpt = Checkpointing(PolicyKind.NONE, None, 0.0, 0.0)
    factors = {("llama3", "H800", 8): calibration.Factor(1.5, 4, 8)}
    as_modelled, calibrated = Job(spec, ckpt, COSTS), Job(spec, ckpt, COSTS, factors)
    assert calibrated.speed(16) == as_modelled.speed(16) == 1.0
    assert calibrated.speed(8) == pytest.approx(as_modelled.speed(8) / 1.5)
