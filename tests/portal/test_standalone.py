"""`manage.py standalone` keeps its files to its user, its Redis asks for a password, a worker
that dies is started again, and Ctrl-C stops it quietly with every process it started."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from portal.core.processes import STEADY_S
from tests.portal.processes import ROOT, free_port, wait_until


def _mode(path) -> int:
    return path.stat().st_mode & 0o777


def _as_a_terminal_starts_it() -> None:
    """A umask that would let everyone read what it writes, and Ctrl-C not ignored: a test
    run in the background of a shell without job control (`./.ci/run &`) inherits SIGINT
    ignored, and Python then installs no KeyboardInterrupt for it."""
    os.umask(0o022)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A standalone portal with its simulated fleet on a data directory of its own, started
    with a umask that would let everyone read what it writes, in a process group of its own as
    a terminal starts it; yields the directory, the process and its output once it runs."""
    tmp_path = tmp_path_factory.mktemp("standalone")
    data, output = tmp_path / "var", tmp_path / "standalone.log"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(WANKA_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="portal.settings")
    command = [sys.executable, "manage.py", "standalone", "--port", str(free_port())]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=output.open("wb"),
        stderr=subprocess.STDOUT,
        process_group=0,
        preexec_fn=_as_a_terminal_starts_it,
    )
    try:
        wait_until(
            lambda: "Wanka is running" in output.read_text() or process.poll() is not None,
            120,
            "the standalone portal to start",
        )
        assert process.poll() is None, output.read_text()
        yield data, process, output
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def test_its_secret_key_database_and_redis_password_are_readable_by_its_user_only(standalone):
    standalone = standalone[0]
    assert _mode(standalone) == 0o700
    for name in ("secret_key", "wanka.sqlite3", "redis.password"):
        assert _mode(standalone / name) == 0o600, name
    assert all(_mode(log) == 0o600 for log in (standalone / "logs").iterdir())


def test_its_redis_refuses_a_client_without_the_password(standalone):
    standalone = standalone[0]
    port = int((standalone / "redis.port").read_text())
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).ping()
    password = (standalone / "redis.password").read_text()
    assert redis.Redis(port=port, password=password).ping()


def test_a_worker_that_dies_is_started_again_and_the_cycle_goes_on(standalone):
    """A Celery worker exits when its Redis restarts at the wrong moment (killed here): the
    standalone portal starts it again, and the scheduling cycle runs again within seconds."""
    data, process, output = standalone
    time.sleep(STEADY_S)  # a child that dies sooner after its start is failing, not restarted
    worker = next(pid for pid in _children(process.pid) if b"scheduling," in _cmdline(pid))
    os.kill(worker, signal.SIGKILL)
    wait_until(lambda: "worker exited with code -9; starting it again" in output.read_text(), 15)
    again = wait_until(
        lambda: [p for p in _children(process.pid) if b"scheduling," in _cmdline(p)], 15
    )
    assert again != [worker]
    log = data / "logs" / "worker.log"
    before = log.read_text().count("cycle:")
    wait_until(lambda: log.read_text().count("cycle:") > before, 20, "a scheduling cycle")


def _children(pid: int) -> list[int]:
    return [
        int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat") if _parent(stat) == pid
    ]


def _parent(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ctrl_c_ends_every_process_it_started_and_says_so(standalone):
    """Last in this module: it stops the portal. A terminal's Ctrl-C goes to the whole process
    group; the children must not take it as their own stop and be reported as failed."""
    _, process, output = standalone
    # The web server, two workers and their pools, beat, the fleet, the load generator, Redis.
    family = wait_until(lambda: len(found := _descendants(process.pid)) >= 7 and found, 30)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) == 0
    said = output.read_text()
    assert said.rstrip().splitlines()[-1] == "Wanka stopped: every process it started has ended."
    assert "Error" not in said.split("Press Ctrl-C to stop.")[1], said
    assert not [pid for pid in family if _running(pid)]
