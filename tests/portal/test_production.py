"""`manage.py production`: several ASGI processes on one port and a worker per queue, on
PostgreSQL and Redis; one web process killed, the port still answers and the process is started
again; SIGTERM stops every child."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.portal.processes import ROOT, Child, free_port, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def children_of(pid: int) -> dict[int, str]:
    found = subprocess.run(["pgrep", "-a", "-P", str(pid)], capture_output=True, text=True)
    return {int(line.split()[0]): line for line in found.stdout.splitlines()}


def answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=5).status == 200
    except OSError:
        return False


def test_the_production_topology_serves_on_one_port_and_heals(clean_redis, tmp_path):
    port = free_port()
    production = Child(
        "production",
        [sys.executable, "manage.py", "production", "--port", str(port), "--web", "2",
         "--workers", "scheduling=1,recovery=1,telemetry=0,notifications=0,webhooks=0,whatif=0",
         "--no-beat", "--no-migrate"],
        WANKA_DATA_DIR=str(tmp_path),
    )  # fmt: skip
    try:
        production.wait_for_output("on 2 ASGI processes", 60)
        url = f"http://127.0.0.1:{port}/login/"
        wait_until(lambda: answers(url), 60, "the portal to answer", check=production)
        children = children_of(production.process.pid)
        webs = [pid for pid, line in children.items() if "daphne" in line]
        workers = [line for line in children.values() if "celery" in line]
        assert len(webs) == 2 and len(workers) == 2
        assert all(answers(url) for _ in range(20))

        time.sleep(10)  # steady: a child that dies after this is started again
        os.kill(webs[0], signal.SIGKILL)
        assert all(answers(url) for _ in range(10))  # the other process serves meanwhile
        wait_until(
            lambda: len([line for line in children_of(production.process.pid).values()
                         if "daphne" in line]) == 2,
            15, "the killed web process to be started again", check=production,
        )  # fmt: skip
        assert "web-1 exited with code -9; starting it again" in production.output()
        assert answers(url)
        last = children_of(production.process.pid)
    finally:
        production.process.send_signal(signal.SIGTERM)
        production.process.wait(timeout=30)
    for pid in last:  # every child stopped with it
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not answers(f"http://127.0.0.1:{port}/login/")


def test_it_refuses_to_run_without_postgresql_and_redis():
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run(
        [sys.executable, "manage.py", "production", "--no-migrate"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "set DATABASE_URL and REDIS_URL" in done.stderr
