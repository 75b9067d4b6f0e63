"""The HTML report and the command line."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import plotly
import pytest

from scheduler.sim.__main__ import main
from scheduler.sim.report import render, utilization_figure
from scheduler.sim.runner import run
from scheduler.sim.simulator import SimConfig
from scheduler.sim.state import SimulationError
from scheduler.sim.trace import TraceJob, write_csv
from tests.scheduler.sim.scenarios import busy_trace, cluster


@pytest.fixture(scope="module")
def results() -> dict:
    return run(
        busy_trace(seed=2, jobs=40),
        cluster(),
        ["wanka", "fifo"],
        config=SimConfig(failures_per_gpu_hour=0.01),
    )


def figures(page: str) -> dict:
    return json.loads(re.search(r"const FIGURES = (.*);\nfunction drawFigures", page).group(1))


def test_the_report_holds_every_figure_for_every_policy(results) -> None:
    page = render(results, "test")
    drawn = figures(page)
    assert set(drawn) == {"utilization", "waits", "shares", "ettr"}
    assert [trace["name"] for trace in drawn["waits"]["data"]] == ["wanka", "fifo"]
    assert [trace["name"] for trace in drawn["shares"]["data"]] == ["wanka", "fifo", "guarantee"]
    for name in drawn:
        assert f'<div id="{name}" class="figure"></div>' in page
    assert "<td>queueing delay, p95</td>" in page


def test_the_report_says_which_preemption_settings_each_policy_ran(results) -> None:
    wanka, fifo = (results["policies"][name]["preemption"] for name in ("wanka", "fifo"))
    assert sum(wanka.values()) == len(results["cluster"]["queues"])
    assert all("reclaimWithinCohort=Any" in words for words in wanka)
    assert list(fifo) == [
        "reclaimWithinCohort=Never, withinClusterQueue=Never, borrowWithinCohort=Never, "
        "fairSharing=LessThanOrEqualToFinalShare"
    ]
    page = render(results, "test")
    assert "<li><b>fifo</b>: 1 queue: reclaimWithinCohort=Never" in page


def test_plotly_is_embedded_once_and_unpacks_to_the_library(results) -> None:
    page = render(results, "test")
    packed = re.search(r'<script id="plotly-gz" type="text/plain">([^<]*)</script>', page)
    library = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    assert gzip.decompress(base64.b64decode(packed.group(1))) == library
    assert page.count('id="plotly-gz"') == 1
    assert len(page) < 3_000_000


def test_the_report_is_the_same_for_the_same_results(results) -> None:
    assert render(results, "test") == render(results, "test")


def test_the_command_line_runs_a_trace_csv_on_a_cluster_spec(tmp_path, capsys) -> None:
    (tmp_path / "jobs.csv").write_text(write_csv(busy_trace(seed=3, jobs=20)))
    (tmp_path / "cluster.json").write_text(
        json.dumps(
            {
                "name": "cli",
                "datacenters": [
                    {
                        "name": "dc1",
                        "pods": [
                            {"name": "p1", "leaves": 2, "nodes_per_leaf": 4, "gpu_model": "H800"}
                        ],
                    }
                ],
                "cohorts": [{"name": "all"}],
                "queues": [
                    {"name": q, "cohort": "all", "quotas": {"H800": 16}}
                    for q in ("prod", "research", "batch", "eval")
                ],
            }
        )
    )
    code = main(
        [
            "--trace",
            str(tmp_path / "jobs.csv"),
            "--cluster",
            str(tmp_path / "cluster.json"),
            "--policy",
            "wanka",
            "--policy",
            "static",
            "--json",
            str(tmp_path / "out.json"),
            "--report",
            str(tmp_path / "out.html"),
            "--quiet",
        ]
    )
    assert code == 0
    written = json.loads((tmp_path / "out.json").read_text())
    assert list(written["policies"]) == ["wanka", "static"]
    assert written["policies"]["wanka"]["jobs"] == 20
    assert (tmp_path / "out.html").read_text().startswith("<!DOCTYPE html>")
    assert "wanka: allocated" in capsys.readouterr().out


def test_a_report_is_redrawn_from_its_json(results, tmp_path) -> None:
    (tmp_path / "run.json").write_text(json.dumps(results))
    assert main(["--results", str(tmp_path / "run.json"), "--title", "again"]) == 0
    page = (tmp_path / "run.html").read_text()
    assert "<title>again</title>" in page and figures(page)["ettr"]["data"]


def test_the_command_line_says_where_a_trace_is_bad(tmp_path, capsys) -> None:
    (tmp_path / "jobs.csv").write_text(
        "submit_s,gpus,gpu_model,duration_s,queue\n0,1,H800,60,prod\n0,one,H800,60,prod\n"
    )
    (tmp_path / "cluster.json").write_text("{}")
    assert (
        main(["--trace", str(tmp_path / "jobs.csv"), "--cluster", str(tmp_path / "cluster.json")])
        == 2
    )
    assert "error: datacenters: must be a list" in capsys.readouterr().err
    (tmp_path / "cluster.json").write_text(json.dumps(cluster_spec()))
    assert (
        main(["--trace", str(tmp_path / "jobs.csv"), "--cluster", str(tmp_path / "cluster.json")])
        == 2
    )
    assert "error: line 3, column gpus: 'one' is not a whole number" in capsys.readouterr().err


def cluster_spec() -> dict:
    return {
        "name": "c",
        "datacenters": [
            {
                "name": "dc1",
                "pods": [{"name": "p1", "leaves": 1, "nodes_per_leaf": 1, "gpu_model": "H800"}],
            }
        ],
        "queues": [{"name": "prod", "quotas": {"H800": 8}}],
    }


def test_a_trace_naming_an_unknown_queue_is_refused() -> None:
    with pytest.raises(SimulationError, match="names queue 'nlp'"):
        run([TraceJob(1, 0.0, 1, "H800", 10.0, "nlp")], cluster(), ["wanka"])


def test_names_from_a_trace_cannot_run_as_script_in_the_report(results) -> None:
    payload = "</script><script>alert(1)</script>"
    planted = json.loads(json.dumps(results))
    planted["cluster"]["name"] = payload
    planted["cluster"]["queues"] = {payload + n: q for n, q in planted["cluster"]["queues"].items()}
    for policy in planted["policies"].values():
        policy["by_queue"] = {payload + n: q for n, q in policy["by_queue"].items()}
    page = render(planted, payload)
    assert "<script>alert(1)" not in page
    assert payload in json.dumps(figures(page))  # the name is still there, as text


def test_the_utilization_axis_spans_the_whole_scale_however_light_the_load(results) -> None:
    axis = utilization_figure(results).layout.yaxis
    assert (tuple(axis.range), axis.tickformat) == ((0, 1.02), ".0%")
