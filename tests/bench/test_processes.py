"""A benchmark's children are stopped when it is sent SIGTERM, fails or passes its deadline."""

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
# A benchmark in miniature: a child that starts a sleeping grandchild, then a long wait.
SCRIPT = textwrap.dedent(
    """
    import sys, time
    from bench import processes

    processes.supervise(float(sys.argv[1]))
    child = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    processes.start([sys.executable, "-c", child])
    print("started", flush=True)
    with processes.waiting_for("the sleepers to wake"):
        if sys.argv[2] == "fail":
            time.sleep(2)
            raise RuntimeError("the benchmark failed")
        time.sleep(60)
    """
)


def start_bench(tmp_path, timeout: float, how: str = "wait") -> subprocess.Popen:
    script = tmp_path / "bench_like.py"
    script.write_text(SCRIPT)
    return subprocess.Popen(
        [sys.executable, str(script), str(timeout), how],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def descendants(bench: subprocess.Popen, count: int) -> list[psutil.Process]:
    """The benchmark's descendants, once there are `count` of them."""
    deadline = time.monotonic() + 10
    while len(found := psutil.Process(bench.pid).children(recursive=True)) < count:
        assert time.monotonic() < deadline, "the benchmark did not start its children"
        time.sleep(0.05)
    return found


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigterm_stops_the_children_and_their_children(tmp_path):
    bench = start_bench(tmp_path, timeout=60)
    assert bench.stdout.readline() == "started\n"
    children = descendants(bench, 2)
    bench.send_signal(signal.SIGTERM)
    assert bench.wait(timeout=15) == 128 + signal.SIGTERM
    assert not [c for c in children if alive(c)]


def test_a_failure_stops_the_children(tmp_path):
    bench = start_bench(tmp_path, timeout=60, how="fail")
    children = descendants(bench, 2)
    _, err = bench.communicate(timeout=15)
    assert bench.returncode == 1
    assert "the benchmark failed" in err
    assert not [c for c in children if alive(c)]


def test_past_the_deadline_it_says_what_it_waited_for_and_exits(tmp_path):
    bench = start_bench(tmp_path, timeout=1.5)
    children = descendants(bench, 2)
    _, err = bench.communicate(timeout=15)
    assert bench.returncode == 1
    assert err.splitlines()[-1] == "timed out after 1.5 s waiting for the sleepers to wake"
    assert not [c for c in children if alive(c)]
