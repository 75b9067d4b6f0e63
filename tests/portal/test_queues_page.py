"""The queues page: each queue's quota against what it holds, borrows, lends and waits for, and
for operators the cohort tree with the engine's fair shares; tenants never see another's."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.cluster.models import GpuModel
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import UsageRecord
from tests.builders import make_queue, make_workload


@pytest.fixture
def research(cluster, acme, globex, bob):
    """Cohort research: Acme's cv (8 H800, 4 guaranteed) borrows 16 for a 24-GPU job, lent by
    Acme's lender and Globex's vision (32 idle each); a 200-GPU job of cv's waits."""
    cv = make_queue(acme, "cv", cohort="research", h800=8)
    cv.quotas.update(guarantee=4)
    make_queue(acme, "lender", cohort="research", h800=32)
    make_queue(globex, "vision", cohort="research", h800=32)
    running = make_workload(cv, "borrower", gpus=24, submitted_by=bob)
    make_workload(cv, "too-big", gpus=200, submitted_by=bob)
    scheduling_cycle()
    running.refresh_from_db()
    assert running.state in (State.ADMITTED, State.RUNNING)
    ended = timezone.now() - timedelta(minutes=5)
    UsageRecord.objects.create(
        tenant=acme, workload=running, gpu_model=running.gpu_model, gpus=8,
        started_at=ended - timedelta(hours=2), ended_at=ended, gpu_hours=16,
    )  # fmt: skip
    return cv


def _row(page: str, attribute: str, key: str) -> str:
    return re.search(rf'<tr[^>]* {attribute}="{re.escape(key)}">.*?</tr>', page, re.S).group(0)


def test_a_member_sees_borrowed_lent_waiting_and_gpu_hours_of_their_queues_only(
    research, victor, client
):
    client.force_login(victor)
    page = client.get("/queues/").content.decode()
    cv = _row(page, "data-queue", f"{research.pk}/H800")
    assert "24 in use · guarantee 4 · nominal 8 · borrowed 16 · lent 0" in cv
    assert "1 job, 200 GPUs" in cv and "oldest since" in cv
    assert cv.count('class="seg ') == 4  # guaranteed, nominal, borrowed, waiting
    assert "16.0" in cv  # GPU-hours this week and month
    lender = re.search(r'<tr data-queue="\d+/H800"><td>lender.*?</tr>', page, re.S).group(0)
    assert "0 in use · guarantee 0 · nominal 32 · borrowed 0 · lent 8" in lender  # half of 16
    assert "vision" not in page and "Globex" not in page and "globex" not in page
    assert 'id="cohort-tree"' not in page  # the tree is the operators'


def test_a_job_that_accepts_several_models_is_named_on_the_rows_of_the_others(
    cluster, acme, victor, client
):
    """Counted as waiting under the model it was submitted for, and named on the row of each
    other model it accepts, so that neither row hides it nor the queue counts it twice."""
    llm = make_queue(acme, "llm", h800=0, h20=0)
    make_workload(llm, "either", gpus=64, accepts=["H800", "H20"])
    make_workload(llm, "only", gpus=8, model="H20")
    client.force_login(victor)
    page = client.get("/queues/").content.decode()
    h800, h20 = (_row(page, "data-queue", f"{llm.pk}/{model}") for model in ("H800", "H20"))
    assert "1 job, 64 GPUs" in h800 and "also run here" not in h800
    assert "1 job, 8 GPUs" in h20
    assert "and 1 job of 64 GPUs submitted for another model that would also run here" in h20


def test_waiting_shares_and_mig_jobs_ask_for_their_share_of_a_gpu(cluster, acme, victor, client):
    """Two quarter-GPU jobs and a 1g.10gb MIG job wait: 0.5 and 0.14 of a GPU (the MIG
    profile's charge: a seventh of the compute), not three GPUs."""
    llm = make_queue(acme, "llm", h800=0)
    for name in ("a", "b"):
        make_workload(llm, name, gpus=1, slices=2)
    make_workload(llm, "mig", gpus=1, mig="1g.10gb")
    client.force_login(victor)
    row = _row(client.get("/queues/").content.decode(), "data-queue", f"{llm.pk}/H800")
    assert "3 jobs, 0.64 GPUs" in row


def test_operators_see_every_queue_and_the_cohort_tree_with_fair_shares(research, operator, client):
    client.force_login(operator)
    page = client.get("/queues/").content.decode()
    assert "globex/vision" in page
    cohort = _row(page, "data-tree", "research")
    assert "<strong>research</strong>" in cohort and ">24<" in cohort and ">16<" in cohort
    cv = _row(page, "data-tree", "acme/cv")
    assert "padding-left: 2em" in cv and "0.333" in cv  # one weight of three
    # 16 borrowed of the 68 its tree can lend (every quota above its guarantee), weight 1.
    assert cv.endswith("<td>0.235</td></tr>")
    vision = _row(page, "data-tree", "globex/vision")
    assert vision.endswith("<td>0.000</td></tr>")


def test_operators_are_told_which_gpu_models_count_1_a_gpu_for_want_of_a_worth(
    research, operator, victor, client
):
    client.force_login(operator)
    assert "GPU models without a worth" not in client.get("/queues/").content.decode()
    GpuModel.objects.create(name="MLU590", memory_gb=64)  # unknown to the planner, no worth
    page = client.get("/queues/").content.decode()
    assert "GPU models without a worth: MLU590. In fair shares each of their GPUs counts as" in page
    assert "a model with neither counts as the median of the others" in page
    client.force_login(victor)
    assert "MLU590" not in client.get("/queues/").content.decode()  # the tree is the operators'
    GpuModel.objects.update(worth=1.0)
    client.force_login(operator)
    assert "GPU models without a worth" not in client.get("/queues/").content.decode()


def test_the_page_costs_the_same_queries_for_more_queues_and_refuses_outsiders(
    research, acme, operator, client
):
    client.force_login(operator)
    with CaptureQueriesContext(connection) as few:
        client.get("/queues/")
    for i in range(10):
        queue = make_queue(acme, f"more-{i}", cohort=f"c{i % 3}", h800=8, h20=8)
        make_workload(queue, f"w{i}", gpus=8)
    scheduling_cycle()
    with CaptureQueriesContext(connection) as more:
        assert client.get("/queues/").status_code == 200
    assert len(more.captured_queries) == len(few.captured_queries) <= 20
    client.force_login(User.objects.create_user("nobody", password="pw-nobody"))
    assert client.get("/queues/").status_code == 403


def test_operators_filter_queues_by_tenant_and_page_through_them_while_the_tree_keeps_all(
    research, acme, operator, client
):
    for i in range(55):
        make_queue(acme, f"q{i:02}", h800=8)
    client.force_login(operator)
    first = client.get("/queues/").content.decode()
    table = first.split('id="cohort-tree"')[0]
    assert table.count("<tr data-queue=") == 50  # 58 queues, 50 a page
    assert "58 queues · page 1 of 2" in first and 'rel="next"' in first
    assert first.count('<tr class="tree-queue"') == 58  # the tree shows every queue
    second = client.get("/queues/?page=2").content.decode().split('id="cohort-tree"')[0]
    assert second.count("<tr data-queue=") == 8
    globex = client.get("/queues/?tenant=globex").content.decode().split('id="cohort-tree"')[0]
    assert globex.count("<tr data-queue=") == 1 and "globex/vision" in globex
    assert 'value="globex" selected' in globex
