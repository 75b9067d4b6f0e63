"""A simulated inference replica: a small HTTP server on the node, standing in for a model
server, so that load generators, load balancers and the autoscaler meet real sockets.

`POST /v1/completions` with `{"prompt_tokens": n, "output_tokens": m}` is answered after the
time a replica of the node's GPU model would take (`scheduler.inference.service_s`), with up
to `slots` requests served at once (continuous batching) and the rest waiting their turn; the
answer says how long it waited and was served. `GET /health` answers 200. The replica counts
what the heartbeat reports: requests in flight (served or waiting) and requests finished per
second over the last `RATE_WINDOW_S`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Any

from scheduler.inference import Request, service_s

logger = logging.getLogger(__name__)

RATE_WINDOW_S = 10.0
MAX_BODY_BYTES = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Payload Too Large"}


class SimulatedReplica:
    """One replica's server: `start` it, read its `load`, `close` it."""

    def __init__(self, gpu_model: str, slots: int = 32) -> None:
        self.gpu_model = gpu_model
        self.in_flight = 0
        self._slots = asyncio.Semaphore(slots)
        self._finished: deque[float] = deque()
        self._server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen (on an ephemeral port by default: many simulated nodes share one host);
        returns the port."""
        self._server = await asyncio.start_server(self._connection, host, port)
        return self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        """Stop listening and drop the connections (the process is gone)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def requests_per_s(self) -> float:
        """Requests finished per second over the last `RATE_WINDOW_S`."""
        since = time.monotonic() - RATE_WINDOW_S
        while self._finished and self._finished[0] < since:
            self._finished.popleft()
        return len(self._finished) / RATE_WINDOW_S

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request of a kept-alive connection; False when the client is done."""
        head = await reader.readuntil(b"\r\n\r\n")
        line, *fields = head.decode("latin-1").split("\r\n")
        method, path, _ = (line.split(" ") + ["", ""])[:3]
        headers = dict(f.split(":", 1) for f in fields if ":" in f)
        headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            await _answer(writer, 413, {"reason": f"a body is at most {MAX_BODY_BYTES} bytes"})
            return False
        body = await reader.readexactly(length)
        if method == "GET" and path == "/health":
            await _answer(writer, 200, {"ok": True})
        elif method == "POST" and path == "/v1/completions":
            status, answer = await self._complete(body)
            await _answer(writer, status, answer)
        else:
            await _answer(writer, 404, {"reason": f"no {method} {path} here"})
        return headers.get("connection", "").lower() != "close"

    async def _complete(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            asked = json.loads(body)
            request = Request(0.0, int(asked["prompt_tokens"]), int(asked["output_tokens"]))
            if request.prompt_tokens < 0 or request.output_tokens < 0:
                raise ValueError("token counts cannot be negative")
        except (ValueError, KeyError, TypeError) as error:
            return 400, {"reason": f"expected prompt_tokens and output_tokens: {error}"}
        arrived = time.monotonic()
        self.in_flight += 1
        try:
            async with self._slots:
                began = time.monotonic()
                await asyncio.sleep(service_s(request, self.gpu_model))
        finally:
            self.in_flight -= 1
        done = time.monotonic()
        self._finished.append(done)
        return 200, {"queued_s": round(began - arrived, 4), "served_s": round(done - began, 4)}


async def _answer(writer: asyncio.StreamWriter, status: int, answer: dict[str, Any]) -> None:
    body = json.dumps(answer).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
