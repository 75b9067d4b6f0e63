"""Parallel plans in the portal: a job that names its model gets a plan for the GPUs it holds on
admission and a new one when a reclaim shrinks it, in its environment, its API and its page;
bad models are refused by field; the what-if endpoint answers for any GPU count."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.cluster.models import NodeCommand
from portal.workloads import lifecycle, parallel
from portal.workloads.checkpoints import record_saved
from portal.workloads.choices import State
from portal.workloads.cycle import build_snapshot, scheduling_cycle
from portal.workloads.desired import desired_state
from portal.workloads.models import Checkpoint, Workload
from scheduler import parallelism
from scheduler.agent.contract import ENV_PARALLEL_PLAN
from tests.builders import api_client, make_cluster, make_queue, make_workload

JOB = {
    "name": "pretrain",
    "queue": "train",
    "gpu_model": "H800",
    "gpus": 64,
    "min_gpus": 32,
    "max_gpus": 64,
    "model": "gpt3-13b",
    "global_batch": 512,
    "simulated_duration_s": 3600,
}


def _plan_on(workload) -> dict:
    """The plan the workload's first node is told to hand its processes."""
    node = workload.allocations.order_by("node_rank").first().node
    (assignment,) = [
        a for a in desired_state(node)["assignments"] if a["workload_id"] == workload.pk
    ]
    return json.loads(assignment["env"][ENV_PARALLEL_PLAN])


@pytest.fixture
def research(db, acme, globex):
    make_cluster({"dc1": {"p1": ("H800", 2)}})  # 8 nodes, 64 GPUs
    return (
        make_queue(acme, "llm", cohort="research", h800=32),
        make_queue(globex, "train", cohort="research", h800=32),
    )


def test_a_reclaim_shrinks_the_job_and_its_new_attempt_gets_the_new_plan(research, charlie, client):
    acme_q, _ = research
    response = api_client(charlie).post("/api/v1/workloads/", JOB, format="json")
    assert response.status_code == 201, response.json()
    job = Workload.objects.get(pk=response.json()["id"])
    assert job.model_spec["layers"] == 40 and job.model_spec["name"] == "gpt3-13b"

    scheduling_cycle()
    before = _plan_on(job)
    assert (before["gpus"], before["global_batch"]) == (64, 512)
    assert before["tp"] * before["pp"] * before["dp"] == 64

    make_workload(acme_q, "claimant", gpus=32, simulated_duration_s=3600)
    plan = scheduling_cycle()
    assert [s.workload_id for s in plan.shrinks] == [job.pk]
    job.refresh_from_db()
    after = _plan_on(job)
    assert (after["gpus"], after["global_batch"]) == (32, 512)
    assert after["tp"] * after["pp"] * after["dp"] == 32
    more, fewer = after["sequences_per_replica"]
    larger = after["replicas_with_more"]
    assert more * larger + fewer * (after["dp"] - larger) == 512  # the batch is kept

    records = list(job.parallel_plans.all())
    assert [(r.attempt, r.gpus) for r in records] == [
        (0, 64),
        (job.attempt, 32),
    ] and job.attempt == 1
    assert records[0].reason == "admitted on 64 GPUs"
    assert records[1].reason.startswith("shrunk to 32 GPUs: ")

    detail = api_client(charlie).get(f"/api/v1/workloads/{job.pk}/").json()
    assert [p["gpus"] for p in detail["parallel_plans"]] == [64, 32]
    client.force_login(charlie)
    page = client.get(reverse("workload-detail", args=[job.pk])).content.decode()
    history = page[page.index('id="plan-history"') :]
    for p in (before, after):
        assert f"TP{p['tp']} × PP{p['pp']} × DP{p['dp']}" in history
    assert "shrunk to 32 GPUs" in history


def test_a_job_without_a_model_gets_no_plan(acme_llm):
    job = make_workload(acme_llm, "plain", gpus=8)
    scheduling_cycle()
    assert not job.parallel_plans.exists()
    node = job.allocations.first().node
    assert ENV_PARALLEL_PLAN not in desired_state(node)["assignments"][0]["env"]


SPEC = {"layers": 4, "hidden": 512, "heads": 8, "ffn": 2048, "vocab": 32000, "seq": 1024}


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"global_batch": None}, "global_batch", "A model and a global batch go together."),
        ({"model": None}, "model", "A model and a global batch go together."),
        ({"model": "gpt-9"}, "model", "unknown model 'gpt-9'"),
        ({"model": {**SPEC, "heads": 7}}, "model.heads", "must divide the hidden size"),
        ({"model": {**SPEC, "seq": "long"}}, "model.seq", "a positive whole number"),
        ({"model": "llama3-405b", "gpus": 8, "min_gpus": 8}, "gpus", "does not fit in the memory"),
        ({"model": "gpt3-175b", "min_gpus": 8}, "min_gpus", "does not fit in the memory of 8"),
        ({"kind": "inference"}, "model", "Only training jobs get parallel plans."),
    ],
    ids=[
        "a model without a batch",
        "a batch without a model",
        "a model not in the catalogue",
        "heads that do not divide the hidden size",
        "a field that is not a number",
        "a model too large for the GPUs asked for",
        "an elastic minimum the model cannot run on",
        "an inference job",
    ],
)
def test_a_bad_model_is_refused_by_field(research, charlie, change, field, reason):
    body = {k: v for k, v in {**JOB, **change}.items() if v is not None}
    response = api_client(charlie).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == field and reason in error["reason"], error
    assert not Workload.objects.exists()


def test_a_spec_given_field_by_field_is_kept_resolved(research, charlie):
    body = {**JOB, "model": {**SPEC, "name": "mine"}, "gpus": 8, "min_gpus": 8, "max_gpus": 8}
    response = api_client(charlie).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["model"] == {**SPEC, "name": "mine", "kv_heads": 0, "gated": False,
                                        "tied": True, "dropout": True}  # fmt: skip


def test_what_a_model_would_do_on_any_gpu_count(db, bob):
    body = {"model": "gpt3-175b", "global_batch": 1536, "gpu_model": "H800", "gpus": 1000}
    answer = api_client(bob).post("/api/v1/parallelism/plans/", body, format="json").json()
    plan = answer["plan"]
    assert plan["tp"] * plan["pp"] * plan["dp"] == 1000 and len(answer["alternatives"]) == 5
    times = [p["predicted"]["iteration_s"] for p in [plan, *answer["alternatives"]]]
    assert times == sorted(times)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": 900}, "gpus"),
        ({"gpu_model": "V100"}, "gpu_model"),
        ({"model": {"layers": 1}}, "model.hidden"),
        ({"model": {**SPEC, "hidden": 10**160}}, "model.hidden"),
        ({"gpus": 8, "model": "megatron-1t"}, "gpus"),
    ],
    ids=[
        "not whole nodes",
        "a GPU the planner does not know",
        "a half spec",
        "a number no float can hold",
        "does not fit",
    ],
)
def test_the_what_if_refuses_by_field(db, bob, change, field):
    body = {"model": "gpt3-175b", "global_batch": 1536, "gpu_model": "H800", "gpus": 1000}
    response = api_client(bob).post("/api/v1/parallelism/plans/", {**body, **change}, format="json")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == [field]


def test_the_what_if_needs_a_login(client, db):
    assert client.post("/api/v1/parallelism/plans/", {}).status_code in (401, 403)


def test_the_engine_shrinks_the_job_that_loses_least_throughput(research, globex):
    """Two borrowed gpt3-1.3b jobs on 16 GPUs each, elastic down to 8: with a batch of 4,096
    the second node about doubles the speed, with a batch of 16 it adds far less (the planner
    says how much). The reclaim shrinks the second, although without curves the first comes
    first."""
    acme_q, globex_q = research
    elastic = {"gpus": 16, "min_gpus": 8, "max_gpus": 16, "model_spec": parallel.spec("gpt3-1.3b")}
    large = make_workload(globex_q, "large-batch", global_batch=4096, **elastic)
    small = make_workload(globex_q, "small-batch", global_batch=16, **elastic)
    make_workload(globex_q, "filler", gpus=32)
    scheduling_cycle()
    make_workload(acme_q, "claimant", gpus=8)
    plan = scheduling_cycle()
    assert [s.workload_id for s in plan.shrinks] == [small.pk] != [large.pk]
    spec, h800 = parallelism.MODELS["gpt3-1.3b"], parallelism.GPUS["H800"]
    kept = [parallelism.best_plan(spec, h800, n, 16).tokens_per_s for n in (8, 16)]
    assert f"keeping {kept[0] / kept[1]:.0%} of its throughput" in plan.shrinks[0].reason


@pytest.fixture
def link(monkeypatch):
    """Set the region's link between data centers (GB/s), with the planner's memory cleared."""

    def set_to(gbps: float) -> None:
        monkeypatch.setattr(parallelism, "DC_LINK_GBPS", gbps)
        parallelism.best_plan.cache_clear()

    yield set_to
    parallelism.best_plan.cache_clear()


@pytest.mark.parametrize(
    ("gbps", "spans"),
    [(1600.0, True), (2.0, False)],
    ids=["a fast link costs little: it spans both", "a slow one would: it waits for one"],
)
def test_a_job_that_may_span_data_centers_does_when_the_planner_says_little_is_lost(
    acme_llm, link, gbps, spans
):
    """96 H800 GPUs exist only across dc1 (64) and dc2 (32)."""
    link(gbps)
    job = make_workload(
        acme_llm, "wide", gpus=96, topology="any", model_spec=parallel.spec("gpt3-13b"),
        global_batch=512,
    )  # fmt: skip
    acme_llm.quotas.update(nominal=96)  # quota is not what stops it
    plan = scheduling_cycle()
    job.refresh_from_db()
    if spans:
        assert [a.workload_id for a in plan.admissions] == [job.pk]
        record = job.parallel_plans.get()
        assert record.plan["datacenters"] == 2 and record.plan["dp"] % 2 == 0
        assert record.reason == "admitted on 96 GPUs in 2 data centers"
    else:
        assert not plan.admissions and not job.parallel_plans.exists()
        assert "one data center" in job.pending_reason


def test_an_elastic_job_with_a_model_starts_on_what_is_free_with_the_plan_for_it(research, globex):
    """32 of the 64 GPUs are taken: a job asking for 64, elastic down to 32, starts on the 32
    that are free, with the plan for 32."""
    _, globex_q = research
    make_workload(globex_q, "taken", gpus=32, simulated_duration_s=3600)
    scheduling_cycle()
    elastic = {"min_gpus": 32, "max_gpus": 64, "model_spec": parallel.spec("gpt3-13b")}
    job = make_workload(globex_q, "elastic", gpus=64, global_batch=512, **elastic)
    plan = scheduling_cycle()
    assert [sum(len(p.gpu_indices) for p in a.placements) for a in plan.admissions] == [32]
    job.refresh_from_db()
    assert job.events.last().reason == (
        "placed on 4 nodes, on 32 of its 64 GPUs (elastic: all that is free)"
    )
    assert job.parallel_plans.get().gpus == 32 == job.allocations.count()


def test_an_elastic_job_grows_back_when_the_gpus_free_up_and_books_only_what_it_held(
    research, globex
):
    """Started on 32 of its 64 GPUs; ten minutes later, just after a save, the other job ends
    and nothing waits: the next cycle grows it to 64 as a new attempt with the plan for 64.
    Its GPU-hours count the grown GPUs from the grow, not from its start."""
    _, globex_q = research
    taken = make_workload(globex_q, "taken", gpus=32, simulated_duration_s=3600)
    scheduling_cycle()
    elastic = {"min_gpus": 32, "max_gpus": 64, "model_spec": parallel.spec("gpt3-13b")}
    job = make_workload(globex_q, "elastic", gpus=64, global_batch=512, **elastic)
    scheduling_cycle()
    for node_id in set(job.allocations.values_list("node_id", flat=True)):
        lifecycle.mark_started_many([(job.pk, node_id, 0)])
    ten_minutes_ago = timezone.now() - timedelta(minutes=10)
    Workload.objects.filter(pk=job.pk).update(started_at=ten_minutes_ago)
    job.allocations.update(created_at=ten_minutes_ago)  # booked at its admission
    master = job.allocations.get(node_rank=0, gpu_index=0).node_id
    detail = {"step": 900, "kind": "async", "location": "/c/900", "size_bytes": 1}
    record_saved(job.pk, master, {**detail, "duration_s": 1.0})  # a save to resume from
    lifecycle.cancel(taken)

    plan = scheduling_cycle()
    assert [(g.workload_id, g.gpus) for g in plan.grows] == [(job.pk, 64)]
    job.refresh_from_db()
    assert (job.state, job.attempt, job.allocations.count()) == (State.RECOVERING, 1, 64)
    assert _plan_on(job)["gpus"] == 64
    record = job.parallel_plans.last()
    assert (record.gpus, record.attempt) == (64, 1)
    assert record.reason.startswith("grown from 32 to 64 GPUs, ")
    assert "% more throughput: they were free and no work waits for H800 GPUs" in record.reason
    assert sorted(job.allocations.values_list("node_rank", flat=True).distinct()) == list(range(8))

    lifecycle.cancel(job)
    booked = job.usage.get()
    assert booked.gpus == 64
    assert booked.gpu_hours == pytest.approx(32 * 10 / 60, rel=0.01)  # the new 32: ~0 h


def test_a_burst_of_new_jobs_with_models_is_planned_over_a_few_cycles(acme_llm, link):
    """Each snapshot asks the planner at most a budget of new questions (two per job that may
    span data centers); the rest wait in one data center until their turn."""
    link(1600.0)
    for batch in range(100, 160):
        make_workload(acme_llm, f"job-{batch}", gpus=96, topology="any", global_batch=batch,
                      model_spec=parallel.spec("gpt3-13b"))  # fmt: skip
    asked = []
    for _ in range(3):
        before = parallelism.best_plan.cache_info().misses
        build_snapshot()
        asked.append(parallelism.best_plan.cache_info().misses - before)
    assert all(n <= parallel.Budget().left + 2 for n in asked)
    assert sum(asked) == 120  # every job planned within three snapshots


WIDE = {"name": "wide", "layers": 2, "hidden": 51712, "heads": 64, "ffn": 4 * 51712,
        "vocab": 32000, "seq": 2048}  # fmt: skip


def test_a_size_no_layout_fits_clears_the_plan_rather_than_keep_a_stale_one(research, globex):
    """This model fits 16 and 32 H800 GPUs but no layout fits 24 (2 layers, TP 8 at most): a
    recovery that leaves 24 records that no plan fits, and the job is handed none."""
    _, globex_q = research
    body = {"min_gpus": 16, "max_gpus": 32, "model_spec": parallel.spec(WIDE), "global_batch": 64}
    job = make_workload(globex_q, "wide", gpus=32, **body)
    scheduling_cycle()
    assert _plan_on(job)["gpus"] == 32
    parallel.replan(job, 24, 1, "recovered onto 24 GPUs without the lost nodes")
    record = job.parallel_plans.last()
    assert (record.plan, str(record)) == ({}, "no layout fits 24 GPUs")
    assert record.reason.startswith("no layout of wide fits 24 H800 GPUs: recovered onto 24")
    node = job.allocations.first().node
    (assignment,) = desired_state(node)["assignments"]
    assert ENV_PARALLEL_PLAN not in assignment["env"]


def test_a_queue_may_let_its_jobs_use_any_data_center_by_default(research, charlie):
    _, globex_q = research
    globex_q.spans_datacenters = True
    globex_q.save()
    client = api_client(charlie)
    chosen = client.post("/api/v1/workloads/", JOB, format="json").json()
    told = client.post("/api/v1/workloads/", {**JOB, "topology": "pod"}, format="json").json()
    assert (chosen["topology"], told["topology"]) == ("any", "pod")


def test_a_grow_whose_newest_save_is_old_asks_for_a_save_and_grows_from_it(research, globex):
    """The same, but its newest save is two minutes old: the grow would redo two minutes, so
    the job is asked for a save instead (once, however many cycles offer the grow), and the
    cycle after the save grows it, losing nothing."""
    _, globex_q = research
    taken = make_workload(globex_q, "taken", gpus=32, simulated_duration_s=3600)
    scheduling_cycle()
    job = make_workload(globex_q, "elastic", gpus=64, min_gpus=32, max_gpus=64)
    scheduling_cycle()
    for node_id in set(job.allocations.values_list("node_id", flat=True)):
        lifecycle.mark_started_many([(job.pk, node_id, 0)])
    Workload.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=10))
    master = job.allocations.get(node_rank=0, gpu_index=0).node_id
    old = record_saved(job.pk, master, {"step": 900, "kind": "async", "location": "/c/900"})
    Checkpoint.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    lifecycle.cancel(taken)

    for _ in range(2):
        assert [g.workload_id for g in scheduling_cycle().grows] == [job.pk]  # offered
        job.refresh_from_db()
        assert (job.state, job.allocations.count()) == (State.RUNNING, 32)  # not taken
    asked = NodeCommand.objects.filter(workload=job, action="checkpoint")
    assert asked.count() == len({*job.allocations.values_list("node_id", flat=True)})
    assert asked.first().args["reason"].startswith("before growing: grown from 32 to 64 GPUs")

    record_saved(job.pk, master, {"step": 1020, "kind": "requested", "location": "/c/1020"})
    scheduling_cycle()
    job.refresh_from_db()
    assert (job.state, job.allocations.count()) == (State.RECOVERING, 64)
    grown = job.recoveries.get()
    assert (grown.outcome, grown.resume_step, grown.lost_s < 1) == ("grown", 1020, True)
