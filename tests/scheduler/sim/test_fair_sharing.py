"""Fair sharing in the simulator weighs borrowing across GPU models by what a GPU of each is
worth, as in the portal: the cluster spec's `worth`, else the planner's dense BF16 TFLOPS."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.engine.testing import make_queue
from scheduler.sim.runner import simulate
from scheduler.sim.spec import SpecError, parse_spec
from scheduler.sim.trace import TraceJob
from tests.scheduler.sim.test_scenarios import NO_FAULTS

LONG = 10_000.0


def mixed(worth: dict[str, float] | None = None):
    """Four 8-GPU H800 nodes and four H20 nodes; cohort `lab` of `lender` (32 of each) and
    `big` and `small`, which own nothing and borrow."""
    pods = [
        {"name": name, "leaves": 1, "nodes_per_leaf": 4, "gpu_model": model}
        for name, model in (("h800", "H800"), ("h20", "H20"))
    ]
    borrower = {"cohort": "lab", "quotas": {"H800": 0, "H20": 0}}
    return parse_spec(
        {
            "datacenters": [{"name": "dc1", "pods": pods}],
            "cohorts": [{"name": "lab"}],
            "queues": [
                {"name": "lender", "cohort": "lab", "quotas": {"H800": 32, "H20": 32}},
                {"name": "big", **borrower},
                {"name": "small", **borrower},
            ],
            **({"worth": worth} if worth is not None else {}),
        }
    )


# `big` borrows 16 H800s and `small` all 32 H20s; at 100 s both ask for the last 8 H800s.
TRACE = [
    TraceJob(1, 0.0, 8, "H800", LONG, "lender"),
    TraceJob(2, 0.0, 16, "H800", LONG, "big"),
    TraceJob(3, 0.0, 32, "H20", LONG, "small"),
    TraceJob(4, 100.0, 8, "H800", 1000.0, "big"),
    TraceJob(5, 100.0, 8, "H800", 1000.0, "small"),
]


@pytest.mark.parametrize(
    ("worth", "first"),
    [
        pytest.param(
            None,
            "small",
            id="the planner's figures: small has borrowed less worth (32 x 148 + 8 x 989 "
            "against 24 x 989) though more of the H20s than big will have of the H800s",
        ),
        pytest.param(
            {"H20": 989},
            "big",
            id="an H20 worth an H800: small has borrowed more (40 GPUs against 24)",
        ),
    ],
)
def test_worth_decides_which_queue_borrows_the_last_gpus_first(worth, first) -> None:
    outcomes = {
        o.id: o for o in simulate(TRACE, mixed(worth), "wanka", NO_FAULTS).recorder.outcomes
    }
    waited = {"big": outcomes[4].wait_s, "small": outcomes[5].wait_s}
    assert waited[first] < 60.0
    assert min(waited.values()) < 60.0 < max(waited.values())


def test_a_spec_weighs_its_models_by_its_worth_else_the_planners():
    spec = mixed({"H20": 200, "MLU590": 2.5})
    assert spec.model_worth == (("H20", 200.0), ("H800", 989.0), ("MLU590", 2.5))
    one_unknown = parse_spec(
        {
            "datacenters": [
                {
                    "name": "dc1",
                    "pods": [{"name": "p", "leaves": 1, "nodes_per_leaf": 1, "gpu_model": "T4"}],
                }
            ],
            "queues": [{"name": "q", "quotas": {"T4": 8}}],
        }
    )
    assert one_unknown.model_worth == ()  # no figure: the engine counts each model apart
    quota_only = replace(one_unknown, queues=(make_queue("q", t4=8, a100=8),))
    assert quota_only.model_worth == (("A100", 312.0),)  # a model of quota, with no node


@pytest.mark.parametrize("value", [0, -1, "989", True, None])
def test_a_bad_worth_names_its_model(value) -> None:
    with pytest.raises(SpecError, match="worth.H20: must be a number above 0"):
        mixed({"H20": value})
