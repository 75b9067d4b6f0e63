"""Real processes for tests that cross them: the ASGI server, Celery worker and beat, and the
simulated fleet, all on the test database and the test Redis."""

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

# Jobs' commands for real agents: one that runs until stopped and reports nothing, and
# `examples/train_tiny.py` (PyTorch on the CPU), which trains until stopped.
SLEEPER = shlex.join([sys.executable, "-c", "import time\nwhile True: time.sleep(0.2)"])


def train_tiny(log_every: int) -> str:
    script = str(ROOT / "examples" / "train_tiny.py")
    return shlex.join([sys.executable, script, "--steps", "100000000", "--sleep-s", "0.01",
                       "--log-every", str(log_every)])  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    """The URL of the test database, for child processes."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


def child_env() -> dict:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "WANKA_DATA_DIR": str(settings.DATA_DIR),
        "PYTHONUNBUFFERED": "1",
    }


class Child:
    """A child process whose output goes to a log file the test can read."""

    def __init__(self, name: str, command: list[str], **env):
        self.log = settings.DATA_DIR / f"{name}.log"
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**child_env(), **env},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 30) -> None:
        wait_until(
            lambda: text in self.output(), timeout, f"{text!r} in {self.log.name}", check=self
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def wait_until(predicate, timeout: float = 30, what: str = "condition", check=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if check and check.process.poll() is not None:
            raise AssertionError(f"{check.log.name} exited:\n{check.output()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def start_server() -> tuple[Child, int]:
    port = free_port()
    command = f"-m daphne -b 127.0.0.1 -p {port} portal.asgi:application"
    server = Child("daphne", [sys.executable, *command.split()])
    server.wait_for_output("Listening on TCP address")
    return server, port


def start_worker() -> Child:
    queues = "scheduling,recovery,telemetry,notifications,webhooks,whatif"
    command = f"-m celery -A portal worker -Q {queues} --pool threads --concurrency 4"
    worker = Child("worker", [sys.executable, *command.split(), "--loglevel", "INFO"])
    worker.wait_for_output("ready.")
    return worker


def start_beat() -> Child:
    command = [sys.executable, *"-m celery -A portal beat --loglevel INFO --schedule".split()]
    schedule = str(settings.DATA_DIR / "celerybeat-schedule")
    beat = Child("beat", [*command, schedule], WANKA_CYCLE_S="1")
    beat.wait_for_output("beat: Starting")
    return beat


def start_fleet(port: int, heartbeat: float = 0.2) -> Child:
    return Child(
        "fleet",
        [
            sys.executable,
            "manage.py",
            "simfleet",
            "--url",
            f"ws://127.0.0.1:{port}/ws/agent/",
            "--heartbeat",
            str(heartbeat),
        ],
    )


def start_agent(port: int, node, state_dir: Path, fake_nvml_log: Path | None = None) -> Child:
    """`wanka-agent` for `node` with the processes backend: its workloads run as real
    processes, on simulated GPUs of the node's model; or, given `fake_nvml_log`, on the GPU of
    the fake NVML of `tests/fake_pynvml` (the nvml backend, which runs processes too), which
    writes what it is made to change to that file."""
    if fake_nvml_log is None:
        gpus = ["--backend", "processes", "--gpus", str(node.gpu_count)]
        gpus += ["--gpu-model", node.gpu_model.name]
        env = {"PYTHONPATH": str(ROOT)}
    else:
        gpus = ["--backend", "nvml"]
        path = os.pathsep.join([str(ROOT / "tests" / "fake_pynvml"), str(ROOT)])
        env = {"PYTHONPATH": path, "WANKA_FAKE_NVML_LOG": str(fake_nvml_log)}
    command = [
        sys.executable, "-m", "scheduler.agent.cli",
        "--url", f"ws://127.0.0.1:{port}/ws/agent/", "--hostname", node.name, *gpus,
        "--state-dir", str(state_dir), "--heartbeat-s", "0.5", "--grace-s", "2",
    ]  # fmt: skip
    agent = Child("agent", command, WANKA_AGENT_TOKEN=node.issue_token(), **env)
    wait_until(lambda: type(node).objects.get(pk=node.pk).connected, 30, "the agent", check=agent)
    return agent
