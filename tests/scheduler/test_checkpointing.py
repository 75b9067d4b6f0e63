"""Checkpointing: Young's and Daly's intervals by hand, Daly's ETTR against a simulation, the
advisor's figures at 16,384 and 100,000 GPUs, and the registry's resume and prune rules."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.checkpointing import (
    FAILURES_PER_GPU_HOUR,
    Costs,
    Policy,
    PolicyKind,
    advise,
    daly_ettr,
    expected_ettr,
    first_order_ettr,
    interval_for,
    job_mtbf_s,
    latest_complete,
    table,
    to_prune,
    young_daly_interval,
    young_interval,
)

SIZES = (512, 1024, 4096, 16_384, 32_768, 65_536, 100_000)


def test_the_failure_rate_is_llama_3s() -> None:
    """419 interruptions in 54 days on 16,384 GPUs: a job MTBF of 54 days / 419 = 3.09 h."""
    assert job_mtbf_s(16_384) == pytest.approx(54 * 86_400 / 419, rel=0.001)
    gpu_hours_per_failure = 1 / FAILURES_PER_GPU_HOUR
    assert gpu_hours_per_failure == pytest.approx(54 * 24 * 16_384 / 419, rel=0.001)


def test_mtbf_shrinks_with_the_job() -> None:
    assert job_mtbf_s(16_384) == pytest.approx(11_140.1, abs=0.1)  # 3600 x 50,700 / 16,384
    assert job_mtbf_s(100_000) == pytest.approx(1_825.2)  # about half an hour
    assert job_mtbf_s(1, failures_per_gpu_hour=1.0) == 3600.0


@pytest.mark.parametrize("gpus", [0, -8])
def test_a_job_without_gpus_has_no_mtbf(gpus: int) -> None:
    with pytest.raises(ValueError, match="at least one GPU"):
        job_mtbf_s(gpus)


@pytest.mark.parametrize(
    ("cost_s", "mtbf_s", "young", "daly"),
    [
        # sqrt(2 x 50 x 10,000) = 1000; C/2M = 0.0025, sqrt = 0.05:
        # 1000 x (1 + 0.05/3 + 0.0025/9) - 50 = 1000 x 1.0169444 - 50 = 966.944
        pytest.param(50.0, 10_000.0, 1000.0, 966.944, id="a cheap save against a long MTBF"),
        # sqrt(2 x 300 x 1800) = 1039.230; C/2M = 1/12, sqrt = 0.2886751:
        # 1039.230 x (1 + 0.0962250 + 0.0092593) - 300 = 1039.230 x 1.1054843 - 300 = 848.852
        pytest.param(300.0, 1_800.0, 1039.230, 848.852, id="a 5-minute save, half-hour MTBF"),
        # sqrt(2 x 300 x 5000) = sqrt(3,000,000) = 1732.051; C/2M = 0.03, sqrt = 0.1732051:
        # 1732.051 x (1 + 0.0577350 + 0.0033333) - 300 = 1732.051 x 1.0610684 - 300 = 1537.824
        pytest.param(300.0, 5_000.0, 1732.051, 1537.824, id="a 5-minute save, 83-minute MTBF"),
    ],
)
def test_young_and_daly_intervals_by_hand(
    cost_s: float, mtbf_s: float, young: float, daly: float
) -> None:
    assert young_interval(cost_s, mtbf_s) == pytest.approx(young, abs=0.002)
    assert young_daly_interval(cost_s, mtbf_s) == pytest.approx(daly, abs=0.002)


def test_a_save_longer_than_two_mtbfs_checkpoints_once_per_mtbf() -> None:
    assert young_daly_interval(cost_s=500.0, mtbf_s=200.0) == 200.0


def test_daly_ettr_without_failures_is_work_over_work_plus_saves() -> None:
    assert daly_ettr(3000.0, 300.0, 120.0, mtbf_s=1e12) == pytest.approx(3000 / 3300, rel=1e-6)


def test_daly_ettr_of_a_hopeless_job_is_zero_not_an_overflow() -> None:
    assert daly_ettr(1e9, 0.0, 120.0, mtbf_s=100.0) == 0.0


def simulate_periodic(
    interval_s: float, cost_s: float, restart_s: float, mtbf_s: float, failures: int, seed: int
) -> float:
    """Work over wall time of one job with exponential failures, run until `failures` of them:
    each interval of work plus its save must pass without a failure to count, and a restart
    must too (a failure during a restart starts it again), as in Daly's model."""
    rng = random.Random(seed)
    wall = work = 0.0
    seen, restarting = 0, False
    while seen < failures:
        gap = rng.expovariate(1.0 / mtbf_s)  # memoryless: redraw at every phase
        need = restart_s if restarting else interval_s + cost_s
        if gap < need:
            wall, seen, restarting = wall + gap, seen + 1, True
            continue
        wall += need
        work += 0.0 if restarting else interval_s
        restarting = False
    return work / wall


def test_dalys_closed_form_matches_a_simulation_of_20000_failures() -> None:
    costs, mtbf = Costs(), job_mtbf_s(16_384)
    interval = young_daly_interval(costs.save_stall_s, mtbf)
    simulated = simulate_periodic(interval, costs.save_stall_s, costs.restart_s, mtbf, 20_000, 7)
    assert simulated == pytest.approx(
        daly_ettr(interval, costs.save_stall_s, costs.restart_s, mtbf), abs=0.005
    )


def test_dalys_interval_is_the_optimum_of_dalys_ettr() -> None:
    costs, mtbf = Costs(), job_mtbf_s(100_000)
    best = young_daly_interval(costs.save_stall_s, mtbf)

    def ettr(interval: float) -> float:
        return daly_ettr(interval, costs.save_stall_s, costs.restart_s, mtbf)

    assert ettr(best) >= max(ettr(best * 0.8), ettr(best * 1.25))


@pytest.mark.parametrize(
    ("stall", "interval", "lost", "restart", "mtbf", "ettr"),
    [
        pytest.param(10, 90, 0, 0, math.inf, 0.9, id="a 10 s stall per 90 s of work alone"),
        pytest.param(0, 100, 50, 50, 1000, 0.9, id="failures eating a tenth of the wall time"),
        pytest.param(10, 90, 50, 50, 1000, 0.81, id="both: the shares multiply"),
        pytest.param(0, 100, 900, 200, 1000, 0.0, id="failures leave no time for work"),
    ],
)
def test_first_order_ettr_term_by_term(
    stall: float, interval: float, lost: float, restart: float, mtbf: float, ettr: float
) -> None:
    assert first_order_ettr(stall, interval, lost, restart, mtbf) == pytest.approx(ettr)


def test_the_triggered_policy_keeps_large_jobs_productive() -> None:
    """The figures the portal quotes: at least 0.96 at 16,384 GPUs, 0.85 at 100,000."""
    best_16k, best_100k = advise(16_384)[0], advise(100_000)[0]
    assert best_16k.policy.kind is best_100k.policy.kind is PolicyKind.TRIGGERED
    assert best_16k.expected_ettr >= 0.96
    assert best_100k.expected_ettr >= 0.85


def test_the_advisor_ranks_every_policy_best_first() -> None:
    advice = advise(16_384)
    assert [a.policy.kind for a in advice] == ["triggered", "async", "periodic", "none"]
    assert [a.expected_ettr for a in advice] == sorted(
        (a.expected_ettr for a in advice), reverse=True
    )
    assert all(a.explanation for a in advice)
    assert "39.8 min" in advice[2].explanation  # Daly's periodic interval at 16,384 GPUs


@pytest.mark.parametrize("kind", list(PolicyKind), ids=lambda kind: kind.value)
def test_ettr_falls_as_the_job_grows(kind: PolicyKind) -> None:
    ettrs = [expected_ettr(Policy(kind, interval_for(kind, gpus)), gpus) for gpus in SIZES]
    assert all(small >= large for small, large in zip(ettrs, ettrs[1:], strict=False))
    assert ettrs[0] > ettrs[-1]


def test_async_snapshots_wait_for_the_previous_persist() -> None:
    """At 100,000 GPUs Young/Daly would snapshot every 3 minutes; the persist takes 5."""
    assert young_daly_interval(10.0, job_mtbf_s(100_000)) < 300.0
    assert interval_for(PolicyKind.ASYNC, 100_000) == 300.0


def test_the_triggered_fallback_is_sized_for_the_faults_it_covers() -> None:
    """Only 5% of faults reach the fallback, so it checkpoints as if the MTBF were 20 times."""
    mtbf = job_mtbf_s(16_384)
    assert interval_for(PolicyKind.TRIGGERED, 16_384) == pytest.approx(
        young_daly_interval(10.0, mtbf * 20)
    )


def test_a_triggered_save_that_always_works_needs_no_fallback() -> None:
    """Every fault then costs half a step, the save and the restart: 155 s per 11,140 s."""
    costs = Costs(triggered_success=1.0)
    assert interval_for(PolicyKind.TRIGGERED, 16_384, costs) is None
    ettr = expected_ettr(Policy(PolicyKind.TRIGGERED), 16_384, costs)
    assert ettr == pytest.approx(1 - 155 / job_mtbf_s(16_384))


def test_without_a_fallback_an_unsaved_fault_loses_half_the_run() -> None:
    with_fallback = expected_ettr(Policy(PolicyKind.TRIGGERED, 2100.0), 16_384)
    without = expected_ettr(Policy(PolicyKind.TRIGGERED), 16_384, job_hours=24)
    assert without < with_fallback
    assert expected_ettr(Policy(PolicyKind.TRIGGERED), 16_384, job_hours=1) > without


def test_no_checkpoints_is_fine_for_a_short_small_job_and_hopeless_for_a_big_one() -> None:
    assert expected_ettr(Policy(PolicyKind.NONE), 8, job_hours=1) > 0.999
    assert expected_ettr(Policy(PolicyKind.NONE), 16_384) < 0.01


@pytest.mark.parametrize("kind", [PolicyKind.PERIODIC, PolicyKind.ASYNC])
def test_a_checkpointing_policy_needs_an_interval(kind: PolicyKind) -> None:
    with pytest.raises(ValueError, match="needs an interval"):
        expected_ettr(Policy(kind), 16_384)


def test_the_module_prints_the_table_of_policies() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "scheduler.checkpointing"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.strip() == table()
    assert "| policy | interval @ 16,384 GPUs | ETTR @ 16,384 GPUs |" in printed
    rows = {line.split(" | ")[0].strip("| "): line for line in printed.splitlines()}
    assert set(PolicyKind) <= set(rows)
    assert rows["none"].count(" - ") == 2


# -- The registry's rules --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Ckpt:
    """A checkpoint as the registry sees it; compared by identity, like distinct rows."""

    step: int
    status: str
    created_at: int = 0


def ckpts(*specs: str) -> list[Ckpt]:
    """Checkpoints from "step:status[:created_at]" specs, e.g. "100:complete:5"."""
    made = []
    for spec in specs:
        step, status, *created = spec.split(":")
        made.append(Ckpt(int(step), status, int(created[0]) if created else 0))
    return made


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        pytest.param([], None, id="no checkpoints: nothing to resume from"),
        pytest.param(["100:failed", "200:partial"], None, id="only broken ones: nothing either"),
        pytest.param(["100:complete:9", "200:complete:1"], 1, id="the higher step wins over age"),
        pytest.param(["100:complete:1", "100:complete:2"], 1, id="same step: the newer one"),
        pytest.param(["100:complete", "300:in_progress"], 0, id="one being written is not ready"),
        pytest.param(["100:complete", "300:failed"], 0, id="a failed newer save is skipped"),
    ],
)
def test_latest_complete(specs: list[str], expected: int | None) -> None:
    items = ckpts(*specs)
    assert latest_complete(items) is (items[expected] if expected is not None else None)


@pytest.mark.parametrize(
    ("specs", "keep", "pruned"),
    [
        pytest.param(
            ["100:complete", "200:complete", "300:complete", "400:complete"], 2, [0, 1],
            id="keep the newest two complete ones",
        ),
        pytest.param(
            ["100:complete", "200:complete"], 0, [0], id="keep=0 still keeps the latest complete",
        ),
        pytest.param(
            ["100:failed", "200:complete", "300:partial"], 1, [0],
            id="a broken save before the latest complete goes, one after it stays",
        ),
        pytest.param(
            ["100:in_progress", "200:complete", "300:complete"], 1, [1],
            id="an in-progress save is never pruned, even an old one",
        ),
        pytest.param(
            ["100:failed", "200:partial", "300:in_progress"], 1, [],
            id="without a complete checkpoint nothing is pruned",
        ),
        pytest.param(
            ["300:complete", "100:complete", "200:complete"], 1, [1, 2],
            id="pruned oldest first whatever the input order",
        ),
    ],
)  # fmt: skip
def test_to_prune(specs: list[str], keep: int, pruned: list[int]) -> None:
    items = ckpts(*specs)
    assert to_prune(items, keep) == [items[i] for i in pruned]


def test_a_negative_keep_is_an_error() -> None:
    with pytest.raises(ValueError, match="keep"):
        to_prune(ckpts("100:complete"), -1)


checkpoint_lists = st.lists(
    st.builds(
        Ckpt,
        step=st.integers(0, 10),
        status=st.sampled_from(["complete", "partial", "failed", "in_progress"]),
        created_at=st.integers(0, 5),
    ),
    max_size=12,
)


@given(checkpoint_lists, st.integers(0, 4))
def test_pruning_never_loses_the_resume_point_or_a_save_in_flight(
    items: list[Ckpt], keep: int
) -> None:
    pruned = to_prune(items, keep)
    latest = latest_complete(items)
    assert all(c is not latest for c in pruned)
    assert all(c.status != "in_progress" for c in pruned)
    assert all(any(c is item for item in items) for c in pruned)
    complete = [c for c in items if c.status == "complete"]
    kept_complete = [c for c in complete if all(c is not p for p in pruned)]
    assert len(kept_complete) == min(max(keep, 1), len(complete))
    assert latest_complete([c for c in items if all(c is not p for p in pruned)]) is latest


def test_a_policy_read_back_as_plain_strings_is_judged_the_same() -> None:
    """The portal stores the kind as text; a plain "async" must mean PolicyKind.ASYNC."""
    interval = interval_for(PolicyKind.ASYNC, 16_384)
    as_text = Policy("async", interval)  # type: ignore[arg-type]
    assert expected_ettr(as_text, 16_384) == expected_ettr(
        Policy(PolicyKind.ASYNC, interval), 16_384
    )
    triggered = interval_for("triggered", 16_384)  # type: ignore[arg-type]
    assert triggered == interval_for(PolicyKind.TRIGGERED, 16_384)


def test_an_unknown_policy_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="bogus"):
        expected_ettr(Policy("bogus", 600.0), 16_384)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bogus"):
        interval_for("bogus", 16_384)  # type: ignore[arg-type]
