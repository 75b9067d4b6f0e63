"""Calibrated by the fleet: a job's step reports (heartbeats) are timed into seconds per
iteration on its plan, and the next plan of its model family on the same GPUs is predicted
with the ratio of measured to predicted; its page shows both."""

import json
import time

import pytest
from django.urls import reverse

from portal.agents import progress
from portal.cluster.summary import TELEMETRY
from portal.workloads import calibration as fleet
from portal.workloads import lifecycle, parallel
from portal.workloads.cycle import scheduling_cycle
from scheduler.parallelism import PREDICTION_ERROR
from tests.builders import make_workload

BATCH = 64


def _job(queue, name, gpus=16, model="llama3-8b"):
    return make_workload(
        queue,
        name,
        gpus=gpus,
        checkpoint_policy="none",
        model_spec=parallel.spec(model),
        global_batch=BATCH,
    )


def _start(workload) -> list[int]:
    """Place the job and let every node say it runs; its nodes."""
    scheduling_cycle()
    nodes = sorted(set(workload.allocations.values_list("node_id", flat=True)))
    lifecycle.mark_started_many([(workload.pk, node_id, 0) for node_id in nodes])
    return nodes


def _predicted(workload) -> float:
    return workload.parallel_plans.last().plan["predicted"]["iteration_s"]


def _report(redis, workload, nodes, step_s: float, seconds: float, start: float):
    """The job's nodes report a step every `step_s` for `seconds`, the detector looking at
    their heartbeats every 10 s (as the beat does)."""
    for elapsed in range(0, int(seconds) + 1, 10):
        step = int(elapsed / step_s)
        item = {"workload_id": workload.pk, "state": "running", "attempt": 0, "progress": step}
        sample = {"ts": time.time(), "gpus": [], "workloads": [item]}
        for node_id in nodes:
            redis.hset(TELEMETRY, node_id, json.dumps(sample))
        assert progress.detect(now=start + elapsed) == []


def test_a_job_20_percent_slower_than_predicted_moves_its_familys_next_prediction(
    acme_llm, clean_redis, client, alice
):
    first = _job(acme_llm, "first")
    nodes = _start(first)
    predicted = _predicted(first)
    assert "calibration" not in first.parallel_plans.last().plan  # nothing measured yet

    _report(clean_redis, first, nodes, 1.2 * predicted, seconds=600, start=time.time())

    plan = first.parallel_plans.last()
    assert plan.measured_s == pytest.approx(1.2 * predicted, rel=0.03)
    second = _job(acme_llm, "second")
    _start(second)
    record = second.parallel_plans.last().plan["calibration"]
    assert record["runs"] == 1 and record["scale"] == 16
    assert record["uncalibrated_s"] == pytest.approx(predicted, rel=1e-3)
    # Towards the measurement, not all the way on one run.
    assert predicted < _predicted(second) < 1.2 * predicted

    client.force_login(alice)
    page = client.get(reverse("workload-detail", args=[first.pk])).content.decode()
    facts = page[page.index("data-iteration") : page.index("</dd>", page.index("data-iteration"))]
    assert f"{predicted:.2f} predicted" in facts and f"{plan.measured_s:.2f} measured" in facts
    assert f"(± {PREDICTION_ERROR * 100:g} %)" in facts  # the planner's error, as measured
    history = page[page.index('id="plan-history"') :]
    assert f"<td>{plan.measured_s:.2f}</td>" in history
    page = client.get(reverse("workload-detail", args=[second.pk])).content.decode()
    assert f"calibrated ×{record['factor']:.2f} from 1 run<" in page


def test_the_start_of_a_run_and_the_time_before_it_are_not_measured(acme_llm, clean_redis):
    """Five minutes at step 0 (loading) before the steps come: only the steps' pace counts."""
    job = _job(acme_llm, "slow-start")
    nodes = _start(job)
    predicted, start = _predicted(job), time.time()
    _report(clean_redis, job, nodes, 1e9, seconds=60, start=start - 300)  # step 0 all along
    _report(clean_redis, job, nodes, predicted, seconds=300, start=start)
    assert job.parallel_plans.last().measured_s == pytest.approx(predicted, rel=0.05)


def _measured(workload, ratio: float):
    """The workload measured `ratio` times its plan's prediction (what `progress.detect`
    records after two minutes of steps)."""
    fleet.record({workload.pk: ratio * _predicted(workload)})


@pytest.mark.parametrize(
    "model,gpus,gpu,expected_scale",
    [
        pytest.param("llama3-8b", 16, "H800", 16, id="the same family, GPU and scale: its own"),
        pytest.param("llama3-8b", 8, "H800", 0, id="another scale: the family and GPU's"),
        pytest.param("llama3-70b", 64, "H800", 0, id="another size of the family: its factor"),
        pytest.param("gpt3-13b", 16, "H800", None, id="another family: none"),
        pytest.param("llama3-8b", 16, "H20", None, id="another GPU: none"),
    ],
)
def test_a_prediction_falls_back_to_wider_buckets(acme_llm, model, gpus, gpu, expected_scale):
    measured = _job(acme_llm, "measured")
    _start(measured)
    _measured(measured, 1.5)
    job = make_workload(
        acme_llm, "next", gpus, gpu, model_spec=parallel.spec(model), global_batch=BATCH
    )
    plan = parallel.replan(job, gpus, 0, "admitted").plan
    uncalibrated = parallel.best(job.model_spec, gpu, gpus, BATCH).iteration_s
    if expected_scale is None:
        assert "calibration" not in plan
        assert plan["predicted"]["iteration_s"] == round(uncalibrated, 4)
    else:
        assert plan["calibration"]["scale"] == expected_scale
        assert plan["predicted"]["iteration_s"] > uncalibrated


def test_a_looks_measurements_are_written_at_once(acme_llm, django_assert_max_num_queries):
    jobs = [_job(acme_llm, f"job{i}") for i in range(3)]
    for job in jobs:
        parallel.replan(job, 16, 0, "admitted", factors={})
    # Their runs, their paces, find the plans, read them, write them.
    with django_assert_max_num_queries(5):
        fleet.record({job.pk: 10.0 + job.pk for job in jobs})
    assert [j.parallel_plans.last().measured_s for j in jobs] == [10.0 + j.pk for j in jobs]
