"""`manage.py standalone` keeps its files to its user, and its Redis asks for a password."""

import os
import signal
import subprocess
import sys

import pytest
import redis

from tests.portal.processes import ROOT, free_port, wait_until


def _mode(path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A standalone portal (no fleet) on a data directory of its own, started with a umask
    that would let everyone read what it writes; yields that directory once it runs."""
    tmp_path = tmp_path_factory.mktemp("standalone")
    data, output = tmp_path / "var", tmp_path / "standalone.log"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(WANKA_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="portal.settings")
    command = [sys.executable, "manage.py", "standalone", "--no-fleet", "--port", str(free_port())]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=output.open("wb"),
        stderr=subprocess.STDOUT,
        process_group=0,
        preexec_fn=lambda: os.umask(0o022),
    )
    try:
        wait_until(
            lambda: "Wanka is running" in output.read_text() or process.poll() is not None,
            120,
            "the standalone portal to start",
        )
        assert process.poll() is None, output.read_text()
        yield data
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def test_its_secret_key_database_and_redis_password_are_readable_by_its_user_only(standalone):
    assert _mode(standalone) == 0o700
    for name in ("secret_key", "wanka.sqlite3", "redis.password"):
        assert _mode(standalone / name) == 0o600, name
    assert all(_mode(log) == 0o600 for log in (standalone / "logs").iterdir())


def test_its_redis_refuses_a_client_without_the_password(standalone):
    port = int((standalone / "redis.port").read_text())
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).ping()
    password = (standalone / "redis.password").read_text()
    assert redis.Redis(port=port, password=password).ping()
