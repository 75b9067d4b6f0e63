"""Speed work on mixed fleets must not change a single plan either.

`test_plan_digests` covers fleets of whole GPUs of one model per job. Here: the fleets of
`bench.engine --mixed` at 30,000 GPUs (H800 and H20; a third of the pending jobs accept both,
a tenth are shares of a GPU placed by FGD) and at 1,000 (all H800, with shares), and three
streams of `bench.fragmentation` (shares and small jobs placed by FGD as work churns, then a
fill). Each plan's text is hashed and compared with the digest recorded from the engine before
the speed work on shares.
"""

from __future__ import annotations

import hashlib

import pytest

from bench import engine, fragmentation
from scheduler.engine import plan
from scheduler.engine.model import SharePlacement

MIXED = {  # (GPUs, seed) -> digest
    (1000, 1): "7658a20645355638",
    (1000, 2): "fecf6e519a3cc115",
    (1000, 3): "2ad8d6ff3ab9cac2",
    (1000, 4): "99da8cd92867b764",
    (30000, 1): "007536cd6fb0a634",
    (30000, 2): "43b0ace0ee7c794a",
    (30000, 3): "7c745c7abd410f7d",
}
STREAMS = {1: "2af068cac9c8462f", 2: "4ed549b012d8a948", 3: "8edb42d36b1bc3f5"}


@pytest.mark.parametrize(("gpus", "seed"), sorted(MIXED))
def test_plans_of_mixed_fleets_are_those_recorded(gpus: int, seed: int) -> None:
    snapshot = engine.scenario(gpus, seed, mixed=True)
    assert any(w.slices for w in snapshot.workloads)
    if gpus > 10_000:  # every third pod is of H20: a fleet of three pods or more
        assert any(len(w.accepts) > 1 for w in snapshot.workloads)
    planned = plan(snapshot, now=engine.NOW)
    assert hashlib.sha256(repr(planned).encode()).hexdigest()[:16] == MIXED[gpus, seed]


@pytest.mark.parametrize("seed", sorted(STREAMS))
def test_plans_of_an_fgd_stream_are_those_recorded(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest, planned = hashlib.sha256(), []

    def hashed(*args, **kwargs):
        result = plan(*args, **kwargs)
        digest.update(repr(result).encode())
        planned.append(result)
        return result

    monkeypatch.setattr(fragmentation, "plan", hashed)
    fragmentation.measure(SharePlacement.FGD, fragmentation.cluster(120), 40, seed)
    assert len(planned) > 40
    assert digest.hexdigest()[:16] == STREAMS[seed]
