"""MIG instances: a MIG job takes one instance of one GPU, an idle one of its profile first,
else one added beside the instances in use, else a free GPU re-sliced; it is charged its
profile's share of the GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine import plan
from scheduler.engine.testing import (
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    on,
    outcome,
)
from scheduler.engine.testing import make_workload as workload
from scheduler.mig import profiles

NOW = 10_000.0
H800 = profiles("H800", 80)


def mig(workload_id: int, queue, profile: str, *placements, **extra):
    """A MIG job of `profile`: pending, or running on the given placement."""
    charge = H800[profile].charge
    if placements:
        return make_running(workload_id, queue, *placements, mig=profile, mig_charge=charge)
    return workload(workload_id, queue, 1, mig=profile, mig_charge=charge, **extra)


def snapshot_with(nodes, queues, workloads, layouts):
    snapshot = make_snapshot(nodes, queues, workloads)
    return replace(snapshot, mig_profiles={"H800": H800}, mig_layouts=layouts)


@pytest.mark.parametrize(
    "layouts, running, pending, gpu",
    [
        pytest.param(
            {(1, 0): ("3g.40gb", "1g.10gb"), (1, 1): ("1g.10gb",)},
            [("3g.40gb", 0)],
            "1g.10gb",
            0,
            id="an idle instance of its profile on a GPU in use is taken first",
        ),
        pytest.param(
            {(1, 0): ("3g.40gb",), (1, 1): ("2g.20gb",)},
            [("3g.40gb", 0)],
            "2g.20gb",
            1,
            id="an idle instance on a free GPU comes before adding one to a GPU in use",
        ),
        pytest.param(
            {(1, 0): ("3g.40gb",)},
            [("3g.40gb", 0)],
            "2g.20gb",
            0,
            id="an instance is added beside those in use where the free slots take it",
        ),
        pytest.param(
            {(1, 0): ("4g.40gb", "3g.40gb")},
            [("4g.40gb", 0)],
            "2g.20gb",
            1,
            id="a GPU with an instance in use is never re-sliced: a free GPU is taken",
        ),
        pytest.param(
            {(1, 1): ("7g.80gb",)},
            [],
            "3g.40gb",
            1,
            id="a free GPU in MIG mode is re-sliced before another is switched to MIG",
        ),
        pytest.param(
            {(1, 0): ("1g.10gb",) * 7},
            [("1g.10gb", 0)] * 6,
            "1g.10gb",
            0,
            id="the seventh 1g.10gb takes the GPU's last idle instance",
        ),
    ],
)
def test_a_mig_job_takes_the_gpu_that_changes_least(layouts, running, pending, gpu) -> None:
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=2)
    jobs = [mig(i, queue, p, on(node, g)) for i, (p, g) in enumerate(running, start=1)]
    jobs.append(mig(99, queue, pending))
    result = plan(snapshot_with([node], [queue], jobs, layouts), NOW)
    [admission] = result.admissions
    assert admission.placements == (on(node, gpu),)


def test_a_free_gpu_is_re_sliced_once_and_the_next_job_fits_beside_its_new_instance() -> None:
    """Seven idle 1g.10gb instances give way to a 3g.40gb; a 4g.40gb of the same cycle is
    added beside it, and a third job finds no room: the busy GPU is not re-sliced again."""
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=1)
    jobs = [mig(1, queue, "3g.40gb"), mig(2, queue, "4g.40gb"), mig(3, queue, "1g.10gb")]
    snapshot = snapshot_with([node], [queue], jobs, {(1, 0): ("1g.10gb",) * 7})
    result = plan(snapshot, NOW)
    assert {a.workload_id: a.placements for a in result.admissions} == {
        1: (on(node, 0),),
        2: (on(node, 0),),
    }
    reason = outcome(result, snapshot)[3]
    assert "no H800 GPU has room for a 1g.10gb MIG instance beside the instances in use" in reason


def test_a_gpu_held_whole_is_not_taken_even_in_mig_mode() -> None:
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=1)
    whole = make_running(1, queue, on(node, 0))
    jobs = [whole, mig(2, queue, "1g.10gb")]
    snapshot = snapshot_with([node], [queue], jobs, {(1, 0): ("1g.10gb",)})
    assert "no H800 GPU is free" in outcome(plan(snapshot, NOW), snapshot)[2]


def test_a_free_gpu_in_mig_mode_is_kept_for_mig_jobs_while_one_waits() -> None:
    """GPU 0 is in MIG mode with idle instances, GPU 1 is not. While a MIG job of the model
    waits, GPU 0 is kept for it: a one-GPU job and a share take GPU 1, the MIG job GPU 0, and a
    two-GPU job waits."""
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=2)
    layouts = {(1, 0): ("3g.40gb", "3g.40gb")}
    for job in (workload(1, queue, 1), workload(2, queue, 1, slices=2)):
        jobs = [job, mig(3, queue, "3g.40gb")]
        placed = plan(snapshot_with([node], [queue], jobs, layouts), NOW).admissions
        assert {a.workload_id: a.placements for a in placed} == {
            job.id: (on(node, 1),),
            3: (on(node, 0),),
        }
    jobs = [workload(4, queue, 2), mig(3, queue, "3g.40gb", priority=-1)]
    placed = plan(snapshot_with([node], [queue], jobs, layouts), NOW).admissions
    assert [a.workload_id for a in placed] == [3]


def test_a_mig_job_its_quota_keeps_waiting_keeps_no_gpu_in_mig_mode() -> None:
    """The MIG job's queue has used its quota: it waits, and the GPU in MIG mode is free to a
    two-GPU job of another queue."""
    full, other = make_queue("full", h800=1), make_queue("other", h800=8)
    [node, busy] = make_cluster(nodes=2, gpus=2)
    jobs = [make_running(1, full, on(busy, 0)), mig(2, full, "3g.40gb"), workload(3, other, 2)]
    snapshot = snapshot_with([node, busy], [full, other], jobs, {(1, 0): ("3g.40gb",)})
    result = plan(snapshot, NOW)
    assert [(a.workload_id, a.placements) for a in result.admissions] == [(3, (on(node, 0, 1),))]
    assert "quota" in outcome(result, snapshot)[2]


def test_a_free_gpu_in_mig_mode_is_free_to_any_work_while_no_mig_job_waits() -> None:
    """No MIG job waits: the GPU in MIG mode is free like any other (its agent turns MIG off
    when the job starts), so a two-GPU job runs on the node; a GPU whose instances are in use
    stays MIG's."""
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=2)
    [admission] = plan(
        snapshot_with([node], [queue], [workload(1, queue, 2)], {(1, 0): ("3g.40gb",)}), NOW
    ).admissions
    assert admission.placements == (on(node, 0, 1),)
    busy = [mig(2, queue, "3g.40gb", on(node, 0)), workload(1, queue, 2)]
    assert not plan(snapshot_with([node], [queue], busy, {(1, 0): ("3g.40gb",)}), NOW).admissions


@pytest.mark.parametrize("slices", [0, 2], ids=["a whole-GPU job", "a share"])
def test_work_takes_a_gpu_in_mig_mode_only_where_its_node_has_no_other(slices) -> None:
    """No MIG job waits, GPU 0 is in MIG mode and GPU 1 is not: the one-GPU job or share takes
    GPU 1, which best-fit alone would not prefer; with GPU 1 held, GPU 0."""
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=2)
    layouts = {(1, 0): ("3g.40gb", "3g.40gb")}
    for held, gpu in (([], 1), ([make_running(2, queue, on(node, 1))], 0)):
        jobs = [workload(1, queue, 1, slices=slices), *held]
        [admission] = plan(snapshot_with([node], [queue], jobs, layouts), NOW).admissions
        assert admission.placements == (on(node, gpu),)


def test_a_profile_the_model_lacks_waits_and_takes_nothing() -> None:
    """Its model's memory changed since it was submitted: it waits, saying why, and preempts
    nothing to make room it could never use."""
    lender, borrower = make_queue("a", h800=1, cohort="c"), make_queue("b", h800=0, cohort="c")
    [node] = make_cluster(nodes=1, gpus=1)
    borrowed = make_running(1, borrower, on(node, 0))
    pending = workload(2, lender, 1, mig="3g.71gb", mig_charge=1.0)
    snapshot = snapshot_with([node], [lender, borrower], [borrowed, pending], {})
    result = plan(snapshot, NOW)
    assert not result.preemptions and not result.admissions
    assert outcome(result, snapshot)[2].endswith("H800 GPUs have no MIG profile 3g.71gb")


@pytest.mark.parametrize(
    "profile, charge",
    [
        pytest.param("1g.10gb", 1 / 7, id="1g.10gb: a seventh of the compute, above its memory"),
        pytest.param("3g.40gb", 0.5, id="3g.40gb: half the memory, more than 3/7 of the compute"),
        pytest.param("7g.80gb", 1.0, id="7g.80gb: the whole GPU"),
    ],
)
def test_a_mig_job_is_charged_the_larger_of_its_compute_and_memory_share(profile, charge) -> None:
    queue = make_queue("acme", h800=1)
    [node] = make_cluster(nodes=1, gpus=1)
    result = plan(snapshot_with([node], [queue], [mig(1, queue, profile)], {}), NOW)
    assert result.admissions
    assert result.usage == {(queue.id, "H800"): pytest.approx(charge)}


def test_quota_counts_mig_jobs_by_their_charge() -> None:
    """A queue of one GPU runs a 3g.40gb (half) and a 4g.40gb (4/7) only one at a time."""
    queue = make_queue("acme", h800=1)
    [node] = make_cluster(nodes=1, gpus=2)
    jobs = [mig(1, queue, "3g.40gb"), mig(2, queue, "4g.40gb")]
    snapshot = snapshot_with([node], [queue], jobs, {})
    result = plan(snapshot, NOW)
    assert [a.workload_id for a in result.admissions] == [1]
    assert "job needs 0.57" in outcome(result, snapshot)[2]


def test_a_quota_reason_says_mig_charges_to_three_decimals() -> None:
    """Three 1g.10gb (a seventh of a GPU each) read 0.429 in use, not 0.42857142857142855."""
    queue = make_queue("acme", h800=1)
    [node] = make_cluster(nodes=1, gpus=2)
    running = [mig(i, queue, "1g.10gb", on(node, 0)) for i in (1, 2, 3)]
    jobs = [*running, mig(4, queue, "7g.80gb")]
    snapshot = snapshot_with([node], [queue], jobs, {(node.id, 0): ("1g.10gb",) * 3})
    reason = outcome(plan(snapshot, NOW), snapshot)[4]
    assert "(0.429/1 in use, job needs 1;" in reason


@pytest.mark.parametrize(
    "reported, pending, gpu",
    [
        pytest.param(
            ("7g.80gb",),
            "7g.80gb",
            1,
            id="a GPU re-sliced since its report has no idle 7g.80gb left: a free GPU is taken",
        ),
        pytest.param(
            ("1g.10gb",),
            "2g.20gb",
            0,
            id="the new instance is counted beside the reported one: a 2g.20gb still fits",
        ),
        pytest.param(
            ("4g.40gb",),
            "3g.40gb",
            1,
            id="the new instance is counted beside the reported one: a 3g.40gb no longer fits",
        ),
    ],
)
def test_a_layout_reported_before_the_last_start_is_brought_up_to_date(
    reported, pending, gpu
) -> None:
    """GPU 0 holds a 3g.40gb started since its agent last reported GPU 0's layout."""
    queue = make_queue("acme", h800=8)
    [node] = make_cluster(nodes=1, gpus=2)
    jobs = [mig(1, queue, "3g.40gb", on(node, 0)), mig(2, queue, pending)]
    result = plan(snapshot_with([node], [queue], jobs, {(1, 0): reported}), NOW)
    [admission] = result.admissions
    assert admission.placements == (on(node, gpu),)
