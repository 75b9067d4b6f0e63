"""Trace and cluster loaders: good files load as documented, bad ones say where they are bad."""

from __future__ import annotations

import copy
import re

import pytest

from scheduler.checkpointing import Policy, PolicyKind
from scheduler.engine import Strategy
from scheduler.sim import philly
from scheduler.sim.spec import SpecError, parse_spec
from scheduler.sim.trace import TraceError, TraceJob, read_csv, write_csv

HEADER = "submit_s,gpus,gpu_model,duration_s,queue,priority,status,min_gpus,checkpoint"


def load(*rows: str, header: str = HEADER) -> list[TraceJob]:
    return read_csv([header, *rows])


def test_a_generic_trace_loads_in_submit_order_with_its_optional_columns() -> None:
    jobs = load("60,64,H800,7200,nlp,2,passed,32,async:1800", "0,8,H800,600,cv,,,,")
    assert jobs == [
        TraceJob(2, 0.0, 8, "H800", 600.0, "cv"),
        TraceJob(
            1,
            60.0,
            64,
            "H800",
            7200.0,
            "nlp",
            priority=2,
            status="passed",
            min_gpus=32,
            checkpoint=Policy(PolicyKind.ASYNC, 1800.0),
        ),
    ]


def test_a_tenant_column_stands_for_the_queue_and_ids_may_be_given() -> None:
    jobs = load("7,0,2,H800,10,acme", header="id,submit_s,gpus,gpu_model,duration_s,tenant")
    assert (jobs[0].id, jobs[0].queue) == (7, "acme")


def test_written_traces_read_back_the_same() -> None:
    jobs = load("0,16,H800,100,a,1,failed,8,periodic:600", "5,1,H20,30,b,,,,none")
    assert read_csv(write_csv(jobs).splitlines()) == jobs


def test_a_month_of_seconds_reads_back_to_the_second() -> None:
    """Times past a million seconds kept their figures (`:g` wrote 2591999.5 as 2.592e+06)."""
    jobs = [TraceJob(1, 2_591_999.5, 8, "H800", 1_234_567.25, "a")]
    assert read_csv(write_csv(jobs).splitlines()) == jobs


MODEL_HEADER = HEADER + ",model,global_batch"


def test_a_job_may_name_its_model_and_batch() -> None:
    (job,) = load("0,16,H800,100,a,,,8,,gpt3-13b,512", header=MODEL_HEADER)
    assert (job.model, job.global_batch) == ("gpt3-13b", 512)
    assert read_csv(write_csv([job]).splitlines()) == [job]


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ("0,8,H800,10,a,,,,,gpt-9,64", "line 2, column model: 'gpt-9' is not a model of the"),
        ("0,8,H800,10,a,,,,,gpt3-13b,", "line 2, column global_batch: give both model and"),
        ("0,8,H800,10,a,,,,,,64", "line 2, column model: give both model and global_batch"),
    ],
    ids=["a model not in the catalogue", "a model without a batch", "a batch without a model"],
)
def test_a_bad_model_names_its_column(row: str, error: str) -> None:
    with pytest.raises(TraceError, match="^" + re.escape(error)):
        load(row, header=MODEL_HEADER)


@pytest.mark.parametrize(
    ("row", "error"),
    [
        pytest.param(
            "0,eight,H800,10,a,,,,",
            "line 2, column gpus: 'eight' is not a whole number",
            id="GPUs that are not a number",
        ),
        pytest.param("0,0,H800,10,a,,,,", "line 2, column gpus: 0 is less than 1", id="no GPUs"),
        pytest.param(
            "-5,1,H800,10,a,,,,",
            "line 2, column submit_s: '-5' must be a finite",
            id="a negative submit time",
        ),
        pytest.param(
            "0,1,H800,0,a,,,,",
            "line 2, column duration_s: '0' must be a finite number more than 0",
            id="a zero duration",
        ),
        pytest.param("0,1,,10,a,,,,", "line 2, column gpu_model: empty", id="no GPU model"),
        pytest.param("0,1,H800,10,,,,,", "line 2, column queue: empty", id="no queue"),
        pytest.param(
            "0,8,H800,10,a,,,16,",
            "line 2, column min_gpus: 16 is more than gpus (8)",
            id="a minimum above the maximum",
        ),
        pytest.param(
            "0,8,H800,10,a,,,,hourly",
            "line 2, column checkpoint: 'hourly' is not a checkpoint policy",
            id="an unknown checkpoint policy",
        ),
        pytest.param(
            "0,8,H800,10,a,,,,periodic:soon",
            "line 2, column checkpoint: 'soon' is not an interval",
            id="a checkpoint interval that is not a number",
        ),
        pytest.param(
            "0,8,H800,10,a,high,,,",
            "line 2, column priority: 'high' is not a whole",
            id="a priority that is not a number",
        ),
    ],
)
def test_a_bad_row_names_its_line_and_column(row: str, error: str) -> None:
    with pytest.raises(TraceError, match="^" + re.escape(error)):
        load(row)


def test_the_line_counts_rows_before_it() -> None:
    with pytest.raises(TraceError, match="^line 4, column gpus"):
        load("0,1,H800,10,a,,,,", "1,1,H800,10,a,,,,", "2,x,H800,10,a,,,,")


def test_missing_columns_are_named() -> None:
    with pytest.raises(TraceError, match=r"line 1: missing column\(s\) duration_s, queue"):
        load("0,1,H800", header="submit_s,gpus,gpu_model")


def test_a_job_id_used_twice_is_refused() -> None:
    with pytest.raises(TraceError, match="job id 3 appears twice"):
        load(
            "3,0,1,H800,10,a",
            "3,1,1,H800,10,a",
            header="id,submit_s,gpus,gpu_model,duration_s,queue",
        )


def test_philly_jobs_become_trace_jobs_of_whole_nodes(tmp_path) -> None:
    (tmp_path / "philly_pollux.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:01:00,100.0,12,1200.0,vc1\n"
        "2017-10-01 00:00:00,50.0,1,50.0,vc2\n"
        "2017-10-01 00:01:00,10.0,2,20.0,vc9\n\n"
    )
    (tmp_path / "philly_vc_nodes.csv").write_text("vc,node num\nvc1,3\nvc2,2\n")
    trace, cluster = philly.load_philly(tmp_path, nodes_per_leaf=2, leaves_per_pod=2)
    assert [(j.id, j.submit_s, j.gpus, j.queue) for j in trace] == [
        (1, 0.0, 1, "vc2"),
        (2, 60.0, 16, "vc1"),
        (3, 60.0, 2, "vc9"),
    ]
    assert [(q.name, q.cohort, q.quotas[0].nominal) for q in cluster.queues] == [
        ("vc1", "philly", 24),
        ("vc2", "philly", 16),
        ("vc9", "philly", 0),
    ]
    assert [n.name for n in cluster.nodes] == [
        "dc1-p1-l1-n1",
        "dc1-p1-l1-n2",
        "dc1-p1-l2-n1",
        "dc1-p1-l2-n2",
        "dc1-p2-l1-n1",
    ]


def test_a_bad_philly_timestamp_names_its_line(tmp_path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,5,1,5,a\nyesterday,5,1,5,a\n"
    )
    with pytest.raises(TraceError, match="^line 3, column timestamp: 'yesterday'"):
        philly.read_jobs(path)


def test_the_philly_trace_of_the_project_loads_whole() -> None:
    trace, cluster = philly.load_philly()
    assert len(trace) == 82_247
    assert cluster.capacity == {"PHILLY": 352 * 8}
    assert len(cluster.queues) == 15
    assert max(job.submit_s for job in trace) / 86400 == pytest.approx(108.9, abs=0.05)


SPEC = {
    "name": "two",
    "datacenters": [
        {
            "name": "dc1",
            "pods": [
                {"name": "p", "count": 2, "leaves": 2, "nodes_per_leaf": 3, "gpu_model": "H800"},
                {
                    "name": "x",
                    "leaves": [
                        {"name": "small", "nodes": 1, "gpu_model": "H20", "gpus_per_node": 4}
                    ],
                },
            ],
        }
    ],
    "cohorts": [{"name": "all"}, {"name": "team", "parent": "all", "quotas": {"H800": 8}}],
    "queues": [
        {
            "name": "nlp",
            "cohort": "team",
            "priority": 3,
            "weight": 2,
            "strategy": "strict_fifo",
            "quotas": {"H800": {"nominal": 32, "guarantee": 8, "borrowing_limit": 16}},
            "preemption": {
                "reclaim_within_cohort": "Never",
                "borrow_within_cohort": True,
                "max_priority_threshold": 1,
            },
        },
        {"name": "cv", "cohort": "all", "quotas": {"H800": 16, "H20": 4}},
    ],
}


def test_a_cluster_spec_builds_nodes_queues_and_cohorts() -> None:
    spec = parse_spec(SPEC)
    assert spec.capacity == {"H20": 4, "H800": 96}
    assert [n.name for n in spec.nodes][:4] == [
        "dc1-p1-l1-n1",
        "dc1-p1-l1-n2",
        "dc1-p1-l1-n3",
        "dc1-p1-l2-n1",
    ]
    assert spec.nodes[-1].name == "dc1-x-small-n1" and spec.nodes[-1].gpus == 4
    nlp = spec.queues[0]
    assert (nlp.id, nlp.priority, nlp.weight, nlp.strategy) == (1, 3, 2.0, Strategy.STRICT_FIFO)
    assert (nlp.quota("H800").guarantee, nlp.quota("H800").borrowing_limit) == (8, 16)
    assert (nlp.preemption.reclaim, nlp.preemption.borrow_ceiling(5)) == (False, 2)
    assert [(c.name, c.parent) for c in spec.cohorts] == [("all", None), ("team", "all")]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param(
            lambda s: s["queues"][0]["quotas"]["H800"].update(nominal=-1),
            "queues[0].quotas.H800.nominal: must be a whole number",
            id="a negative quota",
        ),
        pytest.param(
            lambda s: s["queues"][0]["quotas"]["H800"].update(guarantee=64),
            "queues[0].quotas.H800.guarantee: 64 is more than the nominal 32",
            id="a guarantee above the quota",
        ),
        pytest.param(
            lambda s: s["queues"][1].update(name="nlp"),
            "queues: names used twice: nlp",
            id="two queues of one name",
        ),
        pytest.param(
            lambda s: s["queues"][1].update(strategy="lifo"),
            "queues[1].strategy: 'lifo' is not a strategy",
            id="an unknown strategy",
        ),
        pytest.param(
            lambda s: s["datacenters"][0]["pods"][0].pop("gpu_model"),
            "datacenters[0].pods[0].gpu_model: must name a GPU model",
            id="a pod without a GPU model",
        ),
        pytest.param(
            lambda s: s["datacenters"][0]["pods"][1]["leaves"][0].update(nodes=0),
            "datacenters[0].pods[1].leaves[0].nodes: must be a whole number of at least 1",
            id="an empty leaf",
        ),
    ],
)
def test_a_bad_cluster_spec_names_the_place(change, error: str) -> None:
    spec = copy.deepcopy(SPEC)
    change(spec)
    with pytest.raises(SpecError, match=re.escape(error)):
        parse_spec(spec)
