"""Mixed fleets in the simulator: jobs that accept several GPU models, run at each model's
speed, and Sia's workloads and cluster loaded as the paper describes them."""

from __future__ import annotations

import re

import pytest

from scheduler.checkpointing import Costs, Policy, PolicyKind
from scheduler.engine import Placement
from scheduler.sim.jobs import Checkpointing, Job
from scheduler.sim.policies import blind, wanka
from scheduler.sim.sia import (
    CLUSTER,
    DEFAULT_DIR,
    EFFICIENCY,
    MOST_GPUS,
    SLOWDOWNS,
    Profiles,
    load_sia,
    most_gpus,
    placeable,
)
from scheduler.sim.simulator import SimConfig, Simulator
from scheduler.sim.spec import ClusterSpec, SpecError, parse_spec
from scheduler.sim.trace import TraceError, TraceJob, read_csv, write_csv

HEADER = "submit_s,gpus,gpu_model,duration_s,queue,accepts,speeds"
FAST = TraceJob(
    1,
    0.0,
    8,
    "T4",
    3600.0,
    "q",
    accepts=("T4", "A100"),
    speeds=(("T4", 1.0), ("A100", 4.0)),
)


def test_a_job_may_accept_several_models_with_their_speeds() -> None:
    (job,) = read_csv([HEADER, "0,8,T4,3600,q,T4|A100,T4:1|A100:4"])
    assert job == FAST
    assert read_csv(write_csv([job]).splitlines()) == [job]


@pytest.mark.parametrize(
    ("cells", "error"),
    [
        ("A100|T4,", "line 2, column accepts: 'A100|T4' must list distinct GPU models, 'T4'"),
        ("T4|T4,", "line 2, column accepts: 'T4|T4' must list distinct GPU models"),
        ("T4|A100,T4:1", "line 2, column speeds: 'T4:1' must give a speed for each of T4, A100"),
        ("T4|A100,T4:2|A100:4", "line 2, column speeds: 'T4:2|A100:4' must give a speed"),
        ("T4|A100,T4:1|A100:0", "line 2, column speeds: 'A100:0': a speed must be a finite"),
        ("T4|A100,T4:1|A100", "line 2, column speeds: 'A100' is not model:speed"),
    ],
    ids=[
        "the trace's model not first",
        "a model twice",
        "a model without a speed",
        "the first model's speed not 1",
        "a speed of 0",
        "a model without its speed",
    ],
)
def test_bad_accepts_or_speeds_name_their_column(cells: str, error: str) -> None:
    with pytest.raises(TraceError, match="^" + re.escape(error)):
        read_csv([HEADER, f"0,8,T4,3600,q,{cells}"])


def started(spec: TraceJob, gpu_model: str | None) -> Job:
    job = Job(spec, Checkpointing(PolicyKind.NONE, None, 0.0, 0.0), Costs())
    job.start(0.0, (Placement(1, tuple(range(8))),), gpu_model)
    return job


@pytest.mark.parametrize(
    ("gpu_model", "finishes_at"),
    [("T4", 3600.0), ("A100", 900.0), (None, 3600.0)],
    ids=["on its trace's model, its duration", "on a model 4x as fast, a quarter", "by default"],
)
def test_a_jobs_run_time_follows_the_model_it_landed_on(
    gpu_model: str | None, finishes_at: float
) -> None:
    assert started(FAST, gpu_model).next_phase_at() == finishes_at


def test_a_job_without_speeds_runs_as_long_on_any_model() -> None:
    blind = TraceJob(1, 0.0, 8, "T4", 3600.0, "q", accepts=("T4", "A100"))
    assert started(blind, "A100").next_phase_at() == 3600.0


@pytest.mark.parametrize(
    ("asked", "placed"),
    [(1, 1), (4, 4), (6, 8), (8, 8), (10, 16), (12, 16), (16, 16)],
)
def test_gpu_counts_are_rounded_to_whole_nodes_of_4_and_of_8(asked: int, placed: int) -> None:
    assert placeable(asked) == placed


@pytest.fixture(scope="module")
def philly() -> tuple:
    return load_sia("philly")


def test_sias_cluster_is_64_gpus_of_three_types_in_the_papers_nodes(philly: tuple) -> None:
    _, spec = philly
    assert spec.capacity == {"A100": 16, "RTX2080Ti": 24, "T4": 24}
    assert {(n.gpu_model, n.gpus) for n in spec.nodes} == {
        ("T4", 4),
        ("RTX2080Ti", 8),
        ("A100", 8),
    }
    assert len(spec.nodes) == 11


def test_a_sia_set_loads_each_file_as_a_trace_of_jobs_accepting_every_type(philly: tuple) -> None:
    traces, _ = philly
    assert [len(trace) for trace in traces] == [160] * 8
    first = traces[0][0]  # cifar10-0,107,cifar10,6,2048
    assert (first.id, first.submit_s, first.gpus, first.queue) == (1, 107.0, 8, "sia")
    assert first.accepts == ("T4", "RTX2080Ti", "A100")
    speeds = dict(first.speeds)
    assert speeds["T4"] == 1.0 and speeds["A100"] > speeds["RTX2080Ti"] > 1.0
    for job in (job for trace in traces for job in trace):
        assert job.gpus in (4, 8, 16) and job.duration_s > 0


def test_a_sia_jobs_time_is_its_iterations_times_its_profiled_step() -> None:
    """cifar10 at batch 2048 on one A100 node of 8: 256 per GPU, between the profiled local
    batches 182 and 257 (step times 0.040204 s and 0.049112 s)."""
    profiles = Profiles(DEFAULT_DIR / "profiles")
    step = 0.040203869342803955 + (256 - 182) / (257 - 182) * (
        0.04911188781261444 - 0.040203869342803955
    )
    expected = profiles.measured["cifar10"][2048] * step * SLOWDOWNS["cifar10"]
    assert profiles.run_s("cifar10", CLUSTER[2], 8, 2048) == pytest.approx(expected)


def test_an_unknown_set_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown Sia workload set 'alibaba'"):
        load_sia("alibaba")


def test_a_job_without_accepts_or_speeds_writes_their_cells_empty() -> None:
    job = TraceJob(1, 0.0, 8, "T4", 60.0, "q", checkpoint=Policy(PolicyKind.NONE))
    assert write_csv([job]).splitlines()[1].endswith(",none,,,,,,")  # mig, movable empty


def two_model_cluster() -> ClusterSpec:
    """One node of 8 T4 and one of 8 A100, one queue over both."""
    leaves = [{"name": m, "nodes": 1, "gpu_model": m} for m in ("T4", "A100")]
    return parse_spec(
        {
            "datacenters": [{"name": "dc1", "pods": [{"name": "p1", "leaves": leaves}]}],
            "queues": [{"name": "q", "quotas": {"T4": 8, "A100": 8}}],
        }
    )


@pytest.mark.parametrize(
    ("policy", "landed", "jct"),
    [(wanka, "A100", 900.0), (blind, "T4", 3600.0)],
    ids=[
        "told its speeds, the engine starts it on the A100 and it runs a quarter as long",
        "blind to them, the engine starts it on the T4, first listed, and it runs as long",
    ],
)
def test_a_jobs_run_time_follows_the_model_the_engine_started_it_on(
    policy, landed: str, jct: float
) -> None:
    spec = two_model_cluster()
    config = SimConfig(failures_per_gpu_hour=0.0, checkpoint=Policy(PolicyKind.NONE))
    simulator = Simulator([FAST], spec, policy(spec), config)
    simulator.run()
    job = simulator.jobs[1]
    assert job.gpu_model == landed
    assert job.finished_at - job.first_start == pytest.approx(jct)


def test_a_job_moves_to_the_faster_model_once_it_frees() -> None:
    """Job 2 starts on the T4s, the A100s being busy for an hour; when they free it moves
    there (it started an hour before: the engine's `Snapshot.move_every_s`) and does the rest
    of its work four times as fast, after one restart."""
    busy = TraceJob(1, 0.0, 8, "A100", 3600.0, "q")
    mover = TraceJob(2, 1.0, 8, "T4", 4 * 3600.0, "q", accepts=("T4", "A100"), speeds=FAST.speeds)
    spec = two_model_cluster()
    config = SimConfig(failures_per_gpu_hour=0.0)
    simulator = Simulator([busy, mover], spec, wanka(spec), config)
    simulator.run()
    job = simulator.jobs[2]
    assert job.gpu_model == "A100"
    assert "recovering (moved to A100)" in job.history
    assert simulator.recorder.moves == 1
    left_on_a100 = (4 * 3600.0 - 3600.0) / 4
    assert 3600 + left_on_a100 < job.finished_at < 3600 + left_on_a100 + 600  # and a restart


def test_a_family_quota_caps_a_queue_across_its_models_in_the_simulator() -> None:
    """A family quota of 8 over T4 and A100: two 8-GPU jobs, one per model, run one after the
    other although each model has room, and a spec without the family runs them together."""
    leaves = [{"name": m, "nodes": 1, "gpu_model": m} for m in ("T4", "A100")]
    family = {"gpus": {"models": ["T4", "A100"], "nominal": 8, "borrowing_limit": 0}}
    jobs = [TraceJob(1, 0.0, 8, "T4", 3600.0, "q"), TraceJob(2, 0.0, 8, "A100", 3600.0, "q")]
    ends = {}
    for name, queue in [
        ("family", {"families": family}),
        ("none", {"quotas": {"T4": 8, "A100": 8}}),
    ]:
        spec = parse_spec(
            {
                "datacenters": [{"name": "dc1", "pods": [{"name": "p1", "leaves": leaves}]}],
                "queues": [{"name": "q", **queue}],
            }
        )
        config = SimConfig(failures_per_gpu_hour=0.0, checkpoint=Policy(PolicyKind.NONE))
        simulator = Simulator(jobs, spec, wanka(spec), config)
        simulator.run()
        ends[name] = max(job.finished_at for job in simulator.jobs.values())
    assert ends["family"] >= 2 * 3600.0 > ends["none"]


def test_a_bad_family_quota_names_its_place() -> None:
    leaves = [{"name": "l1", "nodes": 1, "gpu_model": "T4"}]
    spec = {
        "datacenters": [{"name": "dc1", "pods": [{"name": "p1", "leaves": leaves}]}],
        "queues": [{"name": "q", "families": {"hopper": {"nominal": 8}}}],
    }
    with pytest.raises(SpecError, match=r"queues\[0\].families.hopper.models: must list"):
        parse_spec(spec)


# Measured per GPU count: 1, 1.5 and 2 on 1, 2 and 4 T4; 3, 6 and 9 on as many A100.
CURVES = (("T4", ((1, 1.0), (2, 1.5), (4, 2.0))), ("A100", ((1, 3.0), (2, 6.0), (4, 9.0))))
MEASURED = TraceJob(
    1,
    0.0,
    4,
    "T4",
    3600.0,
    "q",
    min_gpus=1,
    accepts=("T4", "A100"),
    speeds=(("T4", 1.0), ("A100", 4.5)),
    curves=CURVES,
)


@pytest.mark.parametrize(
    ("gpu_model", "gpus", "finishes_at"),
    [("T4", 4, 3600.0), ("T4", 1, 7200.0), ("A100", 2, 1200.0), ("A100", 3, 960.0)],
    ids=[
        "at its size on its trace's model, its duration",
        "on 1 T4, at half the throughput of 4",
        "on 2 A100, at 3 times that of 4 T4",
        "on 3 A100, between the measured 2 and 4",
    ],
)
def test_a_job_with_measured_curves_runs_at_its_throughput_on_the_model_and_count(
    gpu_model: str, gpus: int, finishes_at: float
) -> None:
    job = Job(MEASURED, Checkpointing(PolicyKind.NONE, None, 0.0, 0.0), Costs())
    job.start(0.0, (Placement(1, tuple(range(gpus))),), gpu_model)
    assert job.next_phase_at() == pytest.approx(finishes_at)
    assert job.throughput == dict(CURVES)[gpu_model]  # what the engine weighs resizes by


def test_an_elastic_job_starts_on_the_free_gpus_and_grows_when_more_free() -> None:
    """One node of 8 A100, 4 of them busy for an hour: the elastic job starts on the other 4,
    grows to 8 once they free and finishes at its measured throughput on each count."""
    leaves = [{"name": "l1", "nodes": 1, "gpu_model": "A100"}]
    spec = parse_spec(
        {
            "datacenters": [{"name": "dc1", "pods": [{"name": "p1", "leaves": leaves}]}],
            "queues": [{"name": "q", "quotas": {"A100": 8}}],
        }
    )
    busy = TraceJob(1, 0.0, 4, "A100", 3600.0, "q")
    curve = ((1, 1.0), (4, 3.0), (8, 4.0))
    grower = TraceJob(2, 1.0, 8, "A100", 4 * 3600.0, "q", min_gpus=1, curves=(("A100", curve),))
    config = SimConfig(failures_per_gpu_hour=0.0, checkpoint=Policy(PolicyKind.TRIGGERED))
    simulator = Simulator([busy, grower], spec, wanka(spec), config)
    simulator.run()
    job = simulator.jobs[2]
    assert "recovering (grown)" in job.history and job.held == 0
    # 3/4 of its pace for an hour (less a second), then a restart and the rest at full pace.
    left = 4 * 3600.0 - 0.75 * (3600.0 - 1.0)
    restart = Costs().restart_s
    assert 3600.0 + restart + left <= job.finished_at < 3600.0 + restart + left + 60.0


def test_elastic_sia_jobs_run_from_one_gpu_to_the_most_their_profile_makes_worthwhile() -> None:
    traces, _ = load_sia("philly", elastic=True)
    rigid, _ = load_sia("philly")
    profiles = Profiles(DEFAULT_DIR / "profiles")
    first = traces[0][0]  # cifar10-0,107,cifar10,6,2048
    curves = profiles.curves("cifar10", 2048)
    assert first.curves == tuple(curves.items())
    assert first.min_gpus == 1 and first.gpus == most_gpus(curves)
    assert first.duration_s == pytest.approx(
        profiles.run_s("cifar10", CLUSTER[0], first.gpus, 2048)
    )
    assert [job.submit_s for job in traces[0]] == [job.submit_s for job in rigid[0]]
    for job in (job for trace in traces for job in trace):
        assert {model for model, _ in job.curves} == set(job.accepts)
        assert 1 <= job.gpus <= MOST_GPUS


def test_an_elastic_jobs_most_is_the_largest_count_each_gpu_still_pays_for() -> None:
    """Per GPU, 1, 0.9, 0.8, 0.6 and 0.4 of one GPU's throughput on 1, 2, 4, 8 and 16 on one
    type, and 1, 0.9, 0.6 ... on another: the most is the largest count at EFFICIENCY or more on
    both."""
    one = tuple(
        (gpus, gpus * share) for gpus, share in [(1, 1), (2, 0.9), (4, 0.8), (8, 0.6), (16, 0.4)]
    )
    other = tuple(
        (gpus, gpus * share) for gpus, share in [(1, 1), (2, 0.9), (4, 0.6), (8, 0.5), (16, 0.4)]
    )
    assert EFFICIENCY == 0.7
    assert most_gpus({"T4": one}) == 4
    assert most_gpus({"T4": one, "A100": other}) == 2


def test_a_job_grown_past_where_its_gpus_pay_shrinks_for_a_newcomer_of_its_queue() -> None:
    """One node of 8 A100 held by a 10-hour elastic job whose GPUs past the first add little:
    a newcomer of its queue and priority, whose 4 GPUs do more for it than for the old job,
    starts one cycle after it came, on the 4 GPUs the old job gave back, not 10 hours later."""
    leaves = [{"name": "l1", "nodes": 1, "gpu_model": "A100"}]
    spec = parse_spec(
        {
            "datacenters": [{"name": "dc1", "pods": [{"name": "p1", "leaves": leaves}]}],
            "queues": [{"name": "q", "quotas": {"A100": 8}}],
        }
    )
    flat = (("A100", ((1, 1.0), (8, 4.0))),)
    hog = TraceJob(1, 0.0, 8, "A100", 10 * 3600.0, "q", min_gpus=1, curves=flat)
    newcomer = TraceJob(
        2, 600.0, 4, "A100", 3600.0, "q", min_gpus=1, curves=(("A100", ((1, 1.0), (4, 3.5))),)
    )
    config = SimConfig(failures_per_gpu_hour=0.0, checkpoint=Policy(PolicyKind.TRIGGERED))
    simulator = Simulator([hog, newcomer], spec, wanka(spec), config)
    simulator.run()
    assert "recovering (shrunk)" in simulator.jobs[1].history
    assert simulator.jobs[2].first_start <= 600.0 + 60.0
