"""The simulator reproduces the ETTR model of `scheduler.checkpointing` (a smaller sample than
`python -m bench.ettr`, which holds them to 0.01 over 2,000 days).

Over 150 simulated days a 16,384-GPU job fails about 1,160 times; the standard error of its
simulated ETTR is then about 0.005, so 0.02 is a four-sigma bound, not a fit to the seed.
"""

from __future__ import annotations

import pytest

from scheduler.checkpointing import PolicyKind
from scheduler.sim.ettr import job_cluster, simulated_ettr


@pytest.mark.parametrize(
    ("kind", "gpus"),
    [
        pytest.param(PolicyKind.PERIODIC, 16_384, id="periodic at 16,384 GPUs: Daly"),
        pytest.param(PolicyKind.PERIODIC, 100_000, id="periodic at 100,000 GPUs: Daly"),
        pytest.param(PolicyKind.ASYNC, 16_384, id="async at 16,384 GPUs: first order"),
        pytest.param(PolicyKind.TRIGGERED, 16_384, id="triggered at 16,384 GPUs: first order"),
    ],
)
def test_simulated_ettr_matches_the_model(kind: PolicyKind, gpus: int) -> None:
    result = simulated_ettr(kind, gpus, days=150)
    assert result.faults > 100
    assert result.simulated == pytest.approx(result.model, abs=0.02)


def test_fault_triggered_saves_reach_the_issue_targets() -> None:
    assert simulated_ettr(PolicyKind.TRIGGERED, 16_384, days=150).simulated >= 0.96
    assert simulated_ettr(PolicyKind.TRIGGERED, 100_000, days=30).simulated >= 0.85


def test_the_job_cluster_has_exactly_the_job_s_gpus() -> None:
    assert job_cluster(16_384).capacity == {"H800": 16_384}
    with pytest.raises(ValueError, match="whole 8-GPU nodes"):
        job_cluster(100)
