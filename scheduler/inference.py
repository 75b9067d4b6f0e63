"""Inference load: real request arrivals laid over a day, and how long a replica takes to serve one.

The arrivals are the Azure LLM inference trace of 2023 (`data/traces/azure-llm-2023/`, one hour
of a conversation and a coding service). An hour has no daily curve, so one is laid over it: the
rate follows a daily cosine (`daily_factor`) from `valley` times the peak twelve hours from the
peak up to the peak at 14:00. The shape is ours, not measured: the week-long Azure LLM traces
of 2024 (same repository) show a daily peak and valley; a valley at a quarter of the peak is
our default.
Inside it the trace's own burstiness stays: its gaps between arrivals are replayed in order
(from the start again when they run out), each stretched or squeezed by the ratio of the
trace's mean rate to the rate wanted at that moment.

A replica serves the requests in flight at once (continuous batching), each in
prompt / prefill rate + output / decode rate seconds for its GPU model (`SPEEDS`, per sequence;
assumed figures, of the order published for a 70B model on a node of that GPU), up to as many
at a time as its batch holds; the rest wait their turn.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

TRACE_DIR = Path(__file__).resolve().parents[1] / "data" / "traces" / "azure-llm-2023"
TRACES = {
    "azure-conv": "AzureLLMInferenceTrace_conv.csv",
    "azure-code": "AzureLLMInferenceTrace_code.csv",
}
VALLEY = 0.25  # the night's rate, as a share of the afternoon peak
HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True, slots=True)
class Request:
    """One request: when it arrives (seconds) and its prompt and output tokens."""

    at_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Speed:
    """How fast one replica of a GPU model works through one sequence (tokens per second)."""

    prefill: float
    decode: float


SPEEDS = {
    "H200": Speed(prefill=12_000, decode=45),
    "H100": Speed(prefill=10_000, decode=40),
    "H800": Speed(prefill=10_000, decode=40),
    "A100": Speed(prefill=5_000, decode=25),
    "H20": Speed(prefill=3_000, decode=35),
}
DEFAULT_SPEED = Speed(prefill=5_000, decode=25)


@cache
def read_trace(name: str) -> tuple[Request, ...]:
    """A trace's requests, timed from its first arrival."""
    if name not in TRACES:
        raise ValueError(f"unknown trace {name!r}; there are {', '.join(sorted(TRACES))}")
    with open(TRACE_DIR / TRACES[name], newline="") as f:
        rows = [
            (datetime.fromisoformat(r["TIMESTAMP"][:26]), r["ContextTokens"], r["GeneratedTokens"])
            for r in csv.DictReader(f)
        ]
    first = rows[0][0]
    return tuple(
        Request((at - first).total_seconds(), int(prompt), int(output))
        for at, prompt, output in rows
    )


def daily_level(t: float, peak: float, valley: float, peak_hour: float = 14.0) -> float:
    """A daily cosine from `valley` (12 h from the peak) to `peak` (at `peak_hour`)."""
    phase = 2 * math.pi * (t / DAY - peak_hour / 24)
    return valley + (peak - valley) * (1 + math.cos(phase)) / 2


def daily_factor(t: float, valley: float = VALLEY, day_s: float = DAY) -> float:
    """The share of the peak rate at `t` seconds after midnight of a day `day_s` long."""
    return daily_level(t * DAY / day_s, 1.0, valley)


def mean_rate(requests: tuple[Request, ...]) -> float:
    """The trace's arrivals per second."""
    return (len(requests) - 1) / (requests[-1].at_s - requests[0].at_s)


def replay(
    requests: tuple[Request, ...],
    *,
    seconds: float,
    peak_rps: float,
    start_s: float = 0.0,
    valley: float = VALLEY,
    day_s: float = DAY,
) -> Iterator[Request]:
    """Arrivals from `start_s` for `seconds` (clock time of a day `day_s` long) at `peak_rps`
    under the daily curve, the trace's gaps kept in order."""
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(requests)]
    trace_rps = mean_rate(requests)
    t, end = start_s, start_s + seconds
    for i in itertools.count():
        rate = peak_rps * daily_factor(t, valley, day_s)
        t += gaps[i % len(gaps)] * trace_rps / rate
        if t >= end:
            return
        source = requests[(i + 1) % len(requests)]
        yield Request(t, source.prompt_tokens, source.output_tokens)


def service_s(request: Request, gpu_model: str) -> float:
    """Seconds a replica of `gpu_model` ("H800", or a node's "H800-SXM-80GB") takes to serve
    `request`, with nothing waiting."""
    speed = SPEEDS.get(gpu_model.split("-")[0].upper(), DEFAULT_SPEED)
    return request.prompt_tokens / speed.prefill + request.output_tokens / speed.decode


def mean_service_s(requests: tuple[Request, ...], gpu_model: str) -> float:
    """The mean of `service_s` over a trace: in-flight requests = rate x this (Little's law)."""
    return sum(service_s(r, gpu_model) for r in requests) / len(requests)
