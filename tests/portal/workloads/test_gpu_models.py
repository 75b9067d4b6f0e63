"""A job may accept several GPU models, named or by family: the API resolves and checks them,
the cycle starts the job on the fastest with room (the planner's speeds where it names its
model, else its order), writes the model it runs on and says why in its timeline."""

import re

import pytest

from portal.cluster.models import GpuModel, Node
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Workload
from tests.builders import api_client, make_cluster, make_queue, make_workload

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "queue": "llm", "gpus": 8, "command": "python train.py"}


@pytest.fixture
def llm(acme):
    make_cluster()  # H800 in dc1 and dc2, H20 in dc2: the demo's families (both hopper)
    return make_queue(acme, "llm", h800=64, h20=32)


def submit(user, **fields):
    return api_client(user).post("/api/v1/workloads/", {**JOB, **fields}, format="json")


def test_a_family_means_its_models_fastest_first(llm, alice):
    response = submit(alice, gpu_models=["hopper"])
    assert response.status_code == 201, response.json()
    assert response.json()["gpu_models"] == ["H800", "H20"]
    assert response.json()["gpu_model"] == "H800"
    assert Workload.objects.get().accepts == ["H800", "H20"]


def test_one_model_keeps_nothing_extra(llm, alice):
    response = submit(alice, gpu_models=["H20"])
    assert response.status_code == 201
    assert response.json()["gpu_models"] == ["H20"]
    assert Workload.objects.get().accepts == []


def test_a_list_of_one_model_is_that_model_for_a_share_or_a_mig_instance(llm, alice):
    share = submit(alice, gpu_models=["H800"], gpus=0.25, gpu_memory_gb=20)
    assert share.status_code == 201, share.json()
    assert (share.json()["gpus"], share.json()["gpu_model"]) == (0.25, "H800")
    mig = submit(alice, name="mig", gpu_models=["H800"], gpus=1, mig="1g.10gb")
    assert mig.status_code == 201, mig.json()
    other = submit(alice, gpu_models=["H800"], gpu_model="H20", gpus=0.25)
    assert other.json()["errors"] == [
        {
            "field": "gpu_model",
            "reason": "Give gpu_model as the first of gpu_models, or leave it out.",
        }
    ]


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"gpu_models": ["B300"]}, "gpu_models", "Unknown GPU model or family B300."),
        (
            {"gpu_models": ["H20", "H800"], "gpu_model": "H800"},
            "gpu_model",
            "Give gpu_model as the first of gpu_models, or leave it out.",
        ),
        ({}, "gpu_model", "This field is required."),
        ({"gpu_models": []}, "gpu_models", "From 1 to 16 names; got 0."),
        (
            {"gpu_models": ["hopper"], "gpus": 0.25},
            "gpu_models",
            "A share of a GPU runs on one GPU model: give gpu_model, not gpu_models.",
        ),
    ],
    ids=["unknown", "gpu_model not the first", "neither given", "an empty list", "a share"],
)
def test_bad_model_lists_are_refused(llm, alice, fields, field, reason):
    response = submit(alice, **fields)
    assert response.status_code == 400
    assert {"field": field, "reason": reason} in response.json()["errors"]
    assert not Workload.objects.exists()


def test_a_named_model_the_queue_cannot_hold_is_refused_a_family_member_left_out(acme, alice):
    make_cluster()
    make_queue(acme, "llm", h800=64)  # no H20 quota, and no cohort to borrow from
    refused = submit(alice, gpu_models=["H800", "H20"])
    assert refused.status_code == 400
    assert refused.json()["errors"][0]["field"] == "gpus"
    taken = submit(alice, gpu_models=["hopper"])
    assert taken.status_code == 201
    assert taken.json()["gpu_models"] == ["H800"]


def test_the_memory_asked_leaves_out_a_family_member_with_less_and_refuses_a_named_one(llm, alice):
    """90 GB: the H20's 96 GB hold it, the H800's 80 do not (it was dropped for a job of
    several models, which then started on the H800 first)."""
    GpuModel.objects.filter(name="H800").update(memory_gb=80)
    GpuModel.objects.filter(name="H20").update(memory_gb=96)
    taken = submit(alice, gpus=1, gpu_models=["hopper"], gpu_memory_gb=90)
    assert taken.status_code == 201, taken.json()
    assert (taken.json()["gpu_model"], taken.json()["gpu_models"]) == ("H20", ["H20"])
    refused = submit(alice, gpus=1, gpu_models=["H800", "H20"], gpu_memory_gb=90)
    assert refused.status_code == 400
    assert refused.json()["errors"] == [
        {"field": "gpu_memory_gb", "reason": "A H800 GPU has 80 GB; 90 GB asked."}
    ]
    both = submit(alice, gpus=1, gpu_models=["H800", "H20"], gpu_memory_gb=64)
    assert both.status_code == 201 and both.json()["gpu_models"] == ["H800", "H20"]


def test_the_cycle_starts_it_on_a_model_with_room_and_says_why(llm, alice):
    Node.objects.filter(gpu_model__name="H800").update(connected=False)  # no H800 free
    job_id = submit(alice, gpu_models=["H800", "H20"]).json()["id"]
    scheduling_cycle()
    job = Workload.objects.get(pk=job_id)
    assert job.state == State.ADMITTED
    assert job.gpu_model.name == "H20"
    assert {a.node.gpu_model.name for a in job.allocations.select_related("node__gpu_model")} == {
        "H20"
    }
    event = job.events.get(to_state=State.ADMITTED)
    assert event.reason == (
        "placed on 1 node (GPU model H20: H800, listed before it, has no room now)"
    )
    # What it ran on is what the API now says; it still accepts both if it is requeued.
    shown = api_client(alice).get(f"/api/v1/workloads/{job_id}/").json()
    assert (shown["gpu_model"], shown["gpu_models"]) == ("H20", ["H800", "H20"])


def test_a_job_that_names_its_model_goes_where_the_planner_says_it_is_fastest(llm, alice):
    fields = {"gpu_models": ["H20", "H800"], "model": "gpt3-1.3b", "global_batch": 64}
    job_id = submit(alice, **fields).json()["id"]
    scheduling_cycle()
    job = Workload.objects.get(pk=job_id)
    assert job.gpu_model.name == "H800"
    reason = job.events.get(to_state=State.ADMITTED).reason
    assert reason.startswith("placed on 1 node (GPU model H800: the fastest of the GPU models")
    assert GpuModel.objects.get(name="H20").family == "hopper"


FORM = {"name": "form", "queue": "llm", "kind": "training", "gpus": "8", "priority": "0"}


def test_the_form_offers_other_models_and_previews_the_choice(llm, alice, client):
    Node.objects.filter(gpu_model__name="H800").update(connected=False)
    client.force_login(alice)
    page = client.get("/workloads/new/").content.decode()
    assert 'name="also" value="H20"' in page
    asked = {**FORM, "gpu_model": "H800", "also": ["H800", "H20"], "checkpoint_policy": "none"}
    preview = client.post("/workloads/new/", {**asked, "preview": "1"}).content.decode()
    assert "It would start in the next cycle, on 1 node." in preview
    assert "H20: H800, listed before it, has no room now" in preview
    assert "data-speeds" not in preview  # the planner knows nothing of it, nor its runs
    planned = {**asked, "model": "gpt3-1.3b", "global_batch": "64", "preview": "1"}
    preview = client.post("/workloads/new/", planned).content.decode()
    speeds = re.search(r"<span data-speeds>(.*?)</span>", preview, re.S).group(1)
    assert re.search(r"H800 ×\d+\.\d · H20 ×1\.0 \(predicted by the planner\)", speeds), speeds
    assert not Workload.objects.exists()
    client.post("/workloads/new/", asked)
    job = Workload.objects.get()
    assert (job.gpu_model.name, job.accepts) == ("H800", ["H800", "H20"])
    again = client.get(f"/workloads/new/?from={job.pk}").content.decode()
    assert 'value="H20" checked' in again


def test_the_form_offers_a_family_and_a_job_that_accepts_it_runs_on_its_models(llm, alice, client):
    client.force_login(alice)
    page = client.get("/workloads/new/").content.decode()
    assert 'name="also" value="hopper"' in page and "hopper family (H800, H20)" in page
    asked = {**FORM, "gpu_model": "H20", "also": ["hopper"], "checkpoint_policy": "none"}
    client.post("/workloads/new/", asked)
    assert Workload.objects.get().accepts == ["H20", "H800"]  # the one chosen first


def test_the_preview_says_when_the_job_would_start_on_each_model(llm, alice, client):
    """H800 nodes are all down: on H20 it would start in the next cycle; on H800 no estimate
    reaches a start (nothing there ever frees), so the page says it is later than the run
    looked. The API answers the same, per model in the submitter's order."""
    Node.objects.filter(gpu_model__name="H800").update(connected=False)
    fields = {"name": "either", "queue": "llm", "gpus": 8, "gpu_models": ["H800", "H20"]}
    models = api_client(alice).post("/api/v1/workloads/preview/", fields, format="json").json()
    models = models["models"]
    assert [(m["gpu_model"], m["now"]) for m in models] == [("H800", False), ("H20", True)]
    assert models[0]["start"] is None and models[0]["until"] and models[1]["start"]
    client.force_login(alice)
    asked = {**FORM, "gpu_model": "H800", "also": ["H800", "H20"], "checkpoint_policy": "none"}
    page = client.post("/workloads/new/", {**asked, "preview": "1"}).content.decode()
    rows = dict(re.findall(r'<tr data-model="(\w+)">(.*?)</tr>', page, re.S))
    assert list(rows) == ["H800", "H20"]
    assert "later than" in rows["H800"] and "in the next cycle" in rows["H20"]
    assert not Workload.objects.exists()


def test_the_choice_reads_in_chinese():
    from django.utils import translation

    from portal.workloads.phrasebook import translate

    english = "placed on 1 node (GPU model H20: H800, listed before it, has no room now)"
    with translation.override("zh-hans"):
        said = translate(english)
    assert said == "已放置到 1 个节点（GPU 型号 H20：排在它前面的 H800 现在没有空位）"


def test_fair_sharing_weighs_each_model_that_has_a_worth(llm):
    from portal.quotas.engine import worth
    from portal.workloads.cycle import build_snapshot

    assert dict(worth()) == {"H800": 989.0, "H20": 148.0}  # the planner's dense BF16 TFLOPS
    GpuModel.objects.filter(name="H20").update(worth=200)
    assert dict(build_snapshot().worth) == {"H800": 989.0, "H20": 200.0}
    GpuModel.objects.create(name="MLU590", memory_gb=64)  # unknown to the planner, no worth
    assert dict(worth()) == {"H800": 989.0, "H20": 200.0}  # left out: the engine counts it 1


def test_a_model_without_a_worth_leaves_the_others_weighed(acme, alice):
    """Two queues borrow from a lender: `big` 16 H800s, `small` all 32 H20s; both want the last
    free H800 node. Counted per model, `small` has borrowed all the H20s the cohort lends, more
    than `big` will have of H800s, so `big` would go first. Weighed by worth, `small` has
    borrowed less (32 x 148 + 8 x 989 against 24 x 989) and goes first, though the fleet also
    has MLU590s, a model with no worth."""
    make_cluster({"dc1": {"h800": ("H800", 1), "h20": ("H20", 1), "mlu": ("MLU590", 1)}})
    lender = make_queue(acme, "lender", cohort="lab", h800=32, h20=32, mlu590=32)
    big = make_queue(acme, "big", cohort="lab", h800=0, h20=0)
    small = make_queue(acme, "small", cohort="lab", h800=0, h20=0)
    make_workload(lender, "own", gpus=8)
    make_workload(big, "borrowed", gpus=16)
    make_workload(small, "borrowed", gpus=32, model="H20")
    scheduling_cycle()
    assert set(Workload.objects.values_list("state", flat=True)) == {State.ADMITTED}
    make_workload(big, "more", gpus=8)
    make_workload(small, "more", gpus=8)
    scheduling_cycle()
    admitted = Workload.objects.filter(name="more", state=State.ADMITTED)
    assert [w.queue.name for w in admitted] == ["small"]


def test_pages_show_the_models_it_accepts(llm, alice, client):
    Node.objects.filter(gpu_model__name="H20").update(connected=False)
    Node.objects.filter(gpu_model__name="H800").update(connected=False)
    job_id = submit(alice, gpu_models=["H800", "H20"]).json()["id"]
    client.force_login(alice)
    listed = client.get("/workloads/").content.decode()
    assert "8 × H800 | H20" in listed  # waiting: every model it accepts
    page = client.get(f"/workloads/{job_id}/").content.decode()
    assert "(accepts H800, H20)" in page
