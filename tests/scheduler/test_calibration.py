"""The fleet's calibration: runs' ratios of measured to predicted iteration time, aggregated per
model family, GPU and scale, and applied to the planner's predictions."""

import math

import pytest

from scheduler import calibration, parallelism
from scheduler.calibration import ANY_SCALE, HALF_LIFE_S, Run

NOW = 1_000_000_000.0


@pytest.mark.parametrize(
    "model,family",
    [
        ("llama3-8b", "llama3"),
        ("llama3-405b", "llama3"),
        ("gpt3-1.3b", "gpt3"),
        ("megatron-1t", "megatron"),
        ("my-model", "my-model"),
    ],
)
def test_a_model_counts_for_its_family(model, family):
    assert calibration.family(model) == family


@pytest.mark.parametrize("gpus,bucket", [(1, 1), (8, 8), (12, 8), (896, 512), (16384, 16384)])
def test_a_gpu_count_falls_in_the_power_of_two_at_or_below_it(gpus, bucket):
    assert calibration.scale(gpus) == bucket


def test_one_run_moves_the_factor_part_of_the_way_and_many_all_but_all():
    one = calibration.aggregate([(1.2, NOW)], NOW)
    assert one.runs == 1 and one.factor == pytest.approx(math.sqrt(1.2))
    many = calibration.aggregate([(1.2, NOW)] * 20, NOW)
    assert many.runs == 20 and 1.18 < many.factor < 1.2


def test_the_mean_is_taken_in_log_space():
    """Twice as slow and twice as fast cancel out."""
    assert calibration.aggregate([(2.0, NOW), (0.5, NOW)], NOW).factor == pytest.approx(1.0)


def test_a_run_far_from_its_buckets_median_is_left_out():
    runs = [(1.1, NOW)] * 4 + [(5.0, NOW)]
    found = calibration.aggregate(runs, NOW)
    assert found.runs == 4 and found.factor < 1.1


def test_recent_runs_weigh_more():
    old = NOW - 4 * HALF_LIFE_S
    assert calibration.aggregate([(0.8, old), (1.2, NOW)], NOW).factor > 1.05
    assert calibration.aggregate([(1.2, old), (0.8, NOW)], NOW).factor < 0.95


def test_a_scale_bucket_starts_from_its_family_and_gpus_factor():
    runs = [Run("llama3-8b", "H800", 8, 1.3, NOW)] * 10 + [Run("llama3-70b", "H800", 64, 1.3, NOW)]
    factors = calibration.table(runs, NOW)
    assert factors["llama3", "H800", ANY_SCALE].runs == 11
    lone = factors["llama3", "H800", 64]
    assert lone.runs == 1 and lone.factor == pytest.approx(1.3, rel=0.02)  # not halfway to 1


def test_a_lookup_falls_back_to_the_family_and_gpu_then_to_none():
    factors = calibration.table([Run("llama3-8b", "H800", 16, 1.2, NOW)], NOW)
    assert calibration.lookup(factors, "llama3-70b", "H800", 31).scale == 16
    assert calibration.lookup(factors, "llama3-70b", "H800", 64).scale == ANY_SCALE
    assert calibration.lookup(factors, "llama3-8b", "H100", 16) is None
    assert calibration.lookup(factors, "gpt3-13b", "H800", 16) is None


def test_a_calibrated_plan_is_slower_by_its_factor_and_its_curve_too():
    model, gpu = parallelism.MODELS["llama3-8b"], parallelism.GPUS["H800"]
    plan = parallelism.plan(model, gpu, 16, 64)
    factor = calibration.Factor(1.25, 3, 16)
    slower = calibration.calibrated(plan, factor)
    assert slower.iteration_s == pytest.approx(1.25 * plan.iteration_s)
    assert slower.tokens_per_s == pytest.approx(plan.tokens_per_s / 1.25)
    assert (slower.layout, slower.memory_gib) == (plan.layout, plan.memory_gib)
    factors = {("llama3", "H800", 16): factor}
    curve = ((8, 100.0), (16, 180.0))
    assert calibration.calibrated_curve(curve, factors, "llama3-8b", "H800") == (
        (8, 100.0),
        (16, 144.0),
    )


def test_measured_speeds_are_each_models_newest_runs_on_the_models_it_accepts():
    runs = [("H800", 0.4), ("H20", 0.1), ("H800", 0.1), ("A100", 0.3), ("H20", 0.0)]
    speeds, measured = calibration.measured_speeds(runs, ["H20", "H800"])
    assert dict(speeds) == pytest.approx({"H800": 0.2, "H20": 0.1})  # a geometric mean
    assert measured == 3  # a model it does not accept, and a run with no steps, count not


def test_a_models_measured_speed_rests_on_its_newest_runs():
    runs = [("H800", 2.0)] * calibration.RECENT_RUNS + [("H800", 0.01)] * 3
    speeds, measured = calibration.measured_speeds(runs, ["H800", "H20"])
    assert speeds == (("H800", pytest.approx(2.0)),)  # H20 unknown
    assert measured == calibration.RECENT_RUNS
