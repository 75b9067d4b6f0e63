"""The submit form's and the API's own reasons for refusing a job are said in the reader's
language, as DRF's are on the same page; in English they read as they always did."""

import pytest

from portal.cluster.models import GpuModel
from portal.workloads.models import Workload
from tests.builders import api_client

FORM = {"name": "form", "queue": "llm", "kind": "training", "gpus": "1", "priority": "0",
        "gpu_model": "H800", "checkpoint_policy": "none"}  # fmt: skip
JOB = {"name": "notebook", "queue": "llm", "gpu_model": "H800", "gpus": 1}
REFUSALS = pytest.mark.parametrize(
    ("change", "field", "english", "chinese"),
    [
        (
            {"gpus": 1.5},
            "gpus",
            "A share of a GPU is below 1, and more than one GPU is a whole number of them (a gang "
            "takes whole GPUs): 1.5 is neither.",
            "GPU 份额应小于 1，多于一块 GPU 时应为整数块（成组作业占用整块 GPU）：1.5 两者都不是。",
        ),
        (
            {"mig": "2g.40gb"},
            "mig",
            "H800 GPUs have MIG profiles 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb; "
            "not 2g.40gb.",
            "H800 GPU 的 MIG 配置有 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb；"
            "没有 2g.40gb。",
        ),
        (
            {"gpus": 0.5, "gpu_memory_gb": 96},
            "gpu_memory_gb",
            "A H800 GPU has 80 GB; 96 GB asked.",
            "一块 H800 GPU 有 80 GB 显存；申请了 96 GB。",
        ),
    ],
    ids=["a fraction above one", "a profile the model lacks", "more memory than the GPU has"],
)


@pytest.fixture
def h800_80gb(db):
    GpuModel.objects.filter(name="H800").update(memory_gb=80)


@REFUSALS
def test_the_form_says_why_in_chinese(
    acme_llm, alice, client, h800_80gb, change, field, english, chinese
):
    client.force_login(alice)
    page = client.post("/workloads/new/", {**FORM, **change}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    text = page.content.decode()
    assert chinese in text and english not in text
    assert not Workload.objects.exists()


@REFUSALS
def test_the_api_says_why_in_the_language_asked_for(
    acme_llm, bob, h800_80gb, change, field, english, chinese
):
    client = api_client(bob)
    response = client.post("/api/v1/workloads/", {**JOB, **change}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": field, "reason": english}]
    response = client.post(
        "/api/v1/workloads/", {**JOB, **change}, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.json()["errors"] == [{"field": field, "reason": chinese}]


def test_what_is_wrong_with_a_model_spec_is_said_in_chinese_too(acme_llm, bob):
    """The planner's reasons are written in `scheduler/` (no Django there): phrases the portal
    renders in the reader's language."""
    spec = {"layers": 2, "hidden": 100, "heads": 3, "ffn": 400, "vocab": 1000, "seq": 128}
    job = {**JOB, "kind": "training", "model": spec}
    client = api_client(bob)
    english = client.post("/api/v1/workloads/", job, format="json").json()["errors"]
    assert english == [{"field": "model.heads", "reason": "must divide the hidden size"}]
    chinese = client.post(
        "/api/v1/workloads/", job, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).json()["errors"]
    assert chinese == [{"field": "model.heads", "reason": "须能整除隐藏层大小"}]
