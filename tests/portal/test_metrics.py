"""/metrics after a small flow: a cycle admits one job and leaves one waiting, a node faults, an
agent beats; and who may scrape."""

import asyncio
import json
import re
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio
from django.conf import settings as django_settings
from django.test import override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.agents import fanin
from portal.agents.fanin import FanInStats
from portal.agents.intake import record_fault
from portal.cluster.models import Gpu, Node
from portal.cluster.summary import TELEMETRY
from portal.core import measure
from portal.services.models import Service, ServiceSample
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.models import Allocation
from scheduler import faults
from tests.builders import make_workload

OUTSIDE = "203.0.113.9"
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "wanka.json"


def scrape(client, path="/metrics") -> dict[str, list]:
    response = client.get(path)
    assert response.status_code == 200, response.content
    text = response.content.decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(samples, name: str, **labels) -> float:
    (found,) = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    return found


def flush(stats: FanInStats, connected: int, monkeypatch) -> None:
    """Flush on a Redis client of its own event loop, closed after."""

    async def run():
        url = django_settings.REDIS_URL
        async with redis.asyncio.from_url(url, decode_responses=True) as connection:
            monkeypatch.setattr(fanin, "aclient", lambda: connection)
            await stats.flush(connected)

    asyncio.run(run())


@pytest.fixture
def flow(cluster, acme_llm, clean_redis, monkeypatch):
    clean_redis.delete(
        measure.CYCLE, measure.LAST_CYCLE, *clean_redis.scan_iter(f"{measure.FANIN}*")
    )
    job = make_workload(acme_llm, "pretrain", gpus=16)
    waiting = make_workload(acme_llm, "too-big", gpus=1024)
    scheduling_cycle()
    idle = Node.objects.filter(allocations__isnull=True).order_by("id")
    faulty, beating = idle[0], idle[1]
    record_fault(faulty.pk, faults.lookup("xid-79"), "fell off the bus")
    Gpu.objects.create(node=beating, index=0, uuid="GPU-1234", memory_mb=81559)
    gpu = {"index": 0, "util": 87, "memory_used_mb": 40960, "temperature_c": 61, "power_w": 512.5}
    sample = {"ts": time.time(), "gpus": [gpu], "workloads": []}
    clean_redis.hset(TELEMETRY, beating.pk, json.dumps(sample))
    stats = FanInStats(period_s=60)
    for seconds in (0.001, 0.002, 0.03):
        stats.record(seconds)
    flush(stats, 3, monkeypatch)
    return {"job": job, "waiting": waiting, "beating": beating, "faulty": faulty}


def test_gpus_add_up_and_allocated_is_what_the_cycle_admitted(flow, cluster, client):
    gpus = scrape(client)["wanka_gpus"]
    assert sum(s.value for s in gpus) == sum(n.gpu_count for n in cluster)
    allocated = sum(s.value for s in gpus if s.labels["state"] == "allocated")
    assert allocated == Allocation.objects.count() == 16
    unavailable = sum(s.value for s in gpus if s.labels["state"] == "unavailable")
    assert unavailable == flow["faulty"].gpu_count  # xid-79 took its node down


def test_nodes_by_health(flow, cluster, client):
    nodes = {
        (s.labels["datacenter"], s.labels["health"], s.labels["connected"]): s.value
        for s in scrape(client)["wanka_nodes"]
    }
    assert len(nodes) == 3  # one series per data center, health and connection
    assert sum(nodes.values()) == len(cluster)
    assert nodes["dc1", "down", "true"] == 1


def test_queue_quota_use_and_waiting(flow, client):
    families = scrape(client)
    queue = {"tenant": "acme", "queue": "llm"}
    assert value(families["wanka_queue_nominal_gpus"], "wanka_queue_nominal_gpus", **queue) == 64
    assert value(families["wanka_queue_guaranteed_gpus"], "wanka_queue_guaranteed_gpus") == 0
    assert value(families["wanka_queue_used_gpus"], "wanka_queue_used_gpus", **queue) == 16
    assert value(families["wanka_queue_pending_workloads"], "wanka_queue_pending_workloads") == 1
    (oldest,) = families["wanka_queue_oldest_pending_seconds"]
    assert 0 <= oldest.value < 60
    states = {s.labels["state"]: s.value for s in families["wanka_workloads"]}
    assert states == {"admitted": 1, "pending": 1}


def test_the_cycle_is_timed(flow, client):
    families = scrape(client)
    cycles = families["wanka_scheduling_cycle_seconds"]
    assert value(cycles, "wanka_scheduling_cycle_seconds_count") >= 1
    assert value(cycles, "wanka_scheduling_cycle_seconds_bucket", le="+Inf") >= 1
    assert value(cycles, "wanka_scheduling_cycle_seconds_sum") > 0
    steps = {s.labels["step"] for s in families["wanka_scheduling_step_seconds"]}
    assert "1. take stock" in steps
    assert value(families["wanka_snapshot_load_seconds"], "wanka_snapshot_load_seconds") > 0


def test_agent_fan_in_per_process(flow, client):
    families = scrape(client)
    assert value(families["wanka_agent_messages"], "wanka_agent_messages_total") == 3
    handling = families["wanka_agent_message_handling_seconds"]
    name = "wanka_agent_message_handling_seconds_bucket"
    assert value(handling, name, le="0.01") == 2
    assert value(handling, name, le="0.05") == 3
    assert value(families["wanka_agents_connected"], "wanka_agents_connected") == 3


def test_faults_recoveries_ettr_and_celery_queues(flow, client):
    families = scrape(client)
    assert value(families["wanka_faults"], "wanka_faults_total", kind="xid-79") == 1
    assert "wanka_recoveries" in families
    assert "wanka_ettr_ratio" in families and "wanka_checkpoint_stall_seconds" in families
    queues = {s.labels["queue"]: s.value for s in families["wanka_celery_queue_length"]}
    assert {"scheduling", "recovery", "telemetry", "whatif"} <= set(queues)
    assert not any(name.startswith("DCGM_") for name in families)


def test_gpu_telemetry_under_dcgm_names(flow, client):
    families = scrape(client, "/metrics/gpus")
    (util,) = families["DCGM_FI_DEV_GPU_UTIL"]
    assert util.value == 87
    assert util.labels == {
        "gpu": "0",
        "UUID": "GPU-1234",
        "device": "nvidia0",
        "modelName": "H800",
        "Hostname": flow["beating"].name,
    }
    assert families["DCGM_FI_DEV_FB_USED"][0].value == 40960
    assert families["DCGM_FI_DEV_POWER_USAGE"][0].value == 512.5


def test_stale_telemetry_is_left_out(flow, clean_redis, client):
    old = {"ts": time.time() - 3600, "gpus": [{"index": 0, "util": 5}], "workloads": []}
    clean_redis.hset(TELEMETRY, flow["beating"].pk, json.dumps(old))
    assert scrape(client, "/metrics/gpus")["DCGM_FI_DEV_GPU_UTIL"] == []


SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}


def test_every_series_the_dashboard_asks_for_is_exported(flow, client):
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    asked = set(re.findall(r"\b(?:wanka|DCGM)_\w+", " ".join(exprs)))
    exported = {
        family.name + suffix
        for path in ("/metrics", "/metrics/gpus")
        for family in text_string_to_metric_families(client.get(path).content.decode())
        for suffix in SUFFIXES.get(family.type, [""])
    }
    assert asked and asked <= exported


def test_a_scrape_costs_a_bounded_number_of_queries(flow, client, django_assert_max_num_queries):
    with django_assert_max_num_queries(16):
        scrape(client)


@pytest.mark.parametrize(
    ("address", "authorization", "status"),
    [
        pytest.param("127.0.0.1", None, 200, id="from the machine itself"),
        pytest.param("::1", None, 200, id="from the machine itself over IPv6"),
        pytest.param("::ffff:127.0.0.1", None, 200, id="IPv4 in IPv6 is IPv4"),
        pytest.param(OUTSIDE, None, 403, id="from elsewhere without a token"),
        pytest.param(OUTSIDE, "Bearer s3cret-token", 200, id="from elsewhere with the token"),
        pytest.param(OUTSIDE, "Bearer wrong", 403, id="from elsewhere with another token"),
        pytest.param("127.0.0.1", "Bearer wrong", 403, id="a wrong token counts even from home"),
        pytest.param(OUTSIDE, "Basic s3cret-token", 403, id="only as a bearer token"),
    ],
)
@override_settings(WANKA_METRICS_TOKEN="s3cret-token")
def test_who_may_scrape(db, client, address, authorization, status):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = client.get("/metrics", REMOTE_ADDR=address, **headers)
    assert response.status_code == status
    if status == 403:
        assert response["Content-Type"].startswith("text/plain")
        assert b"metrics" in response.content


def test_without_a_configured_token_no_token_opens_it(db, client, settings):
    settings.WANKA_METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 403


def test_a_forwarded_header_never_opens_it_and_behind_a_proxy_only_the_token_does(
    db, client, settings
):
    """A direct client that says it is 127.0.0.1 is not; behind a proxy every client comes
    from the proxy's address, so no address counts there."""
    settings.WANKA_METRICS_TOKEN = "scrape-me"
    outside = {"REMOTE_ADDR": OUTSIDE, "HTTP_X_FORWARDED_FOR": "127.0.0.1"}
    assert client.get("/metrics", **outside).status_code == 403
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    through = {"REMOTE_ADDR": "127.0.0.1"}
    assert client.get("/metrics", **through, HTTP_X_FORWARDED_FOR="::1").status_code == 403
    assert client.get("/metrics", **through).status_code == 403
    token = {"HTTP_AUTHORIZATION": "Bearer scrape-me"}
    assert client.get("/metrics", **through, **token).status_code == 200


def test_allowed_networks_come_from_the_setting(db, client, settings):
    settings.WANKA_METRICS_NETWORKS = ["203.0.113.0/24"]
    assert client.get("/metrics", REMOTE_ADDR=OUTSIDE).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_a_redis_outage_leaves_the_databases_families(flow, client, monkeypatch):
    def down():
        raise redis.ConnectionError("Redis is down")

    monkeypatch.setattr("portal.metrics.collector.client", down)
    monkeypatch.setattr(measure, "client", down)
    families = scrape(client)
    assert "wanka_gpus" in families and "wanka_faults" in families
    assert "wanka_scheduling_cycle_seconds" not in families
    assert "wanka_celery_queue_length" not in families


def test_fan_in_goes_to_redis_after_a_second_or_a_thousand_messages(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("portal.agents.fanin.time.monotonic", lambda: now[0])
    stats = FanInStats(period_s=60)
    assert not stats.due()  # nothing recorded
    stats.record(0.001)
    assert not stats.due()
    now[0] = 1.0
    assert stats.due()
    stats.unflushed, stats.flushed_at = [], 1.0
    for _ in range(fanin.FLUSH_EVERY):
        stats.record(0.001)
    assert stats.due()


def test_a_redis_outage_while_recording_a_cycle_does_not_fail_it(acme_llm, monkeypatch, caplog):
    def down():
        raise redis.ConnectionError("Redis is down")

    monkeypatch.setattr(measure, "client", down)
    job = make_workload(acme_llm, "pretrain", gpus=16)
    plan = scheduling_cycle()
    assert [a.workload_id for a in plan.admissions] == [job.pk]
    assert "cannot record the scheduling cycle's timings" in caplog.text


def test_a_redis_outage_while_recording_fan_in_loses_only_those_counts(monkeypatch, caplog):
    def down():
        raise redis.ConnectionError("Redis is down")

    monkeypatch.setattr("portal.agents.fanin.aclient", down)
    stats = FanInStats(period_s=60)
    stats.record(0.001)
    asyncio.run(stats.flush(connected=1))
    assert stats.unflushed == []
    assert "cannot record the agent fan-in" in caplog.text


def test_services_replicas_and_load(flow, client, acme, acme_llm):
    service = Service.objects.create(
        tenant=acme, queue=acme_llm, name="chat", gpu_model=acme_llm.quotas.get().gpu_model,
        gpus_per_replica=8, desired_replicas=3, panic=True,
    )  # fmt: skip
    for ready, in_flight in ((1, 4), (2, 9)):
        ServiceSample.objects.create(
            service=service, at=timezone.now(), in_flight=in_flight, requests_per_s=1.5,
            ready=ready, desired=3,
        )  # fmt: skip
    families = scrape(client)
    for name, expected in [
        ("wanka_service_replicas_wanted", 3),
        ("wanka_service_replicas_ready", 2),  # at the newest tick
        ("wanka_service_requests_in_flight", 9),
        ("wanka_service_panic", 1),
    ]:
        assert value(families[name], name, tenant="acme", service="chat") == expected


def test_a_share_counts_as_its_share_of_a_gpu(flow, client):
    quarter = make_workload(flow["job"].queue, "notebook", gpus=1, slices=2)
    scheduling_cycle()
    assert Allocation.objects.get(workload=quarter).slices == 2
    families = scrape(client)
    queue = {"tenant": "acme", "queue": "llm"}
    assert value(families["wanka_queue_used_gpus"], "wanka_queue_used_gpus", **queue) == 16.25
    gpus = families["wanka_gpus"]
    assert sum(s.value for s in gpus if s.labels["state"] == "allocated") == 16.25
