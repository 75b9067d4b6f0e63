"""The node agent: one WebSocket connection to the server, converging to its desired state.

The agent is level-triggered. On every connection it says `hello` with what it runs; the server
answers with the full `desired_state`, and the agent starts what is listed and not running,
stops what runs and is not listed, and reports the generation it converged to. A lost message
therefore costs a delay, never a wrong state: that is also why events that happen while the
connection is down are not queued (the next `hello` carries their outcome).

Workload bookkeeping, per workload id:

- A listed workload that exits on its own stays "exited" and is not restarted while it is
  listed; it is forgotten once a desired state no longer lists it.
- A running workload that a desired state no longer lists is stopped (exit code -15) and is
  reported "exited" until the next desired state, which forgets it; if that desired state lists
  the id again, it is started afresh.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException

from scheduler.agent.backends import Assignment, Backend, WorkloadExit
from scheduler.agent.protocol import SERVER, ProtocolError, encode, parse

logger = logging.getLogger(__name__)

AGENT_VERSION = "0.1.0"

# How many answered command ids to remember, so a retried command is acked, not re-run.
_REMEMBERED_COMMANDS = 1024


def backoff_delay(
    attempt: int, rng: random.Random, base_s: float = 0.5, cap_s: float = 30.0
) -> float:
    """Seconds to wait before reconnect attempt `attempt` (0 = first retry): full jitter.

    Uniform in [0, min(cap, base * 2**attempt)], so thousands of agents that lost the server at
    the same moment come back spread out instead of all at once.
    """
    ceiling = cap_s if attempt >= 64 else min(cap_s, base_s * 2**attempt)
    return rng.uniform(0.0, ceiling)


@dataclass
class _Workload:
    assignment: Assignment
    state: str = "running"
    exit_code: int | None = None
    step: int = 0
    # Stopped because a desired state stopped listing it: forgotten at the next desired state.
    retired: bool = False
    watcher: asyncio.Task[None] | None = None


class Agent:
    """One node's agent: connects, says hello, heartbeats, converges, reconnects forever.

    `await agent.run()` runs until `await agent.stop()` (or until cancelled). Stopping ends the
    connection but leaves the workloads to the backend: restarting an agent must not kill
    training jobs.
    """

    def __init__(
        self,
        url: str,
        token: str,
        backend: Backend,
        *,
        heartbeat_s: float = 5.0,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        reconnect_spread_s: float = 5.0,
        open_timeout_s: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        self.url = url
        self.heartbeat_s = heartbeat_s
        self._token = token
        self._backend = backend
        self._backoff = (backoff_base_s, backoff_cap_s)
        self._reconnect_spread_s = min(reconnect_spread_s, backoff_cap_s)
        self._open_timeout_s = open_timeout_s
        self._rng = rng or random.Random()
        self._hostname = backend.inventory().hostname
        self._generation = 0
        self._workloads: dict[int, _Workload] = {}
        self._answered: OrderedDict[str, tuple[bool, str]] = OrderedDict()
        self._ws: ClientConnection | None = None
        self._stop_requested = asyncio.Event()
        self._finished = asyncio.Event()
        self._running = False

    @property
    def hostname(self) -> str:
        """The node's hostname, as the backend reports it."""
        return self._hostname

    @property
    def generation(self) -> int:
        """The last desired-state generation this agent converged to (0 before any)."""
        return self._generation

    @property
    def connected(self) -> bool:
        """Whether a connection to the server is open now."""
        return self._ws is not None

    def workload_report(self) -> list[dict[str, Any]]:
        """The `workloads` field of hello and heartbeat: every workload this agent knows."""
        return [self._report(wid, w) for wid, w in sorted(self._workloads.items())]

    async def run(self) -> None:
        """Connect and serve until `stop()`; reconnects with backoff whenever the link drops."""
        if self._stop_requested.is_set() or self._running:
            return
        self._running = True
        work = asyncio.create_task(self._reconnect_forever(), name=f"agent {self._hostname}")
        stopper = asyncio.create_task(self._stop_requested.wait())
        try:
            await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also reached when run() itself is cancelled: asyncio.wait leaves its tasks alone.
            tasks = {work, stopper, *self._watchers()}
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            self._finished.set()
        if not work.cancelled() and work.exception() is not None:
            raise work.exception()

    async def stop(self) -> None:
        """Close the connection and return once `run()` has finished."""
        self._stop_requested.set()
        if self._running:
            await self._finished.wait()

    # -- connection ---------------------------------------------------------------------------

    async def _reconnect_forever(self) -> None:
        attempt = 0
        while True:
            healthy = await self._connect_once(quiet=attempt > 0)
            attempt = 0 if healthy else attempt + 1
            if healthy:
                # The server went away under a working fleet (a restart, say): come back spread
                # over a few seconds, not all 12,500 agents within half a second.
                delay = self._rng.uniform(0.0, self._reconnect_spread_s)
            else:
                delay = backoff_delay(attempt, self._rng, *self._backoff)
            logger.debug("%s: reconnecting in %.2f s", self._hostname, delay)
            await asyncio.sleep(delay)

    async def _connect_once(self, quiet: bool) -> bool:
        """One connection, start to end. True when the server sent a desired state on it."""
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            # No compression: messages are small, and 12,500 zlib contexts cost the server more
            # CPU and memory than the bytes saved.
            async with connect(
                self.url,
                additional_headers=headers,
                compression=None,
                open_timeout=self._open_timeout_s,
            ) as ws:
                return await self._session(ws)
        except InvalidURI:
            raise  # a configuration error; retrying will not fix it
        except (OSError, TimeoutError, WebSocketException) as exc:
            # After the first failure in a row, stay quiet: a fleet would log thousands of lines.
            logger.log(
                logging.DEBUG if quiet else logging.WARNING,
                "%s: connection to %s failed: %s",
                self._hostname,
                self.url,
                exc,
            )
            return False

    async def _session(self, ws: ClientConnection) -> bool:
        self._ws = ws
        healthy = False
        heartbeats = asyncio.create_task(self._heartbeats())
        try:
            await self._send(
                "hello",
                agent_version=AGENT_VERSION,
                generation=self._generation,
                node=self._backend.inventory().to_message(),
                workloads=self.workload_report(),
            )
            async for frame in ws:
                # Reset the backoff only once the server has really taken us on, so a server
                # that accepts and then drops every connection is not hammered.
                healthy = await self._handle(frame) or healthy
            logger.info("%s: the server closed the connection", self._hostname)
        except ConnectionClosed as exc:
            logger.warning("%s: connection lost: %s", self._hostname, exc)
        finally:
            self._ws = None
            heartbeats.cancel()
        return healthy

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self._send_heartbeat()
            except Exception:
                # A backend that fails to read telemetry once must not end the session.
                logger.exception("%s: heartbeat failed", self._hostname)

    async def _send_heartbeat(self) -> None:
        samples = [sample.to_message() for sample in self._backend.telemetry()]
        await self._send(
            "heartbeat", generation=self._generation, gpus=samples, workloads=self.workload_report()
        )

    async def _send(self, type_: str, **fields: Any) -> None:
        ws = self._ws
        if ws is None:
            logger.debug("%s: not connected, %s dropped", self._hostname, type_)
            return
        try:
            await ws.send(encode(type_, **fields))
        except ConnectionClosed:
            logger.debug("%s: connection closed, %s dropped", self._hostname, type_)

    # -- incoming messages --------------------------------------------------------------------

    async def _handle(self, frame: str | bytes) -> bool:
        """Act on one frame; True when it was a desired state. Never raises on bad input."""
        try:
            message = parse(frame, SERVER)
        except ProtocolError as exc:
            logger.warning("%s: ignored a malformed server message: %s", self._hostname, exc)
            return False
        try:
            return await self._dispatch(message)
        except Exception:
            # One message the agent cannot act on must not take the node off the cluster.
            logger.exception(
                "%s: failed to act on %s %s", self._hostname, message["type"], message["id"]
            )
            return False

    async def _dispatch(self, message: dict[str, Any]) -> bool:
        if message["type"] == "desired_state":
            await self._converge(message["generation"], message["assignments"])
            return True
        if message["type"] == "command":
            await self._on_command(message)
        else:
            refusal = ProtocolError(message["field"], message["reason"])
            logger.warning("%s: the server refused a message: %s", self._hostname, refusal)
        return False

    # -- convergence --------------------------------------------------------------------------

    async def _converge(self, generation: int, assignments: list[dict[str, Any]]) -> None:
        desired = {item["workload_id"]: Assignment.from_message(item) for item in assignments}
        # 1. Forget what the server has seen end and no longer needs reported.
        self._forget_finished(desired)
        # 2. Stop what runs but is no longer listed.
        await asyncio.gather(
            *(
                self._retire(w)
                for wid, w in self._workloads.items()
                if wid not in desired and w.state == "running"
            )
        )
        # 3. Start what is listed and unknown here.
        for wid, assignment in desired.items():
            if wid not in self._workloads:
                await self._start(assignment)
        # 4. Say so at once rather than at the next heartbeat.
        self._generation = generation
        await self._send_heartbeat()

    def _forget_finished(self, desired: Mapping[int, Assignment]) -> None:
        for wid, workload in list(self._workloads.items()):
            if workload.state == "exited" and (workload.retired or wid not in desired):
                del self._workloads[wid]

    async def _retire(self, workload: _Workload) -> None:
        workload.retired = True
        await self._stop_and_wait(workload)

    async def _stop_and_wait(self, workload: _Workload) -> None:
        if workload.state != "running":
            return  # it ended on its own since the caller looked
        await self._backend.stop(workload.assignment.workload_id)
        if workload.watcher is not None:
            # asyncio.wait, not await: cancelling this caller must not cancel the watcher.
            await asyncio.wait({workload.watcher})

    async def _start(self, assignment: Assignment) -> None:
        wid, gpus = assignment.workload_id, list(assignment.gpu_indices)
        try:
            await self._backend.start(assignment)
        except Exception as exc:
            logger.warning("%s: workload %s failed to start: %s", self._hostname, wid, exc)
            self._workloads[wid] = _Workload(assignment, state="exited")
            await self._event("workload_exited", wid, None, {"error": str(exc)})
            return
        # Recorded only once started, so a heartbeat never asks the backend about a workload
        # it has not heard of yet.
        workload = self._workloads[wid] = _Workload(assignment)
        workload.watcher = asyncio.create_task(self._watch(workload), name=f"workload {wid}")
        logger.info("%s: workload %s started on GPUs %s", self._hostname, wid, gpus)
        await self._event("workload_started", wid, None, {"gpu_indices": gpus})

    async def _watch(self, workload: _Workload) -> None:
        wid = workload.assignment.workload_id
        try:
            result = await self._backend.wait(wid)
        except Exception as exc:
            logger.warning("%s: lost track of workload %s: %s", self._hostname, wid, exc)
            result = WorkloadExit(None, workload.step)
        workload.state, workload.exit_code, workload.step = "exited", result.exit_code, result.step
        logger.info("%s: workload %s exited with %s", self._hostname, wid, result.exit_code)
        await self._event("workload_exited", wid, result.exit_code, {"step": result.step})

    def _report(self, wid: int, workload: _Workload) -> dict[str, Any]:
        step = workload.step
        if workload.state == "running":
            step = workload.step = self._backend.step(wid)
        return {
            "workload_id": wid,
            "state": workload.state,
            "exit_code": workload.exit_code,
            "step": step,
        }

    async def _event(
        self, kind: str, wid: int | None, exit_code: int | None, detail: dict[str, Any]
    ) -> None:
        await self._send("event", kind=kind, workload_id=wid, exit_code=exit_code, detail=detail)

    def _watchers(self) -> set[asyncio.Task[None]]:
        return {w.watcher for w in self._workloads.values() if w.watcher and not w.watcher.done()}

    # -- commands -----------------------------------------------------------------------------

    async def _on_command(self, message: dict[str, Any]) -> None:
        command_id = message["command_id"]
        if command_id in self._answered:
            # The server retried (it never saw our ack): answer again, do not act again.
            ok, detail = self._answered[command_id]
        else:
            ok, detail = await self._execute(message["action"], message["workload_id"])
            self._answered[command_id] = (ok, detail)
            while len(self._answered) > _REMEMBERED_COMMANDS:
                self._answered.popitem(last=False)
        await self._send("ack", command_id=command_id, ok=ok, detail=detail)

    async def _execute(self, action: str, wid: int | None) -> tuple[bool, str]:
        if action == "resize":
            return True, "resize noted; the next desired state carries the new shape"
        if action == "drain":
            return True, "drain noted; this agent runs only what the desired state lists"
        if wid is None:
            return False, f"{action} needs a workload_id"
        workload = self._workloads.get(wid)
        if workload is None:
            return False, f"{action}: workload {wid} is not on this node"
        try:
            if action == "checkpoint":
                return await self._checkpoint(workload)
            return await self._stop_command(workload)
        except Exception as exc:
            logger.warning("%s: %s of workload %s failed: %s", self._hostname, action, wid, exc)
            return False, f"{action} failed: {exc}"

    async def _checkpoint(self, workload: _Workload) -> tuple[bool, str]:
        wid = workload.assignment.workload_id
        if workload.state != "running":
            return False, f"checkpoint: workload {wid} is not running"
        detail = await self._backend.checkpoint(wid)
        await self._event("checkpoint_saved", wid, None, detail)
        return True, f"checkpoint of workload {wid} saved"

    async def _stop_command(self, workload: _Workload) -> tuple[bool, str]:
        wid = workload.assignment.workload_id
        if workload.state != "running":
            return True, f"workload {wid} had already exited"
        await self._stop_and_wait(workload)
        return True, f"workload {wid} stopped"
