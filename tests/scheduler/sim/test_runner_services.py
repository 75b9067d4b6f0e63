"""A what-if with an inference service beside the trace: the cluster made room for it, the tide
in the results, and the report's tide figure (none without a service)."""

from __future__ import annotations

import json
import re

import pytest

from scheduler.engine import Quota
from scheduler.sim.__main__ import main
from scheduler.sim.report import render
from scheduler.sim.runner import SERVICE_QUEUE, run, with_service
from scheduler.sim.simulator import SimConfig
from scheduler.sim.spec import SpecError
from scheduler.sim.trace import TraceJob, write_csv
from tests.scheduler.sim.scenarios import busy_trace, cluster

HOUR = 3600.0
SHARE = 0.5  # of the 64 GPUs: a peak of 4 replicas of one node


@pytest.fixture(scope="module")
def results() -> dict:
    """Nine hours from midnight: the night's two replicas, then the morning's rise."""
    config = SimConfig(failures_per_gpu_hour=0.0, horizon_s=9 * HOUR)
    return run(
        busy_trace(seed=2, jobs=80),
        cluster(),
        ["wanka", "static"],
        config=config,
        service_share=SHARE,
    )


def drawn(page: str) -> dict:
    return json.loads(re.search(r"const FIGURES = (.*);\nfunction drawFigures", page).group(1))


def test_the_service_gets_its_peak_as_quota_carved_from_the_others() -> None:
    spec, service = with_service(cluster(), SHARE, 0.0)
    queue = spec.queues[-1]
    assert (queue.name, queue.cohort, queue.priority) == (SERVICE_QUEUE, "all", 10)
    assert queue.quotas == (Quota("H800", 32),)
    assert sum(q.quota("H800").nominal for q in spec.queues) <= 64
    assert [q.quota("H800").nominal for q in spec.queues[:-1]] == [12, 8, 4, 8]  # each halved
    assert (service.queue, service.replica_gpus, service.autoscale.max_replicas) == (
        SERVICE_QUEUE,
        8,
        4,
    )
    assert service.replicas == 2  # at midnight the load is 30 % of the peak: 1.2 replicas


@pytest.mark.parametrize(
    ("share", "message"),
    [(0.0, "above 0 and below 1"), (1.0, "above 0 and below 1")],
    ids=["no share is no service", "the whole cluster leaves nothing for training"],
)
def test_a_share_out_of_range_is_refused(share, message) -> None:
    with pytest.raises(SpecError, match=message):
        with_service(cluster(), share, 0.0)


def test_a_queue_of_the_services_name_is_not_taken_over() -> None:
    with pytest.raises(SpecError, match="already has a queue 'conversation'"):
        with_service(cluster(queues={SERVICE_QUEUE: (16, 0)}), SHARE, 0.0)


def test_the_tide_rises_with_the_load_and_training_fills_the_rest(results) -> None:
    assert results["service"]["peak_gpus"] == 32
    wanka, static = (results["policies"][name]["tide"] for name in ("wanka", "static"))
    assert wanka["step_s"] == HOUR and len(wanka["t_s"]) == len(wanka["inference"]) == 9
    assert min(wanka["inference"]) <= 16 and max(wanka["inference"]) >= 24  # 2, then 3 and more
    for tide in (wanka, static):
        assert all(
            i + o <= 64 + 1e-6 for i, o in zip(tide["inference"], tide["other"], strict=True)
        )
    # Off-peak, training borrows the service's idle quota under Wanka's policy; held to its
    # own 32 GPUs under static partitions.
    assert max(wanka["other"]) > 32 >= max(static["other"])
    assert results["policies"]["wanka"]["service"]["requests"] > 0


def test_the_report_draws_the_tide_per_policy(results) -> None:
    page = render(results, "test")
    figures = drawn(page)
    divs = re.findall(r'<div id="(\w+)" class="figure"', page)
    assert divs == ["utilization", "tide", "waits", "shares", "ettr"] and set(figures) == set(divs)
    tide = figures["tide"]
    names = [(t["name"], t.get("stackgroup")) for t in tide["data"]]
    assert names[:3] == [
        ("inference (the service's replicas)", "wanka"),
        ("training (all other work)", "wanka"),
        ("the cluster's GPUs", None),
    ]
    assert len(names) == 6  # the same three for static
    assert "tide" in tide["layout"]["title"]["text"]
    assert tide["layout"]["yaxis"]["title"]["text"] == "GPUs"
    assert tide["layout"]["xaxis2"]["title"]["text"] == "hour"
    assert f'<div id="tide" class="figure" style="height: {200 + 2 * 220}px"></div>' in page
    assert "the inference service <b>conversation</b>" in page


def test_no_service_no_tide() -> None:
    results = run(busy_trace(seed=3, jobs=20), cluster(), ["wanka"])
    assert "service" not in results and "tide" not in results["policies"]["wanka"]
    page = render(results, "test")
    assert "tide" not in drawn(page) and 'id="tide"' not in page


def test_the_command_line_adds_the_service_for_a_day(tmp_path, capsys) -> None:
    """Without --horizon-days the run stops a day after the trace's first submission."""
    trace = [TraceJob(1, 600.0, 8, "H800", 3 * HOUR, "prod")]
    (tmp_path / "jobs.csv").write_text(write_csv(trace))
    (tmp_path / "cluster.json").write_text(json.dumps(spec_json()))
    out = tmp_path / "out.json"
    args = ["--trace", str(tmp_path / "jobs.csv"), "--cluster", str(tmp_path / "cluster.json")]
    assert (
        main([*args, "--policy", "wanka", "--service-share", "0.5", "--json", str(out), "--quiet"])
        == 0
    )
    written = json.loads(out.read_text())
    assert written["config"]["horizon_s"] == 600.0 + 24 * HOUR
    inference = written["policies"]["wanka"]["tide"]["inference"]
    assert len(inference) == 24 and min(inference) < max(inference) == 16  # night, afternoon
    assert "service requests finding room" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--service-share", "30"])  # a share, not a percentage


def spec_json() -> dict:
    return {
        "name": "c",
        "datacenters": [
            {
                "name": "dc1",
                "pods": [{"name": "p1", "leaves": 1, "nodes_per_leaf": 4, "gpu_model": "H800"}],
            }
        ],
        "cohorts": [{"name": "all"}],
        "queues": [{"name": "prod", "cohort": "all", "quotas": {"H800": 32}}],
    }
