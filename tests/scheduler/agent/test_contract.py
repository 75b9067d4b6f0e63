"""The checkpoint contract: atomic saves, the manifest, requests and which checkpoint to resume."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from scheduler.agent.contract import (
    ENV_PROGRESS_FILE,
    MANIFEST_FILE,
    PROGRESS_EVERY_S,
    REQUEST_FILE,
    Checkpointing,
    CheckpointRequest,
    ManifestEntry,
    ManifestTail,
    latest_complete,
    read_manifest,
    read_progress,
    read_request,
    write_request,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write_text(text: str):
    """A save_fn that writes `text` at the path it is given."""
    return lambda path: Path(path).write_text(text)


def helper(directory: Path, **kwargs) -> Checkpointing:
    """A helper on `directory`, without a signal handler (file-based requests)."""
    return Checkpointing(directory, **kwargs)


def entry(directory: Path, step: int, status: str = "complete", exists: bool = True) -> str:
    """One manifest line for a save of `step`, creating its file when it should exist."""
    path = directory / f"step-{step:09d}"
    if exists:
        path.write_text(f"state at {step}")
    fields = ManifestEntry(step, str(path), "periodic", 10, 0.1, None, status)
    return fields.to_json()


def test_a_save_lands_whole_and_only_then_is_written_in_the_manifest(tmp_path: Path) -> None:
    ckpt = helper(tmp_path)
    seen_during_save = []

    def save(path: str) -> None:
        Path(path).write_text("weights")
        seen_during_save.append((read_manifest(tmp_path), sorted(os.listdir(tmp_path))))

    saved = ckpt.save(120, save, suffix=".pt")
    manifest, files = seen_during_save[0]
    assert manifest == []  # nothing recorded while the file was still being written
    assert not any(name.startswith("step-") for name in files)  # only a temporary name
    assert saved.path == str(tmp_path / "step-000000120.pt")
    assert Path(saved.path).read_text() == "weights"
    assert (saved.step, saved.kind, saved.size_bytes, saved.status) == (
        120,
        "periodic",
        7,
        "complete",
    )
    assert read_manifest(tmp_path) == [saved]
    assert latest_complete(tmp_path) == saved


def test_a_failed_save_is_recorded_as_failed_and_never_becomes_the_latest(tmp_path: Path) -> None:
    ckpt = helper(tmp_path)
    good = ckpt.save(10, write_text("ok"))

    def broken(path: str) -> None:
        Path(path).write_text("half a checkpoi")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.save(20, broken)
    failed = read_manifest(tmp_path)[-1]
    assert (failed.step, failed.status) == (20, "failed") and "disk full" in failed.error
    assert not (tmp_path / "step-000000020").exists()
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []
    assert latest_complete(tmp_path) == good


def test_a_request_is_answered_by_the_next_save_and_then_cleared(tmp_path: Path) -> None:
    ckpt = helper(tmp_path)
    assert not ckpt.due(5)
    write_request(tmp_path, CheckpointRequest("c-17", "preemption"))
    assert ckpt.requested and ckpt.due(5)
    saved = ckpt.save(5, write_text("x"))
    assert (saved.kind, saved.request_id) == ("requested", "c-17")
    assert not (tmp_path / REQUEST_FILE).exists()
    assert not ckpt.due(6)


def test_a_request_that_arrives_during_a_save_stays_pending(tmp_path: Path) -> None:
    ckpt = helper(tmp_path)
    write_request(tmp_path, CheckpointRequest("first"))

    def save(path: str) -> None:
        Path(path).write_text("x")
        write_request(tmp_path, CheckpointRequest("second"))

    assert ckpt.save(1, save).request_id == "first"
    assert read_request(tmp_path) == CheckpointRequest("second")
    assert ckpt.due(2)


def test_a_failed_save_answers_its_request_so_the_agent_need_not_wait(tmp_path: Path) -> None:
    ckpt = helper(tmp_path)
    write_request(tmp_path, CheckpointRequest("c-9"))
    with pytest.raises(ValueError):
        ckpt.save(3, lambda path: (_ for _ in ()).throw(ValueError("no")))
    last = read_manifest(tmp_path)[-1]
    assert (last.request_id, last.status) == ("c-9", "failed")
    assert read_request(tmp_path) is None


def test_periodic_saves_follow_the_interval_and_never_repeat_a_step(tmp_path: Path) -> None:
    clock = Clock()
    ckpt = helper(tmp_path, interval_s=60.0, clock=clock)
    clock.now += 59
    assert not ckpt.due(1)
    clock.now += 1
    assert ckpt.due(2)
    ckpt.save(2, write_text("x"))
    assert not ckpt.due(2)
    clock.now += 30
    assert not ckpt.due(3)
    clock.now += 30
    assert ckpt.due(4)


def test_sigusr1_is_caught_and_the_request_file_says_what_is_asked(tmp_path: Path) -> None:
    """The signal no longer ends the script; alone (late, or stray) it asks for nothing: the
    agent writes its request first, and a signal after that request was answered must not
    make a second save."""
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        ckpt = Checkpointing.from_env({"WANKA_CHECKPOINT_DIR": str(tmp_path)})
        os.kill(os.getpid(), signal.SIGUSR1)  # still here
        assert not ckpt.requested
        write_request(tmp_path, CheckpointRequest("c-9"))
        os.kill(os.getpid(), signal.SIGUSR1)
        assert ckpt.requested and ckpt.due(1)
        assert ckpt.save(1, write_text("x")).kind == "requested"
        os.kill(os.getpid(), signal.SIGUSR1)  # a late signal for the answered request
        assert not ckpt.requested and not ckpt.due(2)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_without_a_checkpoint_directory_the_helper_does_nothing(tmp_path: Path) -> None:
    ckpt = Checkpointing.from_env({}, install_signal=False)
    assert not ckpt.enabled and not ckpt.due(1)
    assert ckpt.resume_step(lambda path: pytest.fail("nothing to load")) == 0
    with pytest.raises(RuntimeError, match="WANKA_CHECKPOINT_DIR is not set"):
        ckpt.save(1, write_text("x"))


RESUME_CASES = [
    # (manifest lines as (step, status, file exists), env WANKA_RESUME_FROM, expected step)
    pytest.param([], None, None, id="nothing saved yet: start from 0"),
    pytest.param([(10, "complete", True), (30, "complete", True)], None, 30, id="the newest"),
    pytest.param(
        [(30, "complete", True), (10, "complete", True)],
        None,
        30,
        id="the highest step, whatever the line order",
    ),
    pytest.param(
        [(10, "complete", True), (30, "failed", True)], None, 10, id="a failed save is skipped"
    ),
    pytest.param(
        [(10, "complete", True), (30, "complete", False)],
        None,
        10,
        id="a save whose file is gone is skipped",
    ),
    pytest.param([(10, "complete", True)], "elsewhere", None, id="the control plane's choice wins"),
]


@pytest.mark.parametrize(("lines", "resume_from", "expected"), RESUME_CASES)
def test_the_checkpoint_to_resume_from(
    tmp_path: Path, lines: list, resume_from: str | None, expected: int | None
) -> None:
    manifest = [entry(tmp_path, step, status, exists) for step, status, exists in lines]
    (tmp_path / MANIFEST_FILE).write_text("".join(line + "\n" for line in manifest))
    env = {"WANKA_CHECKPOINT_DIR": str(tmp_path)}
    if resume_from:
        env["WANKA_RESUME_FROM"] = str(tmp_path / resume_from)
    ckpt = Checkpointing.from_env(env, install_signal=False)
    location = ckpt.resume_location()
    if resume_from:
        assert location == env["WANKA_RESUME_FROM"]
    elif expected is None:
        assert location is None and ckpt.resume_step(lambda path: 1 / 0) == 0
    else:
        assert location == str(tmp_path / f"step-{expected:09d}")
        assert ckpt.resume_step(lambda path: int(Path(path).read_text().split()[-1])) == expected


def test_a_torn_or_garbled_manifest_line_is_not_an_entry(tmp_path: Path) -> None:
    good = entry(tmp_path, 10)
    torn = entry(tmp_path, 20)[:-9]
    (tmp_path / MANIFEST_FILE).write_text(
        f'{good}\n{{"step": "many"}}\nnot json\n{json.dumps({"step": 1})}\n{torn}'
    )
    assert [e.step for e in read_manifest(tmp_path)] == [10]
    assert latest_complete(tmp_path).step == 10


def test_the_tail_reads_only_complete_lines_appended_since_it_last_looked(tmp_path: Path) -> None:
    manifest = tmp_path / MANIFEST_FILE
    manifest.write_text(entry(tmp_path, 1) + "\n")
    tail = ManifestTail(tmp_path)  # from the end: the first save is old news
    assert tail.poll() == []
    line = entry(tmp_path, 2)
    with open(manifest, "a") as file:
        file.write(line[:20])
        file.flush()
        assert tail.poll() == []  # half a line: not yet
        file.write(line[20:] + "\n")
    assert [e.step for e in tail.poll()] == [2]
    assert tail.poll() == []
    assert [e.step for e in ManifestTail(tmp_path, from_end=False).poll()] == [1, 2]


def test_leftovers_of_a_save_that_died_are_removed_on_start(tmp_path: Path) -> None:
    (tmp_path / ".step-000000040.pt.tmp-999").write_text("half")
    helper(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_may_be_a_directory(tmp_path: Path) -> None:
    def save(path: str) -> None:
        os.mkdir(path)
        Path(path, "shard-0").write_text("aaaa")
        Path(path, "shard-1").write_text("bb")

    saved = helper(tmp_path).save(7, save)
    assert saved.size_bytes == 6 and Path(saved.path, "shard-1").read_text() == "bb"


def test_a_save_a_fault_triggered_is_recorded_as_triggered(tmp_path: Path) -> None:
    ckpt = helper(tmp_path)
    write_request(tmp_path, CheckpointRequest("c-4", "fault 12", kind="triggered"))
    saved = ckpt.save(9, write_text("x"))
    assert (saved.kind, saved.request_id) == ("triggered", "c-4")
    assert saved.event_detail()["status"] == "complete"


def test_an_async_save_stalls_for_its_copy_and_is_in_the_manifest_only_once_persisted(
    tmp_path: Path,
) -> None:
    import threading
    import time

    ckpt = Checkpointing(tmp_path, policy="async")
    write_request(tmp_path, CheckpointRequest("c-9", "every 20 min", kind="async"))
    assert ckpt.due(10) and ckpt.next_kind() == "async"
    release = threading.Event()

    def persist(state, path):
        release.wait(5)  # the disk is slow: training goes on meanwhile
        Path(path).write_text(state)

    def snapshot():
        time.sleep(0.05)  # the copy to host memory: what training waits for
        return "weights at step 10"

    started = time.monotonic()
    ckpt.save_async(10, snapshot, persist, suffix=".pt")
    waited = time.monotonic() - started
    assert 0.05 <= waited < 1
    assert read_manifest(tmp_path) == []  # not persisted yet: nothing to resume from
    assert (tmp_path / REQUEST_FILE).exists()
    release.set()
    ckpt.wait_persisted()
    [entry] = read_manifest(tmp_path)
    assert (entry.kind, entry.request_id, entry.status) == ("async", "c-9", "complete")
    assert 0.05 <= entry.stall_s < entry.duration_s
    assert entry.event_detail()["stall_s"] == round(entry.stall_s, 6)
    assert Path(entry.path).read_text() == "weights at step 10"
    assert not (tmp_path / REQUEST_FILE).exists()  # answered once persisted


def test_a_failed_async_persist_is_recorded_failed_and_answers_its_request(tmp_path: Path) -> None:
    ckpt = Checkpointing(tmp_path, policy="async")
    write_request(tmp_path, CheckpointRequest("c-3", kind="async"))

    def persist(state, path):
        raise OSError("no space left on device")

    ckpt.save_async(5, lambda: "state", persist)
    ckpt.wait_persisted()
    [entry] = read_manifest(tmp_path)
    assert (entry.status, entry.request_id) == ("failed", "c-3") and "no space" in entry.error
    assert latest_complete(tmp_path) is None


def test_progress_is_reported_at_most_once_a_period_and_read_back(tmp_path: Path) -> None:
    """`report` at every step rewrites the file only once every PROGRESS_EVERY_S; `due` reports
    too; the agent reads the newest step, and nothing before the first report."""
    clock, path = Clock(), tmp_path / "progress"
    ckpt = Checkpointing(None, clock=clock, progress_file=path)
    assert Checkpointing.from_env({ENV_PROGRESS_FILE: str(path)}).progress_file == path
    assert read_progress(path) is None
    ckpt.report(1)
    assert read_progress(path) == 1
    for step in range(2, 500):  # within the period: no write at all
        ckpt.report(step)
    assert read_progress(path) == 1
    clock.now += PROGRESS_EVERY_S
    assert not ckpt.due(500)  # no checkpoint directory: never due, but it reports
    assert read_progress(path) == 500
    assert [p.name for p in tmp_path.iterdir()] == ["progress"]  # no temporary file left
    path.write_text("not a step\n")
    assert read_progress(path) is None


def test_without_a_progress_file_reporting_does_nothing(tmp_path: Path) -> None:
    ckpt = helper(tmp_path)
    ckpt.report(7)
    assert not any(p.name.startswith("progress") for p in tmp_path.iterdir())
