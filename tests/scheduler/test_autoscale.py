"""The autoscaler against Knative's documented KPA behaviour (knative.dev, "Configuring the
autoscaler": windows, panic, rates, scale to zero)."""

import json

import pytest

from scheduler.autoscale import Autoscaler, Settings

STEP = 2.0  # the portal samples every 2 s


def run(settings, loads, ready, *, until=None):
    """Feed `loads` (in flight, one sample per STEP from t=STEP) and decide after the last."""
    scaler = Autoscaler(settings)
    now = 0.0
    decision = None
    for load in loads:
        now += STEP
        scaler.observe(now, load)
        decision = scaler.decide(now, ready(decision) if callable(ready) else ready)
    return scaler, decision, now


def steady(load, seconds):
    return [load] * int(seconds / STEP)


TARGET_1 = Settings(target=1, max_replicas=1000)


@pytest.mark.parametrize(
    "settings, loads, ready, replicas, panic",
    [
        pytest.param(
            TARGET_1, steady(10, 60), 10, 10, False, id="load at the target keeps the count"
        ),
        pytest.param(
            Settings(target=4, max_replicas=100),
            steady(10, 60),
            3,
            3,
            False,
            id="the count is the load over the target per replica, rounded up",
        ),
        pytest.param(
            TARGET_1,
            steady(10, 54) + steady(15, 6),
            10,
            11,
            False,
            id="a spike under twice the capacity is averaged over the stable window",
        ),
        pytest.param(
            TARGET_1,
            steady(10, 54) + steady(40, 6),
            10,
            40,
            True,
            id="six seconds at twice the capacity panic and scale by the panic window",
        ),
        pytest.param(
            TARGET_1,
            steady(10, 54) + steady(40, 6) + steady(0, 30),
            10,
            40,
            True,
            id="in panic the count never goes down",
        ),
        pytest.param(
            TARGET_1,
            steady(10, 54) + steady(40, 6) + steady(10, 62),
            40,
            20,
            False,
            id="panic ends a stable window after the last hot sample, then the rate limits",
        ),
        pytest.param(
            Settings(target=1, max_replicas=1000, max_scale_up_rate=2),
            steady(100, 60),
            3,
            6,
            True,
            id="a decision grows the count at most by the scale-up rate",
        ),
        pytest.param(
            TARGET_1, steady(0, 60), 10, 5, False, id="a decision at most halves the count"
        ),
        pytest.param(
            Settings(target=1, max_replicas=8),
            steady(100, 60),
            8,
            8,
            True,
            id="never above the maximum",
        ),
        pytest.param(
            Settings(target=1, min_replicas=3, max_replicas=8),
            steady(0, 60),
            3,
            3,
            False,
            id="never below the minimum",
        ),
        pytest.param(
            Settings(target=1),
            steady(0, 120),
            1,
            1,
            False,
            id="without scale to zero one replica stays",
        ),
        pytest.param(
            Settings(target=1, scale_to_zero=True),
            steady(1, 60) + steady(0, 61),
            1,
            1,
            False,
            id="scale to zero waits for a quiet stable window",
        ),
        pytest.param(
            Settings(target=1, scale_to_zero=True),
            steady(1, 60) + steady(0, 62 + 30),
            1,
            0,
            False,
            id="then for the grace",
        ),
        pytest.param(
            Settings(target=10, scale_to_zero=True),
            steady(0, 60) + [1],
            0,
            1,
            False,
            id="one request wakes a service at zero",
        ),
    ],
)
def test_kpa(settings, loads, ready, replicas, panic):
    _, decision, _ = run(settings, loads, ready)
    assert (decision.replicas, decision.panic) == (replicas, panic), decision.reason


def test_a_scale_down_waits_out_the_delay():
    settings = Settings(target=1, max_replicas=100, scale_down_delay_s=30)
    scaler, decision, now = run(settings, steady(10, 60), 10)
    assert decision.replicas == 10
    for _ in range(int(60 / STEP)):  # no load: the stable average falls, the delay holds
        now += STEP
        scaler.observe(now, 0)
        decision = scaler.decide(now, 10)
        if now < 60 + 30:
            assert decision.replicas == 10
    assert decision.replicas == 5  # halved at most, once the delay passed


def test_the_state_survives_a_trip_through_json():
    scaler, _, now = run(TARGET_1, steady(10, 54) + steady(40, 4), 10)
    copy = Autoscaler(TARGET_1, json.loads(json.dumps(scaler.state())))
    for a in (scaler, copy):
        a.observe(now + STEP, 40)
    assert scaler.decide(now + STEP, 10) == copy.decide(now + STEP, 10)
    assert copy.decide(now + STEP, 10).panic


@pytest.mark.parametrize(
    "knobs",
    [
        {"target": 0},
        {"target": 1, "min_replicas": 3, "max_replicas": 2},
        {"target": 1, "panic_window_s": 90},
    ],
)
def test_settings_that_cannot_work_are_refused(knobs):
    with pytest.raises(ValueError):
        Settings(**knobs)
