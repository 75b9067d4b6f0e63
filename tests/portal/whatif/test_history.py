"""Replaying this cluster's own history, and every policy on a cluster of two regions."""

from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from portal.cluster.models import Region
from portal.demo import installation
from portal.quotas.models import Queue
from portal.whatif.choices import ClusterSource, RunState, TraceSource
from portal.whatif.models import WhatIfRun
from portal.whatif.runs import execute, history
from portal.workloads.choices import State
from portal.workloads.models import UsageRecord
from scheduler.checkpointing import PolicyKind
from scheduler.sim.policies import POLICIES
from tests.builders import make_queue, make_workload

NOW = timezone.now()


@pytest.fixture
def staff(client, operator):
    client.force_login(operator)
    return client


def ago(**delta):
    return NOW - timedelta(**delta)


def ended(queue, name, gpus=16, ran_h=2.0, booked=True, **fields):
    """A workload that ran `ran_h` hours on its gang and ended an hour ago (booked as the
    portal books it, unless `booked` is false)."""
    start, end = ago(hours=1 + ran_h), ago(hours=1)
    workload = make_workload(
        queue, name, gpus=gpus, state=State.SUCCEEDED, submitted_at=start - timedelta(minutes=5),
        started_at=start, finished_at=end, **fields,
    )  # fmt: skip
    if booked:
        UsageRecord.objects.create(
            tenant=queue.tenant, workload=workload, gpu_model=workload.gpu_model, gpus=gpus,
            started_at=start, ended_at=end, gpu_hours=gpus * ran_h,
        )  # fmt: skip
    return workload


def test_the_history_as_a_trace_says_what_each_job_took_or_what_is_known(cluster, acme):
    """Ended jobs take the time they ran; one that never ran is left out; one still pending or
    running takes what it says it needs, or the median of the ended ones, and at least what
    it has run; jobs before the window are not in it."""
    llm = make_queue(acme, "llm", h800=64)
    done = ended(llm, "done", ran_h=2.0, priority=200, checkpoint_policy="periodic")
    unbooked = ended(llm, "unbooked", ran_h=4.0, booked=False)
    make_workload(llm, "never ran", state=State.CANCELLED, submitted_at=ago(hours=5))
    running = make_workload(
        llm, "running", state=State.RUNNING, submitted_at=ago(hours=3), started_at=ago(hours=3),
        simulated_duration_s=3600,
    )  # fmt: skip
    waiting = make_workload(
        llm, "waiting", gpus=8, min_gpus=4, max_gpus=16, submitted_at=ago(minutes=10)
    )
    make_workload(llm, "too old", state=State.SUCCEEDED, submitted_at=ago(days=8))
    jobs = {job.id: job for job in history(7, NOW)}
    assert set(jobs) == {done.pk, unbooked.pk, running.pk, waiting.pk}
    assert jobs[done.pk].duration_s == pytest.approx(7200)
    assert jobs[unbooked.pk].duration_s == pytest.approx(4 * 3600)
    assert jobs[running.pk].duration_s == pytest.approx(3 * 3600)  # it has run more than it said
    assert jobs[waiting.pk].duration_s == pytest.approx(3 * 3600)  # the median of 2 h and 4 h
    assert (jobs[waiting.pk].gpus, jobs[waiting.pk].min_gpus) == (16, 4)
    job = jobs[done.pk]
    assert job.submit_s == pytest.approx(
        (timedelta(days=7) - timedelta(hours=3, minutes=5)).total_seconds()
    )
    assert (job.queue, job.gpu_model, job.gpus, job.priority, job.status) == (
        "llm", "H800", 16, 200, "succeeded",
    )  # fmt: skip
    assert job.checkpoint.kind is PolicyKind.PERIODIC


def test_the_last_days_replayed_on_this_cluster_from_the_page(staff, cluster, acme):
    """The form exports the history when the run is asked for (7 days unless it says), and the
    run replays it on this cluster under each policy."""
    llm = make_queue(acme, "llm", h800=64)
    for number in range(3):
        ended(llm, f"job{number}", gpus=8 * (number + 1))
    form = {"trace": "history", "cluster": "trace", "policies": ["wanka", "fifo"]}
    assert staff.post("/ops/whatif/", form).status_code == 302
    whatif = WhatIfRun.objects.get()
    assert (whatif.trace, whatif.cluster, whatif.days) == (
        TraceSource.HISTORY, ClusterSource.CURRENT, 7
    )  # fmt: skip
    assert len(whatif.trace_csv.splitlines()) == 4  # the header and three jobs
    execute(whatif.pk)
    whatif.refresh_from_db()
    assert whatif.state == RunState.DONE, whatif.message
    for policy in ("wanka", "fifo"):
        assert whatif.results["policies"][policy]["finished"] == 3
    page = staff.get(f"/ops/whatif/{whatif.pk}/").content.decode()
    assert "the last 7 days" in page


@pytest.mark.parametrize(
    ("days", "field"),
    [("", "trace"), ("31", "days")],
    ids=["a window with no workload", "more than 30 days"],
)
def test_a_history_that_could_not_run_is_refused(staff, cluster, acme, days, field):
    llm = make_queue(acme, "llm", h800=64)
    make_workload(llm, "too old", state=State.SUCCEEDED, submitted_at=ago(days=8))
    form = {"trace": "history", "cluster": "current", "policies": ["wanka"], "days": days}
    page = staff.post("/ops/whatif/", form)
    assert page.status_code == 200 and field in page.context["errors"]
    assert not WhatIfRun.objects.exists()


def test_tenants_cannot_replay_the_clusters_history(client, alice, cluster, acme):
    ended(make_queue(acme, "llm", h800=64), "done")
    client.force_login(alice)
    form = {"trace": "history", "cluster": "current", "policies": ["wanka"]}
    assert client.post("/ops/whatif/", form).status_code == 403
    assert not WhatIfRun.objects.exists()


def test_every_policy_runs_on_this_cluster_with_a_second_region(staff, cluster, acme):
    """A data center in a second region with its own queue: the FIFO baseline failed there
    ("needs a cluster of one region"); now each policy runs every job of both regions."""
    installation.build_cluster({"dc3": {"p1": ("H800", 1)}}, 2, region="cn-west")
    make_queue(acme, "llm", h800=64)
    west = Queue.objects.create(tenant=acme, name="west", region=Region.objects.get(name="cn-west"))
    west.quotas.create(gpu_model=cluster[0].gpu_model, nominal=16)
    trace = "submit_s,gpus,gpu_model,duration_s,queue\n0,16,H800,3600,llm\n0,16,H800,3600,west\n"
    upload = SimpleUploadedFile("jobs.csv", trace.encode(), "text/csv")
    form = {"trace": "csv", "cluster": "current", "policies": list(POLICIES), "trace_csv": upload}
    assert staff.post("/ops/whatif/", form).status_code == 302
    whatif = WhatIfRun.objects.get()
    execute(whatif.pk)
    whatif.refresh_from_db()
    assert whatif.state == RunState.DONE, whatif.message
    assert {name: f["finished"] for name, f in whatif.results["policies"].items()} == {
        name: 2 for name in POLICIES
    }


def test_manage_py_simulate_replays_the_history(tmp_path, cluster, acme):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no workload was submitted in the last 7 days"):
        call_command("simulate", "--trace", "history")
    ended(make_queue(acme, "llm", h800=64), "done")
    figures = tmp_path / "r.json"
    call_command("simulate", "--trace", "history", "--policy", "fifo", "--json", str(figures))
    assert '"finished": 1' in figures.read_text()


def test_a_job_that_accepted_several_models_keeps_them_in_the_trace(cluster, acme):
    llm = make_queue(acme, "llm", h800=64, h20=32)
    ended(llm, "either", gpus=8, model="H20", accepts=["H800", "H20"])
    ended(llm, "one", gpus=8)
    by_name = {job.id: job for job in history(1, NOW)}
    either, one = sorted(by_name.values(), key=lambda job: job.id)
    assert (either.gpu_model, either.accepts) == ("H20", ("H20", "H800"))  # where it ran first
    assert one.accepts == ()


def test_mig_jobs_replay_on_mig_instances_of_this_cluster(staff, cluster, acme):
    """A MIG job's history names its profile and takes the time it ran (its booked GPU-hours
    over its profile's share), and the replay on this cluster runs it on an instance of that
    profile, named from the cluster's memory for the model."""
    llm = make_queue(acme, "llm", h800=64)
    start, end = ago(hours=3), ago(hours=1)
    mig = make_workload(
        llm, "mig", gpus=1, mig="3g.40gb", state=State.SUCCEEDED, submitted_at=start,
        started_at=start, finished_at=end,
    )  # fmt: skip
    UsageRecord.objects.create(
        tenant=acme, workload=mig, gpu_model=mig.gpu_model, gpus=1, started_at=start,
        ended_at=end, gpu_hours=0.5 * 2,
    )  # fmt: skip
    [job] = history(7, NOW)
    assert (job.mig.name, job.share, job.duration_s) == ("3g.40gb", 0.5, pytest.approx(7200))
    form = {"trace": "history", "cluster": "trace", "policies": ["wanka"]}
    assert staff.post("/ops/whatif/", form).status_code == 302
    whatif = WhatIfRun.objects.get()
    assert whatif.trace_csv.splitlines()[1].endswith(",3g.40gb,")
    execute(whatif.pk)
    whatif.refresh_from_db()
    assert whatif.state == RunState.DONE, whatif.message
    assert whatif.results["policies"]["wanka"]["finished"] == 1


def test_a_job_marked_not_to_move_stays_so_in_the_trace(cluster, acme):
    llm = make_queue(acme, "llm", h800=64)
    ended(llm, "stays", gpus=8, movable=False)
    ended(llm, "may move", gpus=8)
    stays, may_move = sorted(history(1, NOW), key=lambda job: job.id)
    assert (stays.movable, may_move.movable) == (False, True)
