"""The process backend with real child processes: environment, logs, exit codes, stopping with
grace, checkpoint requests through the contract, and leftovers of an earlier agent."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from scheduler.agent.backends import Assignment, BackendEvent, GpuProcess, NodeFault, Output
from scheduler.agent.contract import PROGRESS_EVERY_S
from scheduler.agent.processes import (
    OUTPUT_BEHIND_BYTES,
    ProcessBackend,
    cgroup_home,
    gpu_part,
    log_tail,
    read_output,
    recorded_group,
    tenant_user,
)
from scheduler.agent.protocol import AGENT, LOG_LINE_CHARS, encode, parse
from scheduler.agent.simulated import SimulatedGpus
from tests.leftovers import left_behind

REPO = Path(__file__).resolve().parents[3]
PROGRESS_WAIT_S = 3 * PROGRESS_EVERY_S


def python(code: str) -> str:
    """A command line that runs `code` with this interpreter, shell-free."""
    return shlex.join([sys.executable, "-c", code])


def make_backend(
    tmp_path: Path, grace_s: float = 5.0, **env: str
) -> tuple[ProcessBackend, list[BackendEvent]]:
    """A process backend on 4 simulated GPUs, and the events it reports."""
    base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **env}
    machine = SimulatedGpus("node-a", "H100-SXM-80GB", 4, 81559, seed=1)
    backend = ProcessBackend(machine, tmp_path / "state", grace_s=grace_s, poll_s=0.05,
                             base_env=base)  # fmt: skip
    events: list[BackendEvent] = []
    backend.subscribe(events.append)
    return backend, events


def run(scenario) -> None:
    """Drive one scenario within a deadline."""

    async def bounded() -> None:
        async with asyncio.timeout(20):
            await scenario

    asyncio.run(bounded())


async def wait_for(predicate, what: str, timeout_s: float = 5.0) -> None:
    """Poll until `predicate()` holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


DUMP_ENV = python(
    "import json, os; json.dump({'env': dict(os.environ), 'cwd': os.getcwd()}, "
    "open('seen.json', 'w'))"
)


def test_a_workload_gets_the_launch_environment_in_its_own_directory(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(
            tmp_path, WANKA_AGENT_TOKEN="secret", HOME="/root", AWS_SECRET_ACCESS_KEY="k",
            NCCL_SOCKET_IFNAME="eth0", LC_ALL="C.UTF-8", CUDA_MPS_PIPE_DIRECTORY="/run/mps",
        )  # fmt: skip
        assignment = Assignment(
            7, (1, 3), DUMP_ENV,
            {"NCCL_DEBUG": "WARN", "WORLD_SIZE": "999", "CUDA_MPS_PIPE_DIRECTORY": "/elsewhere"},
            nnodes=2, node_rank=1, master_addr="node-a", master_port=29500,
        )  # fmt: skip
        await backend.start(assignment)
        assert (await backend.wait(7)).exit_code == 0
        workdir = tmp_path / "state" / "workloads" / "7"
        seen = json.loads((workdir / "seen.json").read_text())
        env = seen["env"]
        assert seen["cwd"] == str(workdir)
        assert {k: env[k] for k in LAUNCH} == LAUNCH | {
            "WANKA_CHECKPOINT_DIR": str(workdir / "checkpoints")
        }
        assert env["NCCL_DEBUG"] == "WARN" and env["HOME"] == str(workdir)
        # What a program needs of the machine, nothing else of the agent's: not its secrets.
        assert (env["NCCL_SOCKET_IFNAME"], env["LC_ALL"]) == ("eth0", "C.UTF-8")
        # The node's MPS daemon, not one the job names (it would leave its share's limits).
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps"
        assert "WANKA_AGENT_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env

    asyncio.run(scenario())


LAUNCH = {
    "CUDA_VISIBLE_DEVICES": "1,3",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "MASTER_ADDR": "node-a",
    "MASTER_PORT": "29500",
    "NNODES": "2",
    "NODE_RANK": "1",
    "WORLD_SIZE": "4",  # 2 nodes x 2 GPUs; the assignment's own value does not win
    "PET_NNODES": "2",
    "PET_NODE_RANK": "1",
    "PET_NPROC_PER_NODE": "2",
    "PET_MASTER_ADDR": "node-a",
    "PET_MASTER_PORT": "29500",
    "WANKA_WORKLOAD_ID": "7",
    "WANKA_CHECKPOINT_DIR": "",
}


def test_the_exit_code_and_the_last_lines_of_the_log_come_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        code = "import sys\nfor i in range(120): print('line', i)\nprint('boom', file=sys.stderr)\n"
        await backend.start(Assignment(3, (0,), python(code + "sys.exit(3)")))
        busy = {s.index: s.util for s in backend.telemetry()}
        result = await backend.wait(3)
        assert result.exit_code == 3
        assert len(result.log_tail) == 50
        assert result.log_tail[0] == "line 71" and result.log_tail[-1] == "boom"
        log = (tmp_path / "state" / "workloads" / "3" / "output.log").read_text()
        assert log.count("\n") == 121  # the whole output is kept on disk
        assert busy[0] >= 80 and busy[1] < 1

    asyncio.run(scenario())


def test_a_second_run_reports_only_its_own_lines(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(3, (0,), python("print('first run')")))
        await backend.wait(3)
        await backend.start(Assignment(3, (0,), python("print('second run')")))
        assert (await backend.wait(3)).log_tail == ("second run",)

    asyncio.run(scenario())


REPORTS = python(
    "import time\n"
    "from scheduler.agent.contract import Checkpointing\n"
    "ckpt = Checkpointing.from_env()\n"
    "for step in range(1, 100000):\n"
    "    ckpt.report(step); time.sleep(0.01)\n"
)


def test_the_training_step_a_workload_reports_is_its_progress_and_one_run_says_nothing_of_the_next(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(5, (0,), REPORTS))
        await wait_for(lambda: (backend.progress(5) or 0) > 0, "a reported step")
        first = backend.progress(5)
        await wait_for(lambda: backend.progress(5) > first, "a later step", PROGRESS_WAIT_S)
        await backend.stop(5)
        await backend.wait(5)
        await backend.start(Assignment(5, (0,), python("import time; time.sleep(30)")))
        assert backend.progress(5) is None  # it reports nothing; the last run's steps are gone
        await backend.stop(5)
        await backend.wait(5)

    run(scenario())


def test_stop_sends_sigterm_and_a_process_that_obeys_ends_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path, grace_s=5.0)
        await backend.start(Assignment(1, (0,), python("import time; time.sleep(60)")))
        started = time.monotonic()
        await backend.stop(1)
        assert time.monotonic() - started < 2.0
        assert (await backend.wait(1)).exit_code == -signal.SIGTERM

    asyncio.run(scenario())


def test_a_new_agent_process_fences_what_a_killed_one_left_running(tmp_path: Path) -> None:
    """An agent killed with -9 leaves its workloads running; the next one on the same state
    directory stops them before it does anything else, and finds nothing the time after."""

    async def scenario() -> None:
        killed, _ = make_backend(tmp_path)
        await killed.start(Assignment(7, (0, 1), python("import time; time.sleep(60)")))
        pgid = recorded_group(tmp_path / "state" / "workloads" / "7")["pgid"]
        os.killpg(pgid, 0)  # running, and its agent gone without a word
        successor, _ = make_backend(tmp_path, grace_s=0.5)
        assert await successor.fence() == [7]
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
        assert await successor.fence() == []

    run(scenario())


def test_pruned_saves_are_deleted_where_they_live_and_nothing_outside(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(8, (0,), python("import time; time.sleep(60)")))
        home = tmp_path / "state" / "workloads" / "8" / "checkpoints"
        (home / "step-1.pt").write_text("old")
        (home / "step-2").mkdir()
        (home / "step-2" / "shard-0").write_text("old too")
        (home / "step-3.pt").write_text("kept")
        elsewhere = tmp_path / "precious"
        elsewhere.write_text("not a save")
        with pytest.raises(ValueError, match="not in workload 8's checkpoint directory"):
            await backend.delete_saves(8, [str(home / "step-1.pt"), str(elsewhere)])
        assert (home / "step-1.pt").exists() and elsewhere.exists()  # refused whole
        sneaky = str(home / ".." / ".." / ".." / "precious")
        with pytest.raises(ValueError):
            await backend.delete_saves(8, [sneaky])
        gone = [str(home / "step-1.pt"), str(home / "step-2"), str(home / "step-9.pt")]
        assert await backend.delete_saves(8, gone) == 2  # step 9 was never there
        assert sorted(p.name for p in home.iterdir()) == ["step-3.pt"]
        await backend.stop(8)
        await backend.wait(8)

    run(scenario())


IGNORES_SIGTERM = python(
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path, grace_s=0.5)
        await backend.start(Assignment(1, (0,), IGNORES_SIGTERM))
        log = tmp_path / "state" / "workloads" / "1" / "output.log"
        await wait_for(lambda: "ready" in log.read_text(), "the handler to be installed")
        started = time.monotonic()
        await backend.stop(1)
        elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 3.0, elapsed
        assert (await backend.wait(1)).exit_code == -signal.SIGKILL

    asyncio.run(scenario())


def test_what_the_main_process_leaves_in_its_group_is_killed_when_it_ends(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        spawn = (
            "import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "open('child.pid', 'w').write(str(child.pid))\n"
        )
        await backend.start(Assignment(2, (0,), python(spawn)))
        assert (await backend.wait(2)).exit_code == 0
        pid = int((tmp_path / "state" / "workloads" / "2" / "child.pid").read_text())
        await wait_for(lambda: not _alive(pid), "the orphaned rank to be killed")

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("command", "gpus", "reason"),
    [
        pytest.param("", (0,), "has no command", id="an empty command"),
        pytest.param("python -c 'unclosed", (0,), "cannot split", id="a quote left open"),
        pytest.param("no-such-program-xyz --x", (0,), "cannot run", id="a program not there"),
        pytest.param(python("pass"), (4,), "GPU index 4 does not exist", id="a GPU not there"),
    ],
)
def test_what_cannot_be_launched_is_refused(
    tmp_path: Path, command: str, gpus: tuple[int, ...], reason: str
) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        with pytest.raises(ValueError, match=reason):
            await backend.start(Assignment(1, gpus, command))
        with pytest.raises(KeyError):
            backend.step(1)

    asyncio.run(scenario())


# A training loop in miniature that follows the contract through the helper: one step every
# 20 ms, a periodic save every 0.2 s, and a save at the next step when asked.
TRAINER = python(
    "import time\n"
    "from pathlib import Path\n"
    "from scheduler.agent.contract import Checkpointing\n"
    "ckpt = Checkpointing.from_env()\n"
    "step = ckpt.resume_step(lambda path: int(Path(path).read_text()))\n"
    "print('resumed at', step, flush=True)\n"
    "while True:\n"
    "    step += 1\n"
    "    time.sleep(0.02)\n"
    "    if ckpt.due(step):\n"
    "        ckpt.save(step, lambda path: Path(path).write_text(str(step)))\n"
)


def saves(events: list[BackendEvent]) -> list[dict[str, Any]]:
    """The details of the checkpoint_saved events."""
    return [dict(e.detail) for e in events if e.kind == "checkpoint_saved"]


def test_a_checkpoint_request_is_answered_by_a_save_that_is_reported(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, events = make_backend(tmp_path)
        env = {"WANKA_CHECKPOINT_INTERVAL_S": "0.2"}
        await backend.start(Assignment(5, (0,), TRAINER, env))
        await wait_for(lambda: len(saves(events)) >= 2, "two periodic saves")
        saved = await backend.checkpoint(5, request_id="c-1", timeout_s=5)
        assert (saved["kind"], saved["request_id"]) == ("requested", "c-1")
        assert saves(events)[-1] == saved  # reported before the request is answered
        assert Path(saved["location"]).read_text() == str(saved["step"])
        assert {s["kind"] for s in saves(events)[:-1]} == {"periodic"}
        assert backend.step(5) >= saved["step"]
        await backend.stop(5)
        result = await backend.wait(5)
        assert result.exit_code == -signal.SIGTERM and result.step >= saved["step"]

        # Started again: it resumes from the newest save, and old saves are not re-reported.
        before = len(saves(events))
        await backend.start(Assignment(5, (0,), TRAINER, env))
        assert backend.step(5) == saves(events)[-1]["step"]
        await wait_for(lambda: len(saves(events)) > before, "a save of the second run")
        assert saves(events)[before]["step"] > saves(events)[before - 1]["step"]
        await backend.stop(5)
        tail = (await backend.wait(5)).log_tail
        assert f"resumed at {saves(events)[before - 1]['step']}" in tail

    run(scenario())


def test_a_request_to_a_process_that_ignores_the_contract_times_out_and_spares_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(6, (0,), python("import time; time.sleep(60)")))
        await asyncio.sleep(0.3)  # the interpreter is up: SIGUSR1 would end it by default
        with pytest.raises(TimeoutError, match="no checkpoint of workload 6 landed within 0.4 s"):
            await backend.checkpoint(6, request_id="c-2", timeout_s=0.4)
        assert backend.telemetry()[0].util >= 80  # still running: it was not signalled
        await backend.stop(6)
        assert (await backend.wait(6)).exit_code == -signal.SIGTERM

    run(scenario())


def test_a_request_to_a_workload_that_ends_first_fails_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(8, (0,), python("import time; time.sleep(0.3)")))
        waiter = asyncio.create_task(backend.wait(8))
        with pytest.raises(LookupError, match="ended before saving"):
            await backend.checkpoint(8, request_id="c-3", timeout_s=10)
        assert (await waiter).exit_code == 0
        with pytest.raises(LookupError, match="not running"):
            await backend.checkpoint(8)

    run(scenario())


def test_a_leftover_of_an_earlier_agent_is_stopped_before_the_workload_starts_again(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        workdir = tmp_path / "state" / "workloads" / "9"
        with left_behind(workdir, [0], workload_id="9") as leftover:
            started = time.monotonic()
            backend, _ = make_backend(tmp_path)
            await backend.start(Assignment(9, (0,), python("print('fresh')")))
            assert leftover.wait(timeout=5) == -signal.SIGTERM
            assert time.monotonic() - started < 2.0  # it ended on SIGTERM, within the grace
            assert (await backend.wait(9)).log_tail == ("fresh",)

    run(scenario())


def test_an_unrelated_process_under_a_stale_pid_file_is_left_alone(tmp_path: Path) -> None:
    async def scenario() -> None:
        with left_behind(tmp_path / "state" / "workloads" / "9", [0]) as stranger:
            backend, _ = make_backend(tmp_path)
            await backend.start(Assignment(9, (0,), python("pass")))
            await backend.wait(9)
            assert stranger.poll() is None

    run(scenario())


def test_the_log_tail_skips_a_line_cut_by_the_read_window(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("x" * 70_000 + "\nlast\n")
    assert log_tail(log, 0, 10) == ("last",)
    long = tmp_path / "long.log"
    long.write_text("y" * 1000 + "\n")
    assert log_tail(long, 0, 10) == ("y" * 400,)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone as far as the GPUs are concerned.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# Follows the contract, but every save it tries fails.
FAILING_SAVER = python(
    "import time\n"
    "from scheduler.agent.contract import Checkpointing\n"
    "ckpt = Checkpointing.from_env()\n"
    "print('ready', flush=True)\n"
    "step = 0\n"
    "def broken(path):\n"
    "    raise OSError('disk full')\n"
    "while True:\n"
    "    step += 1\n"
    "    time.sleep(0.02)\n"
    "    if ckpt.due(step):\n"
    "        try:\n"
    "            ckpt.save(step, broken)\n"
    "        except OSError:\n"
    "            pass\n"
)


def test_a_failed_save_fails_the_request_and_is_reported_as_failed(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, events = make_backend(tmp_path)
        await backend.start(Assignment(4, (0,), FAILING_SAVER))
        log = tmp_path / "state" / "workloads" / "4" / "output.log"
        await wait_for(lambda: "ready" in log.read_text(), "the handler to be installed")
        with pytest.raises(RuntimeError, match="the save failed: OSError..disk full"):
            await backend.checkpoint(4, request_id="c-5", kind="triggered", timeout_s=5)
        [failed] = saves(events)
        assert (failed["status"], failed["kind"], failed["request_id"]) == (
            "failed",
            "triggered",
            "c-5",
        )
        assert backend.step(4) == 0  # a failed save is no progress
        await backend.stop(4)
        await backend.wait(4)

    run(scenario())


def test_output_is_read_in_whole_lines_per_run_and_the_last_partial_one_at_the_end(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(3, (0,), python("print('old run')")))
        await backend.wait(3)
        code = (
            "import sys, time\nprint('one'); print('two', file=sys.stderr)\n"
            "sys.stdout.write('thr'); sys.stdout.flush(); time.sleep(0.5); sys.stdout.write('ee')"
        )
        await backend.start(Assignment(3, (0,), python(code)))
        await wait_for(lambda: backend.output(3, 0, 1024).lines == ("one", "two"), "two lines")
        first = backend.output(3, 0, 1024)
        assert backend.output(3, first.next_offset, 1024).lines == ()  # 'thr' is unfinished
        await backend.wait(3)
        assert backend.output(3, first.next_offset, 1024).lines == ("three",)
        assert backend.output(4, 0, 1024) == Output((), 0)  # a workload it never ran

    asyncio.run(scenario())


def test_reading_output_cuts_long_lines_and_skips_ahead_when_far_behind(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("a" * 5000 + "\n" + "b" * 100)
    long = read_output(log, 0, 0, 64 * 1024, ended=True)
    assert long.lines == ("a" * (LOG_LINE_CHARS - 1) + "…", "b" * 100)
    assert long.next_offset == 5101
    assert read_output(log, 0, 0, 1000, ended=False) == Output(("a" * 1000,), 1000)  # a piece
    flood = tmp_path / "flood.log"
    flood.write_bytes(b"x\n" * (OUTPUT_BEHIND_BYTES // 2 + 10))
    caught_up = read_output(flood, 0, 0, 1024, ended=False)
    assert (
        caught_up.lines[0]
        == f"[wanka-agent: {flood.stat().st_size - 1024} bytes of output skipped]"
    )
    assert caught_up.lines[1:] == ("x",) * 512
    assert caught_up.next_offset == flood.stat().st_size


def test_a_replica_is_not_serving_until_its_server_accepts_connections(tmp_path: Path) -> None:
    """A model server loads for a while before it listens: until then the agent reports no
    endpoint, so nobody is sent to a port that refuses them."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import os, socket, time\n"
        "time.sleep(0.5)  # loading the weights\n"
        "s = socket.socket(); s.bind(('127.0.0.1', int(os.environ['PORT']))); s.listen()\n"
        "time.sleep(30)\n"
    )

    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(8, (0,), python(code), serve_port=port))
        assert backend.serving(8) is None
        await wait_for(lambda: backend.serving(8) is not None, "the server to listen")
        assert backend.serving(8).port == port
        await backend.stop(8)

    run(scenario())


@pytest.mark.parametrize(
    "written",
    ['{"in_flight": -1, "requests_per_s": 2}', '{"in_flight": 3, "requests_per_s": NaN}',
     '{"in_flight": 3, "requests_per_s": -Infinity}', '{"in_flight": 18446744073709551616, '
     '"requests_per_s": 1}', '{"in_flight": true, "requests_per_s": 1}', "[1, 2]", "9" * 100_000],
)  # fmt: skip
def test_a_replicas_bad_load_file_costs_only_its_own_load_report(tmp_path: Path, written) -> None:
    """A replica writes what it likes in its load file: a value no heartbeat can carry is
    ignored (its place is still reported), and the node's heartbeat goes out as ever."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve = (
        "import os, socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', int(os.environ['PORT']))); s.listen()\n"
        "open(os.environ['WANKA_LOAD_FILE'], 'w').write(sys.argv[1])\n"
        "time.sleep(30)\n"
    )

    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        command = shlex.join([sys.executable, "-c", serve, written])
        await backend.start(Assignment(8, (0,), command, serve_port=port))
        await wait_for(lambda: backend.serving(8) is not None, "the server to listen")
        await asyncio.sleep(0.3)  # the load file is written just after the listen
        serving = backend.serving(8)
        assert (serving.port, serving.in_flight, serving.requests_per_s) == (port, None, None)
        item = {"workload_id": 8, "state": "running", "exit_code": None, "step": 0,
                "serving": serving.message()}  # fmt: skip
        beat = encode("heartbeat", generation=1, gpus=[], workloads=[item])
        assert parse(beat, AGENT)["workloads"][0]["serving"]["port"] == port
        (tmp_path / "state" / "workloads" / "8" / "load.json").write_text(
            '{"in_flight": 4, "requests_per_s": 2.5}'
        )
        assert (backend.serving(8).in_flight, backend.serving(8).requests_per_s) == (4, 2.5)
        await backend.stop(8)

    run(scenario())


def test_the_gpus_report_their_processes_and_the_health_check_fails_on_a_stranger(
    tmp_path: Path,
) -> None:
    """A rank a launcher starts in a session of its own is seen by the hardware (here a
    simulated machine's compute processes stand in for NVML's) and counted as its workload's;
    a process group an earlier agent left that fencing could not end is a stranger, on the GPUs
    it was given, and fails the health check until it is gone."""

    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        spawn_rank = (
            "import subprocess, sys, time; "
            "r = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
            "start_new_session=True); print(r.pid, flush=True); time.sleep(60)"
        )
        await backend.start(Assignment(3, (1, 2), python(spawn_rank)))
        rank = await _first_line(backend, 3)
        backend._machine.compute_processes = lambda: {2: [int(rank)]}
        workdir = tmp_path / "state" / "workloads" / "9"
        try:
            with left_behind(workdir, [0], workload_id="9") as leftover:
                seen = {s.index: s.processes for s in backend.telemetry()}
                main = backend._procs[3].process.pid
                assert seen[0] == (GpuProcess(leftover.pid, None),)
                assert seen[1] == (GpuProcess(main, 3),)
                assert seen[2] == (GpuProcess(main, 3),)  # the rank is the workload's, once
                assert seen[3] == ()
                with pytest.raises(RuntimeError, match=f"pid {leftover.pid} on GPU 0"):
                    await backend.health_check()
                assert await backend.fence() == [9]
                assert "no stray processes" in await backend.health_check()
        finally:
            await backend.stop(3)
            await backend.wait(3)
            os.kill(int(rank), signal.SIGKILL)

    run(scenario())


async def _first_line(backend: ProcessBackend, wid: int) -> str:
    while not (lines := backend.output(wid, 0, 4096).lines):
        await asyncio.sleep(0.05)
    return lines[0]


def test_a_gpu_off_the_bus_fails_the_health_check(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        assert "4 simulated GPUs answer" in await backend.health_check()
        backend.inject_fault("xid-79", 2, {})
        with pytest.raises(NodeFault, match="GPU 2 has fallen off the bus"):
            await backend.health_check()

    run(scenario())


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


ESCAPE = (  # a rank that a launcher starts in a session of its own, and that outlives it
    "import subprocess, sys, time; time.sleep(0.5); "
    "r = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
    "start_new_session=True); print(r.pid, flush=True)"
)


@pytest.mark.skipif(cgroup_home("node-a") is None, reason="no cgroup v2 this process may write")
def test_a_rank_in_a_session_of_its_own_ends_with_its_run_through_the_cgroup(
    tmp_path: Path,
) -> None:
    """Outside the run's process group, the rank is still in its cgroup: when the run's main
    process ends, the rank ends too, and no process holds the GPU."""

    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        await backend.start(Assignment(4, (0,), python(ESCAPE + "; import time; time.sleep(1)")))
        rank = int(await _first_line(backend, 4))  # started: it sleeps a minute
        assert (await backend.wait(4)).exit_code == 0
        await wait_for(lambda: not _alive(rank), "the escaped rank to end")

    run(scenario())


@pytest.mark.skipif(cgroup_home("node-a") is None, reason="no cgroup v2 this process may write")
def test_a_rank_forked_in_the_runs_first_moment_is_in_its_cgroup(tmp_path: Path) -> None:
    """A shell forks a rank into a session of its own at once, before any Python could start:
    the run waited at its gate until it was in its cgroup, so the rank is there too, and ends
    with the run."""

    async def scenario() -> None:
        backend, _ = make_backend(tmp_path)
        fork = shlex.join(["/bin/sh", "-c", "setsid sleep 60 & echo $!; sleep 60"])
        await backend.start(Assignment(6, (0,), fork))
        rank = int(await _first_line(backend, 6))
        assert "/workload-6" in Path(f"/proc/{rank}/cgroup").read_text()
        await backend.stop(6)
        await backend.wait(6)
        await wait_for(lambda: not _alive(rank), "the rank to end with its run")

    run(scenario())


@pytest.mark.skipif(cgroup_home("node-a") is None, reason="no cgroup v2 this process may write")
def test_fencing_ends_what_a_crashed_agent_left_in_a_runs_cgroup(tmp_path: Path) -> None:
    """The agent died; its run's main process has ended since, but a rank in a session of its
    own runs on, in the run's cgroup: a new agent's fence ends it, and says so."""

    async def scenario() -> None:
        crashed, _ = make_backend(tmp_path)
        await crashed.start(Assignment(5, (0,), python(ESCAPE)))
        rank = int(await _first_line(crashed, 5))
        record = recorded_group(tmp_path / "state" / "workloads" / "5")
        await crashed._procs[5].process.wait()  # the main process ended; the agent never saw
        assert _alive(rank) and record["cgroup"]
        successor, _ = make_backend(tmp_path)
        assert await successor.fence() == [5]
        await wait_for(lambda: not _alive(rank), "the fenced rank to end")
        assert not Path(record["cgroup"]).exists()

    run(scenario())


PEEK = """import json, os, sys
results = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        open(path, "rb").read()
        results[name] = "read"
    except OSError as error:
        results[name] = type(error).__name__
print(json.dumps(results), flush=True)
"""


# An interpreter any user may run (this one may live in root's home).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent makes each tenant's user as root")
@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no python3 other users may run")
def test_two_tenants_jobs_on_one_node_cannot_read_each_other_nor_the_agent() -> None:
    """Tenant 1's job keeps a secret in its files and its environment; tenant 2's job on the
    same node tries to read them, its output, the agent's token and the agent's environment.
    (The state directory is where other users can reach their own, as under /var/lib.)"""
    home = Path(tempfile.mkdtemp(dir="/var/tmp"))
    home.chmod(0o711)
    state = home / "state"
    state.mkdir()
    (state / "token").write_text("wn_the-nodes-token")
    (state / "token").chmod(0o600)

    async def scenario() -> None:
        machine = SimulatedGpus("node-a", "H100-SXM-80GB", 4, 81559, seed=1)
        backend = ProcessBackend(machine, state, grace_s=5.0, poll_s=0.05,
                                 base_env={"PATH": os.environ["PATH"]})  # fmt: skip
        assert backend.job_users
        keep = "open('secret.txt', 'w').write('mine'); print('kept', flush=True); " + (
            "import time; time.sleep(60)"
        )
        keep = shlex.join([SYSTEM_PYTHON, "-c", keep])
        await backend.start(Assignment(1, (0,), keep, {"SECRET": "s3"}, tenant=1))
        assert await _first_line(backend, 1) == "kept"
        mine = state / "workloads" / "1"
        targets = {
            "file": str(mine / "secret.txt"),
            "output": str(mine / "output.log"),
            "environ": f"/proc/{backend._procs[1].process.pid}/environ",
            "token": str(state / "token"),
            "agent": f"/proc/{os.getpid()}/environ",
        }
        command = shlex.join([SYSTEM_PYTHON, "-c", PEEK, json.dumps(targets)])
        await backend.start(Assignment(2, (1,), command, tenant=2))
        assert (await backend.wait(2)).exit_code == 0
        seen = json.loads(backend.output(2, 0, 4096).lines[0])
        assert seen == dict.fromkeys(targets, "PermissionError")
        assert (mine.stat().st_uid, mine.stat().st_mode & 0o777) == (tenant_user(1)[0], 0o700)
        await backend.stop(1)
        await backend.wait(1)

    try:
        run(scenario())
    finally:
        shutil.rmtree(home, ignore_errors=True)


SLEEP = python("import time; time.sleep(60)")


def test_an_agent_that_cannot_keep_tenants_apart_runs_one_tenants_work_at_a_time(
    tmp_path: Path,
) -> None:
    """Without users of their own (the agent is not root), tenants are kept apart by node: the
    facts say so, a second tenant's job is refused while another's runs, and taken after."""
    backend, _ = make_backend(tmp_path)
    backend.job_users = False
    assert backend.inventory().facts.isolates_tenants is False
    node = backend.inventory().to_message()
    hello = encode("hello", agent_version="1", generation=0, node=node, workloads=[])
    assert parse(hello, AGENT)["node"]["facts"]["isolates_tenants"] is False

    async def scenario() -> None:
        await backend.start(Assignment(1, (0,), SLEEP, tenant=1))
        await backend.start(Assignment(2, (1,), SLEEP, tenant=1))  # the same tenant's: taken
        with pytest.raises(ValueError, match="another tenant's work and cannot keep tenants apart"):
            await backend.start(Assignment(3, (2,), SLEEP, tenant=2))
        for wid in (1, 2):
            await backend.stop(wid)
            await backend.wait(wid)
        await backend.start(Assignment(3, (2,), SLEEP, tenant=2))  # the node is free of tenant 1
        await backend.stop(3)
        await backend.wait(3)

    run(scenario())


def test_a_runs_cgroup_bounds_memory_and_cpu_to_the_jobs_share_of_the_node(tmp_path: Path) -> None:
    """A job of 2 of the node's 4 GPUs may use half its memory and half its CPUs. A plain folder
    stands in for the agent's cgroup here: this machine's cgroup v2 hierarchy has not the memory
    and cpu controllers (they are on v1), so the files the kernel would read are read back."""
    backend, _ = make_backend(tmp_path)
    home = tmp_path / "cgroup"
    home.mkdir()
    backend._cgroups = str(home)
    facts = backend.inventory().facts
    assert facts.memory_mb > 0 and facts.cpu_count > 0

    async def scenario() -> None:
        await backend.start(Assignment(1, (0, 1), SLEEP))
        group = home / "workload-1"
        assert (group / "memory.max").read_text() == str(int(facts.memory_mb / 2 * 2**20))
        assert (group / "cpu.max").read_text() == f"{int(facts.cpu_count / 2 * 100_000)} 100000"
        assert (group / "cgroup.procs").read_text() == str(backend._procs[1].process.pid)
        await backend.stop(1)
        await backend.wait(1)

    run(scenario())


def test_a_share_jobs_cgroup_is_bounded_to_its_part_of_its_gpus_share(tmp_path: Path) -> None:
    """A quarter of one of the node's 4 GPUs may use a sixteenth of its memory and CPUs (eight
    quarter shares and a whole-GPU job each held to one GPU's share overran the node)."""
    backend, _ = make_backend(tmp_path)
    home = tmp_path / "cgroup"
    home.mkdir()
    backend._cgroups = str(home)
    facts = backend.inventory().facts

    async def scenario() -> None:
        await backend.start(Assignment(1, (0,), SLEEP, slices=2))
        group = home / "workload-1"
        assert (group / "memory.max").read_text() == str(int(facts.memory_mb / 16 * 2**20))
        await backend.stop(1)
        await backend.wait(1)

    run(scenario())


@pytest.mark.parametrize(
    ("profile", "part"), [("1g.10gb", 1 / 7), ("3g.40gb", 0.5), ("7g.80gb", 1.0)]
)
def test_a_mig_jobs_part_of_its_gpu_is_its_charge(profile: str, part: float) -> None:
    assignment = Assignment(1, (0,), SLEEP, mig=profile)
    assert gpu_part(assignment, 80 * 1024) == pytest.approx(part)
