"""Scripted incidents in the simulator, recovered as the portal recovers them; every figure is
worked out by hand. A 1,000 s job on 8-GPU nodes; a restart takes 20 s, a save from memory
5 s and keeps the work up to the last 10 s step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.checkpointing import Costs, Policy, PolicyKind
from scheduler.sim.incidents import Detection, Incident
from scheduler.sim.policies import make_policy
from scheduler.sim.simulator import SimConfig, SimulationError, Simulator
from scheduler.sim.trace import TraceJob
from tests.scheduler.sim.scenarios import cluster

CONFIG = SimConfig(
    failures_per_gpu_hour=0.0,
    cycle_s=10.0,
    costs=Costs(restart_s=20.0, triggered_save_s=5.0, step_s=10.0),
    detection=Detection(lost_after_s=15.0, hang_after_s=60.0, straggler_for_s=30.0),
)
TRIGGERED = Policy(PolicyKind.TRIGGERED)


def run(nodes: int, job: TraceJob, incident: Incident, spares: int = 0, config=CONFIG):
    spec = cluster(leaves=1, nodes=nodes, queues={"a": (8 * nodes, 0)})
    spec = replace(spec, spares=tuple(n.id for n in spec.nodes[nodes - spares :]))
    sim = Simulator([job], spec, make_policy("wanka", spec), config, incidents=[incident])
    sim.run()
    return sim, sim.jobs[job.id]


def gang(gpus: int = 16, **fields) -> TraceJob:
    return TraceJob(1, 0.0, gpus, "H800", 1000.0, "a", **{"checkpoint": TRIGGERED, **fields})


def test_xid_79_moves_the_part_on_the_failed_node_to_the_pods_spare() -> None:
    """At 100 rank 1's node fails: the healthy rank saves (100 s of work, done at 105), the
    spare takes its place, the restart ends at 125 and the other 900 s end at 1025."""
    sim, job = run(3, gang(), Incident(100.0, 1, 1, "xid-79"), spares=1)
    spare = sim.spec.nodes[2].id
    assert job.history == ["running", "recovering (spare)", "running", "succeeded"]
    assert job.finished_at == 1025.0 and job.ettr(sim.end) == pytest.approx(1000 / 1025)
    assert not sim.spares  # the spare was used
    assert sim.allocations.closed == {sim.spec.nodes[1].id}  # the failed node takes no work
    assert spare not in sim.allocations.closed


def test_without_a_spare_an_elastic_job_shrinks_off_the_failed_node() -> None:
    """The same fault, no spare, a minimum of 8: it goes on on one node at half speed from
    125: 900 s of work take 1,800 s. It never grows back: the other node is out of service."""
    sim, job = run(2, gang(min_gpus=8), Incident(100.0, 1, 1, "xid-79"))
    assert job.history == ["running", "recovering (shrunk)", "running", "succeeded"]
    assert job.finished_at == 125.0 + 1800.0
    assert job.shrinks == 0  # a recovery, not a shrink the engine chose


def test_without_a_spare_a_rigid_job_is_requeued_with_its_save() -> None:
    sim, job = run(2, gang(), Incident(100.0, 1, 1, "xid-79"))
    assert job.history == ["running", "recovering (requeued)", "pending"]  # 8 GPUs are left
    assert (job.saved, job.held, job.id in sim.pending) == (100.0, 0, True)
    assert sim.allocations.free[sim.spec.nodes[0].id] == set(range(8))  # nothing leaked


def test_a_hang_stops_the_steps_until_it_is_noticed_then_restarts_in_place() -> None:
    """Hung at 100, noticed at 160: no work meanwhile, and those 60 s count as lost; the save
    from memory keeps the 100 s, the restart ends at 185, the other 900 s at 1085."""
    sim, job = run(1, gang(8), Incident(100.0, 1, 0, "hang"))
    assert job.history == ["running", "recovering (in place)", "running", "succeeded"]
    assert job.finished_at == 1085.0 and job.ettr(sim.end) == pytest.approx(1000 / 1085)
    assert not sim.allocations.closed  # a hang is the job's, not the node's


@pytest.mark.parametrize(("replaced", "finished"), [(True, 1045.0), (False, 1900.0)])
def test_a_straggler_is_replaced_or_only_reported_as_its_queue_says(replaced, finished) -> None:
    """Half speed from 100, noticed at 130 (115 s of work): replaced, it saves the 110 s of
    its last whole step and restarts on the spare (135 to 155), then runs 890 s at full speed;
    only reported, it runs the other 900 s at half speed."""
    config = replace(CONFIG, detection=replace(CONFIG.detection, replace_stragglers=replaced))
    sim, job = run(3, gang(), Incident(100.0, 1, 1, "straggler"), spares=1, config=config)
    assert job.finished_at == finished and sim.recorder.faults["straggler"] == 1
    assert ("recovering (spare)" in job.history) is replaced


def test_a_silent_agent_is_noticed_after_its_grace_and_its_node_replaced() -> None:
    """Silent from 100, lost at 115: the healthy rank saves 110 s, the restart ends at 140."""
    sim, job = run(3, gang(), Incident(100.0, 1, 1, "disconnect"), spares=1)
    assert job.history == ["running", "recovering (spare)", "running", "succeeded"]
    assert job.finished_at == 140.0 + 890.0 and sim.recorder.faults["heartbeat-loss"] == 1


@pytest.mark.parametrize(
    ("policy", "finished"),
    [(PolicyKind.ASYNC, 1025.0), (PolicyKind.NONE, 120.0 + 1000.0)],  # no save: all lost
)
def test_a_drain_saves_first_whenever_the_policy_saves(policy, finished) -> None:
    sim, job = run(3, gang(checkpoint=Policy(policy)), Incident(100.0, 1, 1, "drain"), spares=1)
    assert job.history == ["running", "recovering (spare)", "running", "succeeded"]
    assert job.finished_at == finished


def test_an_incident_on_a_job_not_in_the_trace_is_refused() -> None:
    with pytest.raises(SimulationError, match="job 9"):
        run(1, gang(8), Incident(100.0, 9, 0, "hang"))
