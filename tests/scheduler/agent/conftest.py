"""A real WebSocket server standing in for the portal's agent consumer, for agent tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from scheduler.agent.protocol import AGENT, ProtocolError, encode, parse

# Generous for a loaded CI machine; every wait in a passing run takes milliseconds.
WAIT_S = 3.0

_INVALID = "(invalid)"


class Peer:
    """The server's end of one agent connection: what the agent sent, and a way to answer."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.headers: Headers = ws.request.headers
        self.received: list[dict[str, Any]] = []
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def receive(self, frame: str | bytes) -> None:
        """Record one frame; a frame the protocol refuses fails the next `expect`."""
        try:
            message = parse(frame, AGENT)
        except ProtocolError as exc:
            message = {"type": _INVALID, "error": str(exc)}
        self.received.append(message)
        self._inbox.put_nowait(message)

    async def expect(
        self, type_: str, where: Callable[[dict[str, Any]], bool] = lambda m: True
    ) -> dict[str, Any]:
        """The next message of `type_` that satisfies `where`, skipping any others."""
        async with asyncio.timeout(WAIT_S):
            while True:
                message = await self._inbox.get()
                assert message["type"] != _INVALID, f"the agent sent {message['error']}"
                if message["type"] == type_ and where(message):
                    return message

    async def send(self, type_: str, **fields: Any) -> None:
        """Send one protocol message to the agent."""
        await self.ws.send(encode(type_, **fields))

    async def send_raw(self, frame: str | bytes) -> None:
        """Send anything at all."""
        await self.ws.send(frame)

    async def close(self) -> None:
        """Close the connection from the server's side."""
        await self.ws.close()


class AgentServer:
    """`async with AgentServer() as server`: listens on 127.0.0.1, a free port."""

    def __init__(self) -> None:
        self.connections: asyncio.Queue[Peer] = asyncio.Queue()
        self.hellos: dict[str, str] = {}  # hostname -> Authorization header
        self.refuse = False  # answer handshakes with 503, as a server that is down would
        self.refused = 0
        self._server: Server | None = None

    async def __aenter__(self) -> AgentServer:
        self._server = await serve(self._handle, "127.0.0.1", 0, process_request=self._gate)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        """Where agents connect."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}/ws/agent/"

    async def next_connection(self) -> Peer:
        """The next agent connection to arrive."""
        async with asyncio.timeout(WAIT_S):
            return await self.connections.get()

    def _gate(self, connection: ServerConnection, request: Request) -> Response | None:
        if not self.refuse:
            return None
        self.refused += 1
        return connection.respond(503, "down for the test\n")

    async def _handle(self, ws: ServerConnection) -> None:
        peer = Peer(ws)
        self.connections.put_nowait(peer)
        try:
            async for frame in ws:
                peer.receive(frame)
                last = peer.received[-1]
                if last["type"] == "hello":
                    self.hellos[last["node"]["hostname"]] = peer.headers["Authorization"]
        except ConnectionClosed:
            pass


@pytest.fixture
def agent_server() -> type[AgentServer]:
    """The AgentServer class; tests enter it inside their own event loop."""
    return AgentServer


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on, so connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def no_workload_outlives_its_test(monkeypatch: pytest.MonkeyPatch):
    """Workloads outlive their agent by design (a control-plane outage must not kill
    training), so a test's real processes are killed here, with their process groups."""
    from scheduler.agent.processes import ProcessBackend

    created: list[ProcessBackend] = []
    original = ProcessBackend.__init__

    def tracked(self: ProcessBackend, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(ProcessBackend, "__init__", tracked)
    yield
    for backend in created:
        for proc in backend._procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.process.pid, signal.SIGKILL)
