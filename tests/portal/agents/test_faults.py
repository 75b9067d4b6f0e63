import time
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.agents.intake import LOST, mark_lost_nodes
from portal.cluster.choices import Health
from portal.cluster.models import FaultEvent, Node
from portal.cluster.summary import LAST_SEEN, SEEN_SINCE, WEB_BEAT, WEB_UP_SINCE, listening
from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from tests.builders import api_client, make_workload


@pytest.fixture
def stale(cluster, clean_redis):
    """Every node of the cluster last heard from a minute ago, but one that just beat; Redis
    has kept heartbeats for an hour."""
    Node.objects.update(last_seen_at=timezone.now() - timedelta(minutes=1))
    clean_redis.set(SEEN_SINCE, time.time() - 3600)
    clean_redis.zadd(LAST_SEEN, {cluster[1].id: time.time()})
    return cluster


def test_nodes_that_missed_three_heartbeats_are_lost_with_a_fault(
    stale, clean_redis, acme_llm, bob, charlie, django_capture_on_commit_callbacks
):
    workload = make_workload(acme_llm, "on-first", gpus=8)
    scheduling_cycle()
    node = workload.allocations.first().node
    with django_capture_on_commit_callbacks(execute=True):
        lost = mark_lost_nodes()
    assert stale[1].id not in lost and node.id in lost
    lost_node = Node.objects.get(pk=node.pk)
    assert not lost_node.connected and lost_node.health == Health.DOWN
    assert Node.objects.get(pk=stale[1].pk).connected
    fault = FaultEvent.objects.get(node=node)
    assert fault.kind == "heartbeat-loss" and fault.severity == "critical"
    assert list(fault.workloads.all()) == [workload]
    workload.refresh_from_db()
    assert workload.state == State.RECOVERING
    assert workload.recoveries.get().lost_nodes == [node.pk]
    assert [f["id"] for f in api_client(bob).get("/api/v1/faults/").json()["results"]] == [fault.pk]
    assert api_client(charlie).get("/api/v1/faults/").json()["count"] == 0
    assert mark_lost_nodes() == []  # already marked: no second fault
    # Should its connection still be open, its next heartbeat takes it back (no message needed).
    assert clean_redis.sismember(LOST, node.id)


def test_silence_while_the_web_tier_was_down_is_not_the_nodes(
    stale, clean_redis, acme_llm, settings
):
    """Every ASGI process down 20 s (a deploy, a crash): no agent could be heard, so no node is
    lost for it, nor until the web tier has been back for the whole grace and the agents'
    reconnect backoff."""
    settings.WANKA = {**settings.WANKA, "RECONNECT_S": 30.0}  # production's
    workload = make_workload(acme_llm, "on-first", gpus=8)
    scheduling_cycle()
    node = workload.allocations.first().node
    now = time.time()
    listening(clean_redis, now - 3600)  # up an hour ago, its last word 20 s ago
    clean_redis.set(WEB_BEAT, now - 20)
    assert mark_lost_nodes() == []
    listening(clean_redis, now)  # back, after the gap
    assert float(clean_redis.get(WEB_UP_SINCE)) == now
    assert mark_lost_nodes() == []  # back for less than three heartbeats
    grace = 3 * settings.WANKA["HEARTBEAT_S"]
    clean_redis.set(WEB_UP_SINCE, now - grace - 20)  # agents in backoff may still come back
    assert mark_lost_nodes() == []
    clean_redis.set(WEB_UP_SINCE, now - 3600)  # and once it has been up long enough
    assert node.id in mark_lost_nodes()
    # One ASGI process of several starts again (it died, its agents are coming back to it):
    # the others' beat never stopped, yet silence is judged again only from its start.
    listening(clean_redis, now, started=True)
    assert float(clean_redis.get(WEB_UP_SINCE)) == now


def test_a_lost_node_is_not_scheduled(stale, acme_llm):
    mark_lost_nodes()
    workload = make_workload(acme_llm, gpus=8)
    plan = scheduling_cycle()
    assert [a.workload_id for a in plan.admissions] == [workload.pk]
    placed_on = {p.node_id for p in plan.admissions[0].placements}
    assert placed_on == {stale[1].id}


def test_a_node_whose_agent_disconnected_and_stayed_away_is_lost_and_its_job_recovered(
    stale, acme_llm
):
    """The agent crashed or the node rebooted: the connection closed (so the node is marked
    disconnected), and no agent came back within the grace of three heartbeats."""
    workload = make_workload(acme_llm, "on-a-node-that-rebooted", gpus=8)
    scheduling_cycle()
    node = workload.allocations.first().node_id
    Node.objects.filter(pk=node).update(connected=False, agent_channel="")
    assert node in mark_lost_nodes()
    assert FaultEvent.objects.get(node_id=node).kind == "heartbeat-loss"
    workload.refresh_from_db()
    assert workload.state == State.RECOVERING
    assert node not in mark_lost_nodes()  # its job is being recovered: no second fault


def test_within_the_grace_a_disconnected_node_is_not_lost_nor_one_without_work(stale, acme_llm):
    workload = make_workload(acme_llm, "on-a-node-reconnecting", gpus=8)
    scheduling_cycle()
    node = workload.allocations.first().node_id
    Node.objects.filter(pk=node).update(connected=False, last_seen_at=timezone.now())
    idle = stale[-1].pk
    Node.objects.filter(pk=idle).update(connected=False)
    lost = mark_lost_nodes()
    assert node not in lost and idle not in lost
    assert not FaultEvent.objects.filter(node_id__in=[node, idle]).exists()


def test_a_redis_that_restarted_empty_takes_no_node_down(stale, clean_redis, acme_llm):
    """Redis lost every heartbeat (a restart): that is not silence. The nodes get a fresh
    grace from then, and only the ones that stay silent through it are lost."""
    workload = make_workload(acme_llm, "running-through-a-redis-restart", gpus=8)
    scheduling_cycle()
    clean_redis.delete(LAST_SEEN, SEEN_SINCE)  # the restart
    assert mark_lost_nodes() == []
    assert Node.objects.filter(connected=True).count() == len(stale)
    workload.refresh_from_db()
    assert workload.state == State.ADMITTED
    clean_redis.set(SEEN_SINCE, time.time() - 60)  # a minute on, and still silent: lost
    assert set(mark_lost_nodes()) == {node.pk for node in stale}


def test_a_nodes_last_seen_follows_its_heartbeats_not_its_connect_time(stale):
    """The node that just beat had last_seen_at a minute old: the check writes the beat."""
    beating, silent = stale[1], stale[2]
    before = Node.objects.get(pk=silent.pk).last_seen_at
    mark_lost_nodes()
    assert timezone.now() - Node.objects.get(pk=beating.pk).last_seen_at < timedelta(seconds=5)
    assert Node.objects.get(pk=silent.pk).last_seen_at == before


@pytest.mark.parametrize(
    "off_s_ago, beat_s_ago, taken_back",
    [
        pytest.param(60, 1, True, id="declared lost, its agent beats on: queued to be taken back"),
        pytest.param(1, 2, False, id="its agent disconnected after its last beat: left alone"),
    ],
)
def test_a_disconnected_node_that_still_beats_is_queued_to_be_taken_back(
    stale, clean_redis, off_s_ago, beat_s_ago, taken_back
):
    """The database says the node is off, yet its agent beats since: it was declared lost while
    its connection stayed open, and Redis forgot (a restart) or never got (a failed write) that
    its next heartbeat should take it back. The lost-node check says it again."""
    node = stale[2]
    clean_redis.delete(LOST)
    went = timezone.now() - timedelta(seconds=off_s_ago)
    Node.objects.filter(pk=node.pk).update(connected=False, agent_channel="", last_seen_at=went)
    clean_redis.zadd(LAST_SEEN, {node.pk: time.time() - beat_s_ago})
    mark_lost_nodes()
    assert clean_redis.sismember(LOST, node.pk) == taken_back
