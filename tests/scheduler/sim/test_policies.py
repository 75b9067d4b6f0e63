"""Every policy, Wanka's and the baselines, on a cluster of two regions."""

from __future__ import annotations

import pytest

from scheduler.sim.policies import POLICIES, make_policy
from scheduler.sim.runner import run
from scheduler.sim.simulator import SimConfig
from scheduler.sim.spec import parse_spec
from scheduler.sim.trace import TraceJob

QUIET = SimConfig(seed=1, failures_per_gpu_hour=0.0)


def two_regions():
    """Two nodes of 8 H800 in region east, one in west; a queue in each region."""
    return parse_spec(
        {
            "name": "two regions",
            "datacenters": [
                {"name": "dc1", "region": "east", "pods": [{"name": "p", "leaves": [
                    {"name": "l1", "nodes": 2, "gpu_model": "H800"}]}]},
                {"name": "dc2", "region": "west", "pods": [{"name": "p", "leaves": [
                    {"name": "l1", "nodes": 1, "gpu_model": "H800"}]}]},
            ],
            "queues": [
                {"name": "a", "region": "east", "quotas": {"H800": 16}},
                {"name": "b", "region": "west", "quotas": {"H800": 8}},
            ],
        }
    )  # fmt: skip


def trace():
    """A gang of a whole region in each region, then smaller jobs behind them."""
    return [
        TraceJob(1, 0.0, 16, "H800", 3600.0, "a"),
        TraceJob(2, 0.0, 8, "H800", 3600.0, "b"),
        TraceJob(3, 60.0, 8, "H800", 600.0, "a", priority=5),
        TraceJob(4, 60.0, 4, "H800", 600.0, "b"),
    ]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_each_policy_runs_every_job_on_a_cluster_of_two_regions(policy):
    figures = run(trace(), two_regions(), [policy], config=QUIET)["policies"][policy]
    assert figures["jobs"] == figures["finished"] == 4


def test_fifo_keeps_one_queue_per_region_with_the_regions_gpus():
    """A region's jobs go to its FIFO queue: a job of east waits behind east's gang, not
    behind west's."""
    spec = two_regions()
    fifo = make_policy("fifo", spec)
    assert {(q.region, q.quotas[0].nominal) for q in fifo.queues} == {("east", 16), ("west", 8)}
    region = {q.id: q.region for q in fifo.queues}
    assert [region[fifo.queue_id(job, spec)] for job in trace()] == ["east", "west"] * 2
    assert {fifo.priority(job) for job in trace()} == {0}
