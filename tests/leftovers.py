"""A process group a crashed agent left behind, for the tests of fencing."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path


@contextlib.contextmanager
def left_behind(workdir: Path, gpus: list[int], workload_id: str | None = None):
    """A process in a session of its own, recorded in `workdir` as a run on `gpus` (as an agent
    records what it starts), carrying `workload_id` in its environment when given (else it is
    an unrelated process under a stale record); yields its Popen, and kills it at the end."""
    env = {**os.environ, "WANKA_WORKLOAD_ID": workload_id} if workload_id else None
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert process.stdout.readline() == b"up\n"  # past exec: its own environment
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "pgid").write_text(json.dumps({"pgid": process.pid, "gpus": gpus}))
        yield process
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
