"""MIG instances in the simulator: a `mig` column in a trace, MIG jobs on the instances of one
GPU as the engine places them, and GPUs re-sliced only when none of their instances is in use,
as the agent re-slices them."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from scheduler.engine import Placement
from scheduler.mig import fits, profiles
from scheduler.sim.runner import simulate
from scheduler.sim.simulator import SimConfig, Simulator
from scheduler.sim.spec import SpecError, parse_spec
from scheduler.sim.state import Allocations, SimulationError
from scheduler.sim.trace import TraceError, TraceJob, read_csv, write_csv
from tests.scheduler.sim.scenarios import cluster
from tests.scheduler.sim.test_scenarios import NO_FAULTS

H800 = profiles("H800", 80)
HEADER = "id,submit_s,gpus,gpu_model,duration_s,queue,min_gpus,accepts,mig"
EIGHTH = (1, 7)  # the one GPU of the one node that the seven-GPU job leaves free


def mig_job(job_id: int, submit_s: float, duration_s: float, profile: str) -> TraceJob:
    return TraceJob(job_id, submit_s, 1, "H800", duration_s, "a", mig=H800[profile])


def run(trace: list[TraceJob]) -> tuple[Simulator, dict[int, tuple], list]:
    """The run on one 8-GPU H800 node beside a 7-GPU job that holds it to the end, each MIG
    job's (start, GPU), and the eighth GPU's layout after every event."""
    trace = [TraceJob(1, 0.0, 7, "H800", 10_000.0, "a"), *trace]
    starts: dict[int, tuple] = {}
    layouts: list[tuple[float, tuple[str, ...]]] = []

    def hook(sim: Simulator) -> None:
        for job in sim.jobs.values():
            if job.spec.mig and job.running and job.id not in starts:
                [placement] = job.placements
                starts[job.id] = (sim.now, (placement.node_id, placement.gpu_indices[0]))
        layout = sim.allocations.layouts.get(EIGHTH, ())
        if not layouts or layouts[-1][1] != layout:
            layouts.append((sim.now, layout))

    # A quota above the node's GPUs: a 4g.40gb and a 3g.40gb instance fill one GPU between
    # them but are charged 4/7 and 1/2 of one.
    one_node = cluster(leaves=1, nodes=1, queues={"a": (9, 0)})
    sim = simulate(trace, one_node, "wanka", NO_FAULTS, hook=hook)
    return sim, starts, layouts


def test_a_mig_job_runs_on_an_idle_instance_of_its_profile() -> None:
    """Job 2's instance stays when it ends; job 3, of its profile, takes it: the GPU keeps one
    instance, not two."""
    sim, starts, layouts = run(
        [mig_job(2, 0.0, 100.0, "1g.10gb"), mig_job(3, 200.0, 100.0, "1g.10gb")]
    )
    assert starts == {2: (0.0, EIGHTH), 3: (200.0, EIGHTH)}
    assert layouts == [(0.0, ()), (0.0, ("1g.10gb",))]
    outcomes = {o.id: o for o in sim.recorder.outcomes}
    assert (outcomes[3].wait_s, outcomes[3].jct_s) == (0.0, 100.0)


def test_two_3g_jobs_share_one_gpu_charged_half_of_it_each() -> None:
    """Two 3g.40gb instances fit one H800 side by side; each is charged half a GPU (four of
    its eight memory slots): the allocated GPU-seconds are the seven-GPU job's and one GPU's
    for the 100 s the two run together."""
    sim, starts, layouts = run(
        [mig_job(2, 0.0, 100.0, "3g.40gb"), mig_job(3, 0.0, 100.0, "3g.40gb")]
    )
    assert starts == {2: (0.0, EIGHTH), 3: (0.0, EIGHTH)}
    assert layouts[-1] == (0.0, ("3g.40gb", "3g.40gb"))
    assert sim.recorder.allocated.integral_to(100.0) == pytest.approx(7 * 10_000 + 2 * 0.5 * 100)


def test_a_gpu_with_an_instance_in_use_is_never_re_sliced() -> None:
    """A 3g.40gb job fits beside a running 4g.40gb one: its instance is added, the busy one
    untouched. A 7g.80gb job needs the whole GPU: it waits until neither instance is in use,
    then the GPU is re-sliced to it."""
    trace = [
        mig_job(2, 0.0, 500.0, "4g.40gb"),
        mig_job(3, 10.0, 100.0, "3g.40gb"),
        mig_job(4, 20.0, 100.0, "7g.80gb"),
    ]
    sim, starts, layouts = run(trace)
    assert starts[3] == (10.0, EIGHTH)
    assert starts[4][0] >= 500.0
    assert [layout for _, layout in layouts] == [
        (),
        ("4g.40gb",),
        ("4g.40gb", "3g.40gb"),
        ("7g.80gb",),
    ]
    assert {o.id: o.status for o in sim.recorder.outcomes}[4] == "finished"


def test_allocations_refuse_to_re_slice_a_gpu_in_use() -> None:
    allocations = Allocations(cluster(leaves=1, nodes=1))
    allocations.take([Placement(1, (0,))], 2, mig="4g.40gb")
    with pytest.raises(SimulationError, match="would re-slice it while its instances"):
        allocations.take([Placement(1, (0,))], 3, mig="7g.80gb")
    allocations.give([Placement(1, (0,))], 2)
    assert allocations.free[1] == set(range(8)) and allocations.layouts[1, 0] == ("4g.40gb",)
    allocations.take([Placement(1, (0,))], 3, mig="7g.80gb")
    assert allocations.layouts[1, 0] == ("7g.80gb",)


def test_a_whole_gpu_job_turns_mig_off_on_the_gpu_it_takes() -> None:
    """The MIG job's instance stays when it ends; with no MIG job waiting, a one-GPU job may
    then take that GPU, and MIG is turned off on it (its layout gone); a MIG job after it
    slices it again."""
    trace = [
        mig_job(2, 0.0, 100.0, "1g.10gb"),
        TraceJob(3, 200.0, 1, "H800", 100.0, "a"),
        mig_job(4, 400.0, 100.0, "3g.40gb"),
    ]
    sim, starts, layouts = run(trace)
    assert [layout for _, layout in layouts] == [(), ("1g.10gb",), (), ("3g.40gb",)]
    assert [now for now, _ in layouts[2:]] == [200.0, 400.0]
    assert {o.id: o.status for o in sim.recorder.outcomes} == dict.fromkeys(range(1, 5), "finished")


def test_allocations_turn_mig_off_for_whole_gpus_and_shares() -> None:
    allocations = Allocations(cluster(leaves=1, nodes=1))
    allocations.take([Placement(1, (0,))], 2, mig="4g.40gb")
    allocations.take([Placement(1, (1,))], 3, mig="1g.10gb")
    allocations.give([Placement(1, (0,))], 2)
    allocations.give([Placement(1, (1,))], 3)
    allocations.take([Placement(1, (0, 2))], 4)
    allocations.take([Placement(1, (1,))], 5, slices=2)
    assert allocations.layouts == {}


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (
            "1,0,1,H800,10,a,,,2g.10gb",
            "line 2, column mig: '2g.10gb' is not a MIG profile of H800 \\(its profiles are "
            "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb\\)",
        ),
        (
            "1,0,1,H20,10,a,,,1g.12gb",
            "line 2, column mig: '1g.12gb' is not a MIG profile of H20 \\(it has no MIG\\)",
        ),
        (
            "1,0,2,H800,10,a,,,1g.10gb",
            "line 2, column mig: a MIG job takes an instance of one GPU: give gpus 1",
        ),
        (
            "1,0,0.5,H800,10,a,,,1g.10gb",
            "line 2, column mig: a MIG job takes an instance of one GPU",
        ),
        (
            "1,0,1,H800,10,a,1,,1g.10gb",
            "line 2, column mig: a MIG job runs on H800 alone: leave min_gpus empty",
        ),
        (
            "1,0,1,H800,10,a,,H800|H20,1g.10gb",
            "line 2, column mig: a MIG job runs on H800 alone: leave accepts empty",
        ),
    ],
    ids=[
        "not a profile",
        "a model without MIG",
        "two GPUs",
        "a share",
        "elastic",
        "several models",
    ],
)
def test_a_bad_mig_cell_names_its_line_and_column(row: str, error: str) -> None:
    with pytest.raises(TraceError, match=error):
        read_csv([HEADER, row])


def test_a_mig_trace_round_trips_through_csv_with_the_cluster_memory() -> None:
    """Profiles are named from the model's memory: the catalogue's, or the spec's."""
    rows = ["1,0,1,H800,10,a,,,3g.40gb", "2,5,1,A100,10,a,,,1g.5gb", "3,6,0.25,H800,10,a,,,"]
    jobs = read_csv([HEADER, *rows], {"A100": 40})
    assert [job.mig and job.mig.name for job in jobs] == ["3g.40gb", "1g.5gb", None]
    assert [job.share for job in jobs] == [0.5, 1 / 7, 0.25]
    assert read_csv(write_csv(jobs).splitlines(), {"A100": 40}) == jobs
    with pytest.raises(TraceError, match="line 3, column mig: '1g.5gb' is not a MIG profile"):
        read_csv([HEADER, *rows])


def test_the_spec_names_its_models_memory_and_a_trace_must_match_it() -> None:
    spec = cluster(leaves=1, nodes=1, queues={"a": (8, 0)})
    assert sorted(spec.mig_profiles["H800"]) == sorted(H800)
    data = {
        "datacenters": [{"pods": [{"leaves": 1, "nodes_per_leaf": 1, "gpu_model": "H800"}]}],
        "queues": [{"name": "a", "quotas": {"H800": 8}}],
        "memory_gb": {"H800": 96},
    }
    assert "1g.12gb" in parse_spec(data).mig_profiles["H800"]
    with pytest.raises(SpecError, match="memory_gb.H800: must be a whole number of at least 1"):
        parse_spec(data | {"memory_gb": {"H800": "96"}})
    with pytest.raises(SimulationError, match="job 2 asks for MIG profile 1g.10gb, which H800"):
        simulate([mig_job(2, 0.0, 10.0, "1g.10gb")], parse_spec(data), "wanka", NO_FAULTS)


@pytest.mark.parametrize("policy", ["wanka", "fifo"])
def test_in_a_mixed_run_every_instance_in_use_is_in_its_gpus_layout(policy: str) -> None:
    """MIG, share and whole-GPU jobs of random sizes on two nodes, with faults: after every
    event each GPU's layout fits it and holds the instances in use, no GPU holds MIG jobs
    beside other work, and every job finishes."""
    rng = random.Random(5)
    sizes = [*H800, "0.25", "1", "2"]
    trace = []
    for job_id in range(1, 121):
        size = rng.choice(sizes)
        submit, duration = float(rng.randrange(0, 5_000)), float(rng.randrange(300, 3600))
        if size in H800:
            trace.append(mig_job(job_id, submit, duration, size))
        else:
            gpus, slices = (1, 2) if size == "0.25" else (int(size), 0)
            trace.append(TraceJob(job_id, submit, gpus, "H800", duration, "a", slices=slices))

    def check(sim: Simulator) -> None:
        users: dict[tuple[int, int], list] = {}
        for job in sim.jobs.values():
            for placement in job.placements if job.running else ():
                for index in placement.gpu_indices:
                    users.setdefault((placement.node_id, index), []).append(job.spec)
        for gpu, specs in users.items():
            held = Counter(spec.mig.name for spec in specs if spec.mig)
            if held:
                assert all(spec.mig for spec in specs), gpu
                assert not held - Counter(sim.allocations.layouts[gpu])
        for layout in sim.allocations.layouts.values():
            assert fits(H800[name] for name in layout)

    spec = cluster(leaves=1, nodes=2, queues={"a": (32, 0)})
    config = SimConfig(seed=3, cycle_s=10.0, failures_per_gpu_hour=0.02)
    sim = simulate(trace, spec, policy, config, hook=check)
    assert {o.status for o in sim.recorder.outcomes} == {"finished"}
    assert sim.allocations.layouts  # some GPUs were sliced
