"""What-if simulations from the operator's page, the Celery task and `manage.py simulate`."""

import json
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.utils import timezone

from portal.cluster.models import GpuModel
from portal.quotas.models import Budget
from portal.whatif.choices import RunState
from portal.whatif.models import WhatIfRun
from portal.whatif.runs import ALIVE, current_cluster, execute, requeue_stale
from portal.workloads.models import UsageRecord
from scheduler.sim.runner import simulate
from scheduler.sim.simulator import SimConfig
from scheduler.sim.trace import TraceJob
from tests.builders import make_queue, make_workload
from tests.portal.live_client import LiveClient

TRACE = """submit_s,gpus,gpu_model,duration_s,queue
0,8,H800,3600,llm
60,16,H800,1800,llm
120,64,H800,7200,llm
"""


@pytest.fixture
def staff(client, operator):
    client.force_login(operator)
    return client


def test_only_operators_reach_the_page(client, bob):
    client.force_login(bob)
    assert client.get("/ops/whatif/").status_code == 403


def test_a_philly_run_from_the_page_to_its_report(staff):
    response = staff.post(
        "/ops/whatif/",
        {
            "trace": "philly",
            "cluster": "trace",
            "days": 20,
            "policies": ["wanka", "fifo"],
            "seed": 3,
        },
    )
    whatif = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/ops/whatif/{whatif.pk}/"
    assert (whatif.state, whatif.policies, whatif.seed) == (RunState.PENDING, ["wanka", "fifo"], 3)
    execute(whatif.pk)  # what the Celery task does (the cross-process path is tested below)
    whatif.refresh_from_db()
    assert whatif.state == RunState.DONE and whatif.progress == 1.0
    assert set(whatif.results["policies"]) == {"wanka", "fifo"}
    assert whatif.results["policies"]["wanka"]["jobs"] == whatif.results["trace"]["jobs"] > 0
    response = staff.get(f"/ops/whatif/{whatif.pk}/report/")
    assert response.headers["Content-Security-Policy"].startswith("sandbox allow-scripts;")
    report = response.content
    assert b"plotly" in report.lower() and b"wanka" in report
    title = f"What-if {whatif.pk}: Microsoft Philly (2017), on its own cluster".encode()
    assert report.count(title) == 2 and b"what-if %d: " % whatif.pk not in report  # once each
    figures = staff.get(f"/ops/whatif/{whatif.pk}/results.json").json()
    assert figures["policies"]["fifo"]["preemptions"]["count"] == 0
    execute(whatif.pk)  # a second delivery of the task does nothing
    assert WhatIfRun.objects.get(pk=whatif.pk).finished_at == whatif.finished_at


def test_an_uploaded_trace_on_this_cluster(staff, acme):
    from tests.builders import make_cluster

    make_cluster()
    make_queue(acme, "llm", h800=64)
    staff.post(
        "/ops/whatif/",
        {
            "trace": "csv",
            "cluster": "current",
            "policies": ["wanka"],
            "trace_csv": SimpleUploadedFile("jobs.csv", TRACE.encode(), "text/csv"),
        },
    )
    whatif = WhatIfRun.objects.get()
    execute(whatif.pk)
    whatif.refresh_from_db()
    assert whatif.state == RunState.DONE, whatif.message
    assert whatif.results["policies"]["wanka"]["finished"] == 3


def test_a_run_with_the_inference_service_draws_the_tide(staff, acme):
    """The Azure conversation service beside an uploaded trace on this cluster, its peak a
    quarter of the cluster's H800s: the run covers the trace's first day and its report draws
    the GPUs the service and training held, hour by hour."""
    from tests.builders import make_cluster

    make_cluster()
    make_queue(acme, "llm", h800=64)
    staff.post(
        "/ops/whatif/",
        {
            "trace": "csv",
            "cluster": "current",
            "policies": ["wanka"],
            "service_percent": "25",
            "trace_csv": SimpleUploadedFile("jobs.csv", TRACE.encode(), "text/csv"),
        },
    )
    whatif = WhatIfRun.objects.get()
    assert whatif.service_percent == 25
    execute(whatif.pk)
    whatif.refresh_from_db()
    assert whatif.state == RunState.DONE, whatif.message
    assert whatif.results["service"]["peak_gpus"] == 24  # a quarter of 96 H800s
    tide = whatif.results["policies"]["wanka"]["tide"]
    assert len(tide["inference"]) == 24 and min(tide["inference"]) < max(tide["inference"])
    assert whatif.results["policies"]["wanka"]["jobs"] == 3  # the service's replicas apart
    report = staff.get(f"/ops/whatif/{whatif.pk}/report/").content
    assert b'<div id="tide" class="figure"' in report and b"The tide: GPUs held" in report
    page = staff.get(f"/ops/whatif/{whatif.pk}/").content.decode()
    assert "peak 25.0 % of the cluster" in page


SCATTERED = """submit_s,gpus,gpu_model,duration_s,queue
0,4,H800,72000,llm
0,4,H800,600,llm
0,4,H800,72000,llm
0,4,H800,600,llm
900,8,H800,3600,llm
"""


@pytest.mark.parametrize(("defrag", "moves"), [("", 0), ("scattered", 1)])
def test_a_run_defragments_every_pod_as_the_form_asks(staff, acme, defrag, moves):
    """Two nodes each left holding one long 4-GPU job when a gang of 8 arrives: a run told to
    defragment whenever free GPUs are scattered moves one of them, and the gang starts within
    hours rather than after the long jobs' 20 hours."""
    from tests.builders import make_cluster

    make_cluster({"dc1": {"p1": ("H800", 1)}}, nodes_per_leaf=2)
    make_queue(acme, "llm", h800=16)
    form = {"trace": "csv", "cluster": "current", "policies": ["wanka"], "seed": 2}
    trace = SimpleUploadedFile("jobs.csv", SCATTERED.encode(), "text/csv")
    staff.post("/ops/whatif/", {**form, "defrag": defrag, "defrag_moves": "2", "trace_csv": trace})
    whatif = WhatIfRun.objects.get()
    assert (whatif.defrag, whatif.defrag_moves) == (defrag, 2)
    execute(whatif.pk)
    whatif.refresh_from_db()
    assert whatif.state == RunState.DONE, whatif.message
    figures = whatif.results["policies"]["wanka"]
    assert figures["preemptions"]["defrag_moves"] == moves
    waited = figures["wait_s"]["max"]
    assert waited < 2 * 3600 if moves else waited > 19 * 3600
    page = staff.get(f"/ops/whatif/{whatif.pk}/").content.decode()
    said = "every pod, <code>scattered</code>; at most 2 moves an hour each"
    assert (said in page) == bool(moves)


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"trace": "csv", "cluster": "current", "policies": ["wanka"]}, "trace_csv"),
        ({"trace": "philly", "cluster": "trace"}, "policies"),
        ({"trace": "philly", "cluster": "trace", "policies": ["wanka"], "days": "-2"}, "days"),
        ({"trace": "nonsense", "cluster": "trace", "policies": ["wanka"]}, "trace"),
        (
            {"trace": "philly", "cluster": "trace", "policies": ["wanka"], "service_percent": "0"},
            "service_percent",
        ),
        (
            {
                "trace": "philly",
                "cluster": "trace",
                "policies": ["wanka"],
                "service_percent": "100",
            },
            "service_percent",
        ),
        ({"trace": "philly", "cluster": "trace", "policies": ["wanka"], "defrag": "2am"}, "defrag"),
        (
            {"trace": "philly", "cluster": "trace", "policies": ["wanka"], "defrag_moves": "-1"},
            "defrag_moves",
        ),
    ],
    ids=[
        "a CSV trace needs its file",
        "at least one policy",
        "days must be positive",
        "an unknown trace",
        "a service needs a peak above nothing",
        "a service of the whole cluster leaves no room for training",
        "defragmentation at a time that does not read",
        "a negative number of moves",
    ],
)
def test_bad_forms_say_what_is_wrong_and_start_nothing(staff, form, field):
    page = staff.post("/ops/whatif/", form)
    assert page.status_code == 200 and field in page.context["errors"]
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize(
    ("form", "field", "said"),
    [
        ({"trace": "csv", "cluster": "trace"}, "cluster", "no cluster of its own"),
        (
            {"trace": "csv", "cluster": "current", "csv": TRACE.replace("60,16", "60,sixteen")},
            "trace_csv",
            "line 3, column gpus",
        ),
        (
            {"trace": "csv", "cluster": "current", "csv": TRACE.replace("64,H800", "64,B200")},
            "cluster",
            "GPU models its queues' regions lack: B200 in llm",
        ),
        (
            {"trace": "csv", "cluster": "current", "csv": TRACE.replace("3600,llm", "3600,nlp")},
            "cluster",
            "queues the cluster lacks: nlp (it has llm)",
        ),
        ({"trace": "philly", "cluster": "current"}, "cluster", "queues the cluster lacks: "),
        ({"trace": "synthetic", "cluster": "current"}, "cluster", "queues the cluster lacks: "),
    ],
    ids=[
        "an uploaded trace has no cluster of its own",
        "a row that does not read, with its line",
        "a GPU model this cluster lacks",
        "a queue this cluster lacks",
        "Philly's virtual clusters on this cluster",
        "the synthetic month's tenants on this cluster",
    ],
)
def test_a_trace_that_could_not_run_on_its_cluster_is_refused_saying_why(
    staff, cluster, acme, form, field, said
):
    """The form refuses what would only fail in the worker (those runs failed later, or
    said only that the worker's log knew why)."""
    make_queue(acme, "llm", h800=64)
    upload = SimpleUploadedFile("jobs.csv", form.get("csv", TRACE).encode(), "text/csv")
    page = staff.post("/ops/whatif/", {**form, "policies": ["wanka"], "trace_csv": upload})
    assert page.status_code == 200 and said in page.context["errors"][field]
    assert said in page.content.decode().replace("&#x27;", "'")
    assert not WhatIfRun.objects.exists()


def test_a_run_the_form_did_not_check_still_fails_with_the_line_at_fault(cluster, acme):
    """A run written by other means (an older release's row) is checked again by the worker."""
    make_queue(acme, "llm", h800=64)
    bad = TRACE.replace("60,16", "60,sixteen")
    whatif = WhatIfRun.objects.create(
        trace="csv", cluster="current", trace_csv=bad, policies=["wanka"]
    )
    execute(whatif.pk)
    whatif.refresh_from_db()
    assert whatif.state == RunState.FAILED and "line 3" in whatif.message


def test_this_cluster_as_the_simulator_sees_it(cluster, acme):
    make_queue(acme, "llm", h800=64)
    spec = current_cluster()
    assert spec.gpus == 16 * 8 and [q.name for q in spec.queues] == ["llm"]
    assert all(node.free == tuple(range(node.gpus)) for node in spec.nodes)
    assert spec.budgets == ()


def test_this_clusters_gpu_models_go_to_the_simulator_with_their_worth(cluster, acme):
    """An operator's worth, else the planner's figure; a model with neither is left out, for
    the engine to count as the median of the others there as here."""
    GpuModel.objects.filter(name="H20").update(worth=200)
    GpuModel.objects.create(name="MLU590", memory_gb=64)
    spec = current_cluster()
    assert spec.worth == (("H20", 200.0), ("H800", 989.0))
    assert spec.model_worth == (("H20", 200.0), ("H800", 989.0))


@pytest.mark.servers
def test_this_clusters_budgets_go_to_the_simulator_with_their_windows(cluster, acme, bob):
    """A hard monthly budget replayed from now: what the month used, the time until it ends;
    a replay through the engine keeps out a job it does not allow and admits it once the
    month is over."""
    llm = make_queue(acme, "llm", h800=64)
    Budget.objects.create(tenant=acme, queue=llm, gpu_hours=10, hard=True)
    Budget.objects.create(tenant=acme, gpu_hours=500, window="rolling", window_days=7)
    now = timezone.now()
    done = make_workload(llm, "done", gpus=8)
    UsageRecord.objects.create(
        tenant=acme, workload=done, gpu_model=done.gpu_model, gpus=8,
        started_at=now - timedelta(minutes=2), ended_at=now - timedelta(minutes=1), gpu_hours=8,
    )  # fmt: skip
    month, rolling = current_cluster().budgets
    assert month.budget.used == pytest.approx(8)
    ends = (now.replace(day=1) + timedelta(days=32)).replace(day=1, hour=0, minute=0, second=0)
    assert month.budget.hard and month.budget.queue_ids == (llm.pk,)
    assert not month.rolling and abs(month.first_ends_in_s - (ends - now).total_seconds()) < 60
    assert rolling.rolling and rolling.window_s == 7 * 86400 and rolling.budget.limit == 500
    trace = [TraceJob(1, 0.0, 8, "H800", 3600.0, "llm")]  # 8 GPU-hours: 2 of 10 are left
    config = SimConfig(failures_per_gpu_hour=0.0, time_limits=True)
    start = simulate(trace, current_cluster(), "wanka", config).recorder.outcomes[0]
    assert start.first_start_s == pytest.approx(month.first_ends_in_s, abs=1)


def test_manage_py_simulate_writes_report_and_figures(tmp_path, db):
    report, figures = tmp_path / "r.html", tmp_path / "r.json"
    call_command(
        "simulate",
        "--trace",
        "philly",
        "--days",
        "20",
        "--policy",
        "wanka",
        "--policy",
        "static",
        "--report",
        str(report),
        "--json",
        str(figures),
    )
    assert report.read_text().lower().count("plotly") > 1
    assert set(json.loads(figures.read_text())["policies"]) == {"wanka", "static"}
    with pytest.raises(CommandError, match="cluster"):
        call_command("simulate", "--trace", str(report))  # a CSV without a cluster
    with pytest.raises(CommandError, match="above 0 and below 1"):
        call_command("simulate", "--trace", "philly", "--days", "1", "--service-share", "30")
    with pytest.raises(CommandError, match="'2am' is neither scattered nor a time"):
        call_command("simulate", "--trace", "philly", "--days", "1", "--defrag", "2am")


@pytest.mark.django_db(transaction=True)
def test_the_worker_runs_it_and_the_page_follows_live(
    portal_server, celery_worker, clean_redis, operator
):
    from django.test import Client

    browser = Client()
    browser.force_login(operator)
    live = LiveClient(portal_server, browser)
    try:
        browser.post(
            "/ops/whatif/",
            {
                "trace": "philly",
                "cluster": "trace",
                "days": 20,
                "policies": ["wanka", "fifo", "static", "no-reclaim"],
            },
        )
        whatif = WhatIfRun.objects.get()
        done = live.wait_for("whatif.progress", lambda p: p["state"] == "done", 120)
    finally:
        live.close()
    assert done["id"] == whatif.pk
    drawn = browser.get(f"/ops/whatif/{whatif.pk}/report/")
    assert drawn.status_code == 200 and b"GPUs allocated over time" in drawn.content
    chinese = browser.get(f"/ops/whatif/{whatif.pk}/report/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "已分配 GPU（平均）" in chinese.content.decode() and b'lang="zh-hans"' in chinese.content
    page = browser.get(f"/ops/whatif/{whatif.pk}/").content.decode()
    assert 'id="whatif-progress"' in page and "All figures (JSON)" in page


def test_a_run_whose_worker_died_runs_again_and_a_live_one_is_left_alone(operator, clean_redis):
    """A what-if marked running with no worker keeping it alive (the worker was killed; its
    redelivered task would find it running and do nothing) goes back to pending and runs to
    the end; one whose worker is alive is not touched."""
    dead = WhatIfRun.objects.create(trace="philly", days=5, state=RunState.RUNNING)
    live = WhatIfRun.objects.create(trace="philly", days=5, state=RunState.RUNNING)
    clean_redis.set(f"{ALIVE}{live.pk}", 1, ex=30)
    assert requeue_stale() == [dead.pk]
    assert WhatIfRun.objects.get(pk=live.pk).state == RunState.RUNNING
    execute(dead.pk)
    dead.refresh_from_db()
    assert dead.state == RunState.DONE
    assert not clean_redis.exists(f"{ALIVE}{dead.pk}")  # the finished run's key is gone
    assert requeue_stale() == []


def test_a_refused_form_keeps_the_policies_that_were_chosen(staff):
    form = {"trace": "philly", "cluster": "trace", "policies": ["wanka", "fifo"], "days": "-2"}
    body = staff.post("/ops/whatif/", form).content.decode()
    for policy, checked in (("wanka", True), ("fifo", True), ("static", False)):
        box = f'name="policies" value="{policy}" checked'
        assert (box in body) is checked, policy
    assert 'value="static" checked' in staff.get("/ops/whatif/").content.decode()  # all, at first
