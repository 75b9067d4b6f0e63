"""Events made in a Celery worker process reach browsers' WebSockets through Redis."""

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from portal.cluster.models import Node
from portal.cluster.tasks import publish_utilization
from portal.workloads.choices import State
from portal.workloads.tasks import run_cycle
from tests.builders import make_workload
from tests.portal.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def test_settings_use_a_real_redis_channel_layer(settings):
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"


def test_utilization_from_the_worker_reaches_every_signed_in_browser(live, bob, charlie, cluster):
    bobs, charlies = live(bob), live(charlie)
    publish_utilization.delay()
    for browser in (bobs, charlies):
        point = browser.wait_for("utilization")["point"]
        assert point["gpus"] == 16 * 8


def test_a_cycle_in_the_worker_tells_only_the_owning_tenant(live, acme_llm, bob, charlie):
    bobs, charlies = live(bob), live(charlie)
    workload = make_workload(acme_llm, "cross-process", gpus=16)
    run_cycle.delay()
    event = bobs.wait_for("workload.state", lambda p: p["id"] == workload.pk)
    assert event["state"] == State.ADMITTED
    assert event["reason"] == "placed on 2 nodes"
    publish_utilization.delay()  # a later event: by now Charlie would have had Acme's
    charlies.wait_for("utilization")
    assert charlies.of("workload.state") == []


def test_anonymous_browsers_are_turned_away(portal_server):
    with pytest.raises(InvalidStatus) as refused:
        connect(
            f"ws://127.0.0.1:{portal_server}/ws/live/",
            open_timeout=5,
            origin=f"http://127.0.0.1:{portal_server}",
        )
    assert refused.value.response.status_code == 403


def test_a_node_with_no_agent_is_not_scheduled(acme_llm, celery_worker, clean_redis):
    Node.objects.update(connected=False)
    workload = make_workload(acme_llm, gpus=8)
    run_cycle.delay()
    wait_until(lambda: _refreshed(workload).pending_reason, 20, "a pending reason")
    assert workload.state == State.PENDING
    assert not workload.allocations.exists()


def _refreshed(workload):
    workload.refresh_from_db()
    return workload
