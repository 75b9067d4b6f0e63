"""Bad input gets a 400 naming the field and the reason, and writes nothing."""

import pytest
from django.test import Client

from portal.quotas.models import QueueQuota, QuotaRequest
from portal.workloads.models import Workload
from tests.builders import api_client, make_queue

QUOTA_OK = {
    "queue": "llm",
    "gpu_model": "H800",
    "region": "cn-east",
    "count": 16,
    "reason": "pre-training",
}


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"count": -8}, "count", "Ensure this value is greater than or equal to 1."),
        ({"count": 0}, "count", "Ensure this value is greater than or equal to 1."),
        ({"gpu_model": "B300"}, "gpu_model", "Unknown GPU model or family B300."),
        ({"region": "mars-1"}, "region", "Unknown region mars-1."),
        ({"queue": "nope"}, "queue", "Your tenant has no queue nope."),
        ({"gpu_model": "A100"}, "gpu_model", "Region cn-east has no A100 GPUs."),
        ({"count": 10_000}, "count", "10000 H800 GPUs exceeds the 96 the region cn-east has."),
        ({"reason": ""}, "reason", "This field may not be blank."),
    ],
    ids=[
        "a negative count",
        "a zero count",
        "an unknown GPU model",
        "an unknown region",
        "a queue the tenant does not have",
        "a region without that model",
        "more than the cluster's capacity",
        "no reason given",
    ],
)
def test_bad_quota_requests_are_refused(acme_llm, alice, change, field, reason):
    from portal.cluster.models import GpuModel

    GpuModel.objects.create(name="A100", memory_gb=80)  # known, but no node has it
    response = api_client(alice).post(
        "/api/v1/quota-requests/", {**QUOTA_OK, **change}, format="json"
    )
    assert response.status_code == 400
    assert {"field": field, "reason": reason} in response.json()["errors"]
    assert not QuotaRequest.objects.exists()


def test_a_queue_in_another_region_is_refused(acme_llm, alice):
    from portal.cluster.models import Region

    Region.objects.create(name="cn-north")
    response = api_client(alice).post(
        "/api/v1/quota-requests/", {**QUOTA_OK, "region": "cn-north"}, format="json"
    )
    assert response.json()["errors"] == [
        {"field": "region", "reason": "Queue llm is in region cn-east, not cn-north."}
    ]


WORKLOAD_OK = {"name": "pretrain", "queue": "llm", "gpu_model": "H800", "gpus": 16}


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            {"gpus": 128},
            "gpus",
            "Queue llm can never hold 128 H800 GPUs: its quota and what its "
            "cohort can lend come to 64. Request more quota first.",
        ),
        (
            {"gpus": 12},
            "gpus",
            "Jobs larger than one node take whole nodes: ask for a multiple of 8.",
        ),
        ({"gpus": 0}, "gpus", "Ensure this value is greater than or equal to 0.01."),
        ({"gpu_model": "X9"}, "gpu_model", "Unknown GPU model X9."),
        ({"min_gpus": 32}, "min_gpus", "Need min_gpus <= gpus <= max_gpus; got 32 <= 16 <= 16."),
        ({"max_gpus": 0}, "min_gpus", "Need min_gpus <= gpus <= max_gpus; got 16 <= 16 <= 0."),
        ({"min_gpus": 0}, "min_gpus", "Need min_gpus <= gpus <= max_gpus; got 0 <= 16 <= 16."),
        (
            {"max_gpus": 2**63 - 1},  # was stored on SQLite
            "max_gpus",
            "Ensure this value is less than or equal to 100000.",
        ),
        ({"kind": "mining"}, "kind", '"mining" is not a valid choice.'),
        ({"env": ["A=1"]}, "env", "Must be an object of variable names to values."),
        ({"name": ""}, "name", "This field may not be blank."),
        (
            {"simulated_duration_s": -1},
            "simulated_duration_s",
            "Ensure this value is greater than or equal to 0.",
        ),
        (
            {"command": "x" * (1 << 20)},
            "command",
            "Ensure this field has no more than 65536 characters.",
        ),
        ({"time_limit_s": 0}, "time_limit_s", "Ensure this value is greater than or equal to 1."),
        (
            {"env": {f"V{i}": "1" for i in range(300)}},
            "env",
            "At most 256 variables; got 300.",
        ),
        (
            {"env": {"BIG": "x" * 70_000}},
            "env",
            "Names and values take 70,003 characters; at most 65,536.",
        ),
        (
            {"env": {"1X": "y"}},
            "env",
            "'1X' is not a variable name (letters, digits and _, not first a digit, up to 128).",
        ),
        ({"env": {"A": {"b": 1}}}, "env", "A: a value is a string or a number."),
        (
            {"env": {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/elsewhere"}},
            "env",
            "CUDA_MPS_PIPE_DIRECTORY is set by the node's agent (the GPUs assigned, a share's MPS "
            "limits), not by a job.",
        ),
        (
            {"command": "x" * 60_000, "env": {"NOTE": "中" * 30_000}},  # 6 bytes each, escaped
            "env",
            "The command and environment take 240,032 bytes as sent to the node (a character "
            "beyond ASCII takes up to six); at most 229,376.",
        ),
    ],
    ids=[
        "more GPUs than the queue could ever get",
        "a partial node for a multi-node job",
        "zero GPUs",
        "an unknown GPU model",
        "an elastic minimum above the size",
        "an elastic maximum of zero",
        "an elastic minimum of zero",
        "an elastic maximum beyond any cluster",
        "an unknown kind",
        "an env that is not an object",
        "no name",
        "a negative simulated duration",
        "a command of a megabyte",
        "a zero time limit",
        "too many environment variables",
        "an environment too large",
        "a variable name that is not one",
        "a variable whose value is an object",
        "a variable the node's agent sets",
        "a command and environment that would not fit in an assignment",
    ],
)
def test_bad_workloads_are_refused(acme_llm, bob, change, field, reason):
    response = api_client(bob).post("/api/v1/workloads/", {**WORKLOAD_OK, **change}, format="json")
    assert response.status_code == 400
    assert {"field": field, "reason": reason} in response.json()["errors"]
    assert not Workload.objects.exists()


def test_a_cohort_raises_what_a_queue_could_ever_get(acme_llm, bob, globex):
    from portal.quotas.models import Cohort

    cohort = Cohort.objects.create(name="research")
    acme_llm.cohort = cohort
    acme_llm.save()
    make_queue(globex, "train", cohort="research", h800=32)
    QueueQuota.objects.filter(queue=acme_llm).update(borrowing_limit=16)
    client = api_client(bob)
    assert (
        client.post("/api/v1/workloads/", {**WORKLOAD_OK, "gpus": 80}, format="json").status_code
        == 201
    )
    refused = client.post("/api/v1/workloads/", {**WORKLOAD_OK, "gpus": 88}, format="json")
    assert refused.status_code == 400
    assert "come to 80" in refused.json()["errors"][0]["reason"]


@pytest.mark.parametrize(
    ("path", "body", "takes"),
    [
        ("/api/v1/workloads/", {**WORKLOAD_OK, "priorty": 200}, "priority"),
        ("/api/v1/quota-requests/", {**QUOTA_OK, "priorty": 200}, "count"),
        ("/api/v1/services/", {"name": "chat", "queue": "llm", "priorty": 200}, "priority"),
    ],
    ids=["a job", "a quota request", "a service"],
)
def test_a_field_the_endpoint_does_not_have_is_named_not_dropped(
    acme_llm, alice, path, body, takes
):
    response = api_client(alice).post(path, body, format="json")
    assert response.status_code == 400
    [error] = [e for e in response.json()["errors"] if e["field"] == "priorty"]
    assert error["reason"].startswith("No such field. The fields are: ")
    assert takes in error["reason"] and "state" not in error["reason"]  # what it takes
    assert not Workload.objects.exists() and not QuotaRequest.objects.exists()


def test_the_schema_says_a_body_takes_no_other_field(acme_llm, alice):
    """A client generated from the schema knows an unknown field is refused: each body's
    object is closed. Answers stay open (a field added later breaks no client)."""
    schema = api_client(alice).get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    for path, method in [
        ("/api/v1/workloads/", "post"),
        ("/api/v1/quota-requests/", "post"),
        ("/api/v1/services/{id}/", "patch"),
        ("/api/v1/budgets/{id}/", "put"),
        ("/api/v1/nodes/{id}/health/", "post"),
        ("/api/v1/quota-requests/{id}/approve/", "post"),
    ]:
        body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]
        component = components[body["schema"]["$ref"].rsplit("/", 1)[-1]]
        assert component["additionalProperties"] is False, (method, path)
    answer = schema["paths"]["/api/v1/workloads/"]["post"]["responses"]["201"]["content"]
    answered = components[answer["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert "additionalProperties" not in answered and "state" in answered["properties"]
    assert "state" not in components["WorkloadRequest"]["properties"]  # answers only
    described = [c.get("description", "") for c in components.values()]
    assert not any("refuses a body" in text for text in described)  # the mixin's own words


def test_a_form_posted_to_the_api_keeps_its_csrf_token(acme_llm, alice):
    """The browsable API's forms post their CSRF token with the fields: not a field, not
    refused."""
    browser = Client(enforce_csrf_checks=False)
    browser.force_login(alice)
    form = {**QUOTA_OK, "csrfmiddlewaretoken": "token"}
    answer = browser.post("/api/v1/quota-requests/", form)
    assert answer.status_code == 201, answer.content
    assert QuotaRequest.objects.get().count == 16


def test_what_a_get_gave_may_be_sent_back(acme_llm, bob):
    """Fields the API only reads out (id, state, ...) are ignored in a body, so that a job
    read back and sent again is a new submission."""
    client = api_client(bob)
    first = client.post("/api/v1/workloads/", WORKLOAD_OK, format="json").json()
    again = client.post("/api/v1/workloads/", {**first, "name": "again"}, format="json")
    assert again.status_code == 201, again.json()
    assert again.json()["id"] != first["id"] and again.json()["state"] == "pending"


def test_malformed_json_is_a_clear_error(acme_llm, bob):
    response = api_client(bob).post(
        "/api/v1/workloads/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["reason"].startswith("JSON parse error")


def test_the_browser_form_shows_the_same_errors(acme_llm, bob, client):
    client.force_login(bob)
    page = client.post("/workloads/new/", {**WORKLOAD_OK, "gpus": 12}).content.decode()
    assert "ask for a multiple of 8" in page
    assert not Workload.objects.exists()


def test_the_form_sets_a_checkpoint_interval_and_a_preemption_grace(acme_llm, bob, client):
    client.force_login(bob)
    assert 'name="checkpoint_interval_s"' in client.get("/workloads/new/").content.decode()
    form = {**WORKLOAD_OK, "checkpoint_interval_s": "900", "preemption_grace_s": "30"}
    assert client.post("/workloads/new/", form).status_code == 302
    workload = Workload.objects.get()
    assert (workload.checkpoint_interval_s, workload.preemption_grace_s) == (900, 30)
    page = client.post("/workloads/new/", {**form, "name": "b", "preemption_grace_s": "9999"})
    assert "less than or equal to 3600" in page.content.decode()


def test_json_nested_too_deep_is_a_400_on_every_endpoint(acme_llm, alice):
    deep = "[" * 1000 + "]" * 1000
    client = api_client(alice)
    for url in ["/api/v1/quota-requests/", "/api/v1/enrol/"]:
        response = client.generic("POST", url, deep, content_type="application/json")
        assert response.status_code == 400, url
        (error,) = response.json()["errors"]
        assert error["field"] is None and "nested more than 32 deep" in error["reason"]
    assert not QuotaRequest.objects.exists()


@pytest.mark.parametrize(
    ("query", "status", "count"),
    [
        ({"limit": str(2**63)}, 200, 1),
        ({"limit": str(2**64 + 5)}, 200, 1),
        ({"offset": str(2**63)}, 400, None),
        ({"limit": "abc"}, 200, 1),
    ],
    ids=["limit 2^63", "limit over 2^64", "offset 2^63", "a limit that is no number"],
)
def test_huge_pagination_values_are_bounded_not_a_500(acme_llm, alice, query, status, count):
    response = api_client(alice).get("/api/v1/queues/", query)
    assert response.status_code == status
    if status == 200:
        assert len(response.json()["results"]) == count
    else:
        assert response.json()["errors"] == [
            {"field": "offset", "reason": "Ensure this value is less than or equal to 1000000000."}
        ]


def test_a_page_holds_at_most_the_largest_page(acme_llm, alice, monkeypatch):
    from portal.core.limits import Pagination

    monkeypatch.setattr(Pagination, "max_limit", 2)  # rather than making 501 queues
    for i in range(3):
        make_queue(acme_llm.tenant, f"extra{i}")
    page = api_client(alice).get("/api/v1/queues/", {"limit": "10"}).json()
    assert (page["count"], len(page["results"])) == (4, 2)


@pytest.mark.servers  # PostgreSQL refuses a NUL in a text column where SQLite stores it
def test_what_the_fuzzer_found_is_a_clear_answer_not_a_server_error(acme_llm, alice, bob):
    api = api_client(bob)
    job = {"name": "x", "queue": "llm", "gpu_model": "H8\x0000", "gpus": 8}
    answer = api.post("/api/v1/workloads/", job, format="json")
    assert answer.status_code == 400  # a NUL in a name: no such GPU model, not a 500
    assert answer.json()["errors"] == [{"field": "gpu_model", "reason": "Unknown GPU model H800."}]
    queue = api.post("/api/v1/workloads/", {**job, "gpu_model": "H800", "queue": "l\x00lm"})
    assert queue.status_code == 400
    accepts = api.post("/api/v1/workloads/", {**job, "gpu_model": ["H800", "\x00"]}, format="json")
    assert accepts.json()["errors"][0]["field"] == "gpu_model"
    quota = {**QUOTA_OK, "gpu_model": "\x00hopper"}
    refused = api_client(alice).post("/api/v1/quota-requests/", quota, format="json")
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "gpu_model"
    assert not QuotaRequest.objects.exists()
    # An offset Python takes and PostgreSQL would not: compared in UTC.
    assert api.get("/api/v1/faults/", {"since": "2026-12-01T10:00:00+19:09"}).status_code == 200
    assert api.options("/api/v1/usage/?format=csv").status_code == 200
    missing = api.get("/api/v1/nodes/0.5/")  # no route matches: still the API's shape
    assert missing.status_code == 404 and missing.json()["errors"][0]["field"] is None


def test_a_body_over_the_bound_is_a_413_in_the_apis_shape(acme_llm, alice, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = '{"reason": "' + "x" * 2000 + '"}'
    client = api_client(alice)
    for url in ["/api/v1/quota-requests/", "/api/v1/enrol/"]:
        response = client.generic("POST", url, body, content_type="application/json")
        assert response.status_code == 413, url
        assert response.json()["errors"] == [
            {"field": None, "reason": "The body is over the 1000 bytes a request may send."}
        ]
    assert not QuotaRequest.objects.exists()
    paths = client.get("/api/schema/?format=json").json()["paths"]
    assert "413" in paths["/api/v1/quota-requests/"]["post"]["responses"]
    assert "413" not in paths["/api/v1/quota-requests/"]["get"]["responses"]


def test_integer_bounds_are_postgresqls_on_every_database(acme_llm, operator):
    from django.db.backends.base.operations import BaseDatabaseOperations
    from django.db.utils import load_backend

    def ranges(engine):
        wrapper = load_backend(engine).DatabaseWrapper({"NAME": ":memory:", "ENGINE": engine})
        return {t: wrapper.ops.integer_field_range(t) for t in postgresql}

    postgresql = BaseDatabaseOperations.integer_field_ranges  # PostgreSQL keeps the base's
    assert ranges("portal.core.sqlite3") == postgresql
    assert ranges("django.db.backends.sqlite3")["PositiveIntegerField"] == (0, 2**63 - 1)
    change = f"/api/v1/queues/{acme_llm.pk}/change/"  # a grace of 2^63 s overflowed a cycle
    answer = api_client(operator).post(
        change, {"preemption_grace_s": 2**63 - 1, "reason": "x"}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json()["errors"] == [
        {
            "field": "preemption_grace_s",
            "reason": "Ensure this value is less than or equal to 2147483647.",
        }
    ]
