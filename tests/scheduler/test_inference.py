"""Inference load: the trace replayed under the daily curve, its gaps kept; service times."""

import itertools

import pytest

from scheduler.inference import (
    DAY,
    HOUR,
    Request,
    daily_factor,
    mean_rate,
    read_trace,
    replay,
    service_s,
)


def test_the_trace_is_read_whole_and_timed_from_its_first_arrival():
    requests = read_trace("azure-conv")
    assert len(requests) == 19_366 and requests[0].at_s == 0.0
    assert 3500 < requests[-1].at_s < 3600  # one hour
    assert mean_rate(requests) == pytest.approx(5.4, abs=0.2)
    with pytest.raises(ValueError, match="azure-code"):
        read_trace("azure-chat")


def test_the_day_peaks_at_two_in_the_afternoon_and_bottoms_out_at_two_at_night():
    assert daily_factor(14 * HOUR) == pytest.approx(1.0)
    assert daily_factor(2 * HOUR) == pytest.approx(0.25)
    assert daily_factor(14 * 60, day_s=DAY / 60) == pytest.approx(1.0)  # a day in 24 minutes


def test_arrivals_follow_the_curve_at_the_peak_rate_with_the_traces_gaps():
    requests = read_trace("azure-conv")
    peak = [r.at_s for r in replay(requests, seconds=HOUR, peak_rps=20, start_s=13.5 * HOUR)]
    night = [r.at_s for r in replay(requests, seconds=HOUR, peak_rps=20, start_s=1.5 * HOUR)]
    assert len(peak) == pytest.approx(20 * HOUR, rel=0.05)
    assert len(night) / len(peak) == pytest.approx(0.25, rel=0.05)
    # The gaps are the trace's, squeezed by one factor: bursts stay bursts.
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(requests[:50])]
    replayed = [b - a for a, b in itertools.pairwise([13.5 * HOUR, *peak[:49]])]
    ratio = mean_rate(requests) / 20
    assert replayed == pytest.approx([g * ratio for g in gaps], rel=0.02)
    assert all(r.prompt_tokens for r in replay(requests, seconds=60, peak_rps=5))


def test_a_replica_takes_its_prompt_and_output_at_its_gpus_rates():
    request = Request(0.0, 10_000, 400)
    assert service_s(request, "H800") == pytest.approx(1.0 + 10.0)
    assert service_s(request, "H800-SXM-80GB") == service_s(request, "H800")  # a node's name
    assert service_s(request, "B9000") > service_s(request, "H800")  # unknown: a modest one
