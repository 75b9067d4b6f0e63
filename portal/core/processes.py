"""Running the portal's processes from one command (`manage.py standalone`, `manage.py
production`): start them with a log file each, watch them, stop them all together."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# A child that dies sooner than this after it started is failing, not to be restarted again.
STEADY_S = 10.0


class Exited(RuntimeError):
    """A child exited and is not to be started again."""


@dataclass
class Process:
    """One named child: its command, its log, and (while it runs) its Popen. It leads a process
    group of its own, so the terminal's Ctrl-C reaches only the parent, which stops the children
    in order, their own children with them."""

    name: str
    command: list[str]
    log: Path
    pass_fds: tuple[int, ...] = ()
    popen: subprocess.Popen | None = None
    started: float = 0.0

    def start(self, env: dict) -> None:
        self.popen = subprocess.Popen(
            self.command,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
            pass_fds=self.pass_fds,
            process_group=0,
        )
        self.started = time.monotonic()

    @property
    def exited(self) -> int | None:
        return None if self.popen is None else self.popen.poll()


def worker(name: str, queues: str, concurrency: int, threads: bool = False) -> list[str]:
    """A Celery worker's command line for `queues`; `threads`: a pool of threads, for tasks
    that wait on the network (webhooks) rather than compute."""
    return [
        sys.executable,
        *f"-m celery -A portal worker -n {name}@%h -Q {queues}".split(),
        *f"--concurrency {concurrency} --loglevel INFO".split(),
        *(["--pool", "threads"] if threads else []),
    ]


def beat(schedule: Path) -> list[str]:
    return [
        sys.executable,
        *"-m celery -A portal beat --loglevel INFO --schedule".split(),
        str(schedule),
    ]


def start_all(processes: list[Process], env: dict) -> None:
    for process in processes:
        process.start(env)


def watch(processes: list[Process], env: dict, restart: bool, once: bool = False) -> None:
    """Until interrupted: a child that exits is started again when `restart` (unless it keeps
    dying at once), else Exited says which and where its log is."""
    while True:
        for process in processes:
            code = process.exited
            if code is None:
                continue
            steady = time.monotonic() - process.started >= STEADY_S
            if not (restart and steady):
                raise Exited(f"{process.name} exited with code {code}; see {process.log}")
            print(f"{process.name} exited with code {code}; starting it again", flush=True)
            process.start(env)
        if once:
            return
        time.sleep(1)


def stop_all(processes: list[Process], grace_s: float = 10.0) -> None:
    """SIGTERM to every child still running, which stops its own children; SIGKILL to what is
    left of any child's process group after `grace_s`. A second Ctrl-C or SIGTERM meanwhile
    changes nothing."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    started = [p.popen for p in processes if p.popen is not None]
    for popen in started:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for popen in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=max(0.1, deadline - time.monotonic()))
    for popen in started:
        with contextlib.suppress(ProcessLookupError):  # when nothing of it is left
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def interrupt(signum, frame):
    """SIGTERM handled as Ctrl-C: the command's `finally` stops the children."""
    raise KeyboardInterrupt
