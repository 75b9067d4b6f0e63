"""The processes a benchmark starts (daphne, Celery, Redis, a replay): stopped when the
benchmark fails, exits, is sent SIGTERM or runs past its deadline.

A benchmark calls `supervise(timeout)` first, starts its children with `start()` and says what
it waits for in `with waiting_for(...)`. Each child leads a process group of its own, so that
stopping it stops what it started too: SIGTERM to the group, SIGKILL after `GRACE_S`. What is
not a child (a server its own control tool starts in the background) is stopped by a function
given to `on_stop`, after the children. Past the deadline the benchmark prints what it was
waiting for, stops its children and exits 1.
"""

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GRACE_S = 10.0  # from SIGTERM to SIGKILL, for a child's group
EXIT_S = 60.0  # past the deadline, how long the benchmark may take to unwind before it is ended

_children: list[subprocess.Popen] = []
_cleanups: list = []  # functions to call once, after the children are stopped
_waiting = ["the benchmark to finish"]
_deadline = [""]  # the message, once the deadline has passed


def start(command: list[str], **popen) -> subprocess.Popen:
    """`subprocess.Popen(command, **popen)` in a process group of its own, registered to be
    stopped with the benchmark."""
    _children[:] = [child for child in _children if child.poll() is None]
    child = subprocess.Popen(command, start_new_session=True, **popen)
    _children.append(child)
    return child


def on_stop(cleanup) -> None:
    """Call `cleanup()` once when the children are stopped (at exit, on SIGTERM, past the
    deadline), after them."""
    _cleanups.append(cleanup)


@contextlib.contextmanager
def waiting_for(what: str):
    """Say what the benchmark waits for meanwhile: the message if the deadline passes."""
    before, _waiting[0] = _waiting[0], what
    try:
        yield
    finally:
        _waiting[0] = before


def stop_all(grace: float = GRACE_S) -> None:
    """SIGTERM every child's process group, then SIGKILL what is left of them after `grace`;
    then the `on_stop` functions."""
    children = list(_children)
    _signal_groups(children, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in children:
        _wait(child, deadline - time.monotonic())
    _signal_groups(children, signal.SIGKILL)  # what outlived the grace, grandchildren too
    for child in children:
        _wait(child, grace)
    with contextlib.suppress(IndexError):  # the list is empty (another thread may empty it)
        while True:
            cleanup = _cleanups.pop()
            try:
                cleanup()
            except Exception as error:  # the others must still run
                print(f"cleanup {cleanup!r} failed: {error!r}", file=sys.stderr)


def supervise(timeout: float) -> None:
    """Stop the children on exit and on SIGTERM (then exit 143), and end the benchmark with a
    message after `timeout` seconds."""
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGALRM, _on_deadline)
    threading.Thread(target=_watch, args=(timeout,), daemon=True).start()


def _signal_groups(children: list[subprocess.Popen], signum: int) -> None:
    for child in children:
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(child.pid, signum)


def _wait(child: subprocess.Popen, seconds: float) -> None:
    # Always with a timeout: a signal handler may interrupt a wait on the same child.
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=max(0.0, seconds))


def _on_sigterm(signum, frame) -> None:
    stop_all()
    raise SystemExit(128 + signum)


def _on_deadline(signum, frame) -> None:
    raise SystemExit(_deadline[0])  # said again, as the last line, after the unwinding's noise


def _watch(timeout: float) -> None:
    """At the deadline: say so, stop the children, end the main thread's work; and if it is
    stuck, the process."""
    time.sleep(timeout)
    _deadline[0] = f"timed out after {timeout:g} s waiting for {_waiting[0]}"
    print(_deadline[0], file=sys.stderr, flush=True)
    stop_all()
    os.kill(os.getpid(), signal.SIGALRM)
    time.sleep(EXIT_S)
    os._exit(1)


class Child:
    """A process the soak starts, kills and starts again with the same command line."""

    def __init__(
        self, name: str, command: list[str], env: dict, logs: Path, ready: str, port: int = 0
    ):
        self.name, self.command, self.env, self.ready = name, command, env, ready
        self.port = port  # where it listens, for a server
        self.log = logs / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            mark = self.log.stat().st_size
            self.process = start(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while self.ready not in self.log.read_text(errors="replace")[mark:]:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{self.name} did not start; see {self.log}")
            time.sleep(0.1)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
