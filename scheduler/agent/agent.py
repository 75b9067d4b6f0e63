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
- A workload listed with a new `attempt` (the control plane restarts it after a fault) is
  stopped if it still runs, forgotten, and started afresh at once. Reports and events carry the
  attempt they are about, so a late word about an old run is not taken for the new one.

Events go out in the order they happened, and before the ack of the command that caused them.
While the connection is down, `fault` and `checkpoint_saved` events are kept (the newest
`PENDING_EVENTS_LIMIT`) and sent after the next hello; workload starts and exits are not,
since the hello says where every workload stands.

Each run's output (`Backend.output`) goes out in `logs` messages every `output_s` seconds
and once more when the run ends, before its exit is reported; the agent moves past a batch
only once it has been sent, so lines written during an outage go out after the next hello
(as long as the agent still knows the run).

Commands run as tasks of their own, so a checkpoint that takes minutes does not hold up the
desired state; a command id that arrives again while it runs is not run twice, and one that
arrives after its ack gets the same ack again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException

from scheduler.agent.backends import (
    DEFAULT_CHECKPOINT_TIMEOUT_S,
    OUTPUT_BATCH_BYTES,
    Assignment,
    Backend,
    BackendEvent,
    FaultRefused,
    NodeFault,
    WorkloadExit,
)
from scheduler.agent.protocol import (
    CLOSE_REFUSED,
    RECONNECT_CAP_S,
    SERVER,
    ProtocolError,
    encode,
    parse,
)

logger = logging.getLogger(__name__)

AGENT_VERSION = "0.2.0"

# How many answered command ids to remember, so a retried command is acked, not re-run.
_REMEMBERED_COMMANDS = 1024

# Events kept while the server cannot be told; the oldest go first beyond this.
PENDING_EVENTS_LIMIT = 256
# Batches of output sent every `output_s` at most, all workloads together (a run's last words
# at its end may take up to `OUTPUT_BATCHES_AT_EXIT` more): well under the rate the server
# takes from one connection.
OUTPUT_BATCHES_PER_TICK = 32
OUTPUT_BATCHES_AT_EXIT = 64
# Kinds worth keeping through an outage: the next hello does not say them.
_KEPT_KINDS = ("fault", "checkpoint_saved")


def backoff_delay(
    attempt: int, rng: random.Random, base_s: float = 0.5, cap_s: float = 30.0
) -> float:
    """Seconds to wait before reconnect attempt `attempt` (0 = first retry): full jitter.

    Uniform in [0, min(cap, base * 2**attempt)], so thousands of agents that lost the server at
    the same moment come back spread out instead of all at once.
    """
    ceiling = cap_s if attempt >= 64 else min(cap_s, base_s * 2**attempt)
    return rng.uniform(0.0, ceiling)


def _superseded(workload: _Workload, wanted: Assignment | None) -> bool:
    """Whether a desired state no longer wants this run: not listed, or a new attempt of it."""
    return wanted is None or wanted.attempt != workload.assignment.attempt


@dataclass(frozen=True)
class _Outcome:
    """What a command came to: its ack, and for how long the agent then goes silent."""

    ok: bool
    detail: str
    silence_s: float = 0.0


@dataclass
class _Workload:
    assignment: Assignment
    state: str = "running"
    exit_code: int | None = None
    step: int = 0
    # Stopped because a desired state stopped listing it: forgotten at the next desired state.
    retired: bool = False
    watcher: asyncio.Task[None] | None = None
    output_offset: int = 0  # where the output not yet sent begins


class Agent:
    """One node's agent: connects, says hello, heartbeats, converges, reconnects forever.

    `await agent.run()` runs until `await agent.stop()` (or until cancelled). Stopping ends the
    connection but leaves the workloads to the backend, so an agent restarted on the same
    backend finds them running; what happens to them when the agent's process ends is for
    that process to decide (`wanka-agent` stops them with their grace period).
    """

    def __init__(
        self,
        url: str,
        token: str,
        backend: Backend,
        *,
        heartbeat_s: float = 5.0,
        output_s: float = 2.0,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = RECONNECT_CAP_S,
        reconnect_spread_s: float = 5.0,
        refused_retry_s: float = 300.0,
        open_timeout_s: float = 30.0,
        rng: random.Random | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url
        self.heartbeat_s = heartbeat_s
        self.output_s = output_s
        self._token = token
        self._backend = backend
        self._backoff = (backoff_base_s, backoff_cap_s)
        self._reconnect_spread_s = min(reconnect_spread_s, backoff_cap_s)
        # A refused hello waits for an operator: tried again rarely, not at the backoff's pace.
        self._refused_retry_s = refused_retry_s
        self._refused = False
        self._open_timeout_s = open_timeout_s
        self._ssl = ssl_context
        self._rng = rng or random.Random()
        self._hostname = backend.inventory().hostname
        self._generation = 0
        self._parts: tuple[int, dict[int, list[dict[str, Any]]]] = (-1, {})  # generation, parts
        # What the server answered the last hello with: this process's proof, at the next hello,
        # that it is the agent whose old connection the server may still hold (in memory only).
        self._proof: str | None = None
        self._workloads: dict[int, _Workload] = {}
        self._answered: OrderedDict[str, _Outcome] = OrderedDict()
        self._commands: dict[str, asyncio.Task[None]] = {}
        self._pending: deque[dict[str, Any]] = deque(maxlen=PENDING_EVENTS_LIMIT)
        self._flush_lock = asyncio.Lock()
        self._output_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._silent_until = 0.0
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

    @property
    def silent(self) -> bool:
        """Whether the agent is holding its tongue (a simulated heartbeat loss)."""
        return asyncio.get_running_loop().time() < self._silent_until

    def workload_report(self) -> list[dict[str, Any]]:
        """The `workloads` field of hello and heartbeat: every workload this agent knows."""
        return [self._report(wid, w) for wid, w in sorted(self._workloads.items())]

    async def run(self) -> None:
        """Connect and serve until `stop()`; reconnects with backoff whenever the link drops."""
        if self._stop_requested.is_set() or self._running:
            return
        self._running = True
        self._backend.subscribe(self._on_backend_event)
        if fenced := await self._backend.fence():
            logger.warning(
                "%s: stopped what an earlier agent left running: workloads %s",
                self._hostname,
                ", ".join(map(str, fenced)),
            )
        work = asyncio.create_task(self._reconnect_forever(), name=f"agent {self._hostname}")
        events = asyncio.create_task(self._deliver_events(), name=f"events {self._hostname}")
        stopper = asyncio.create_task(self._stop_requested.wait())
        try:
            await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also reached when run() itself is cancelled: asyncio.wait leaves its tasks alone.
            tasks = {work, events, stopper, *self._watchers(), *self._commands.values()}
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
            if self._refused:
                self._refused = False
                delay = self._refused_retry_s
            elif healthy:
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
            tls = {} if self._ssl is None else {"ssl": self._ssl}
            async with connect(
                self.url,
                additional_headers=headers,
                compression=None,
                open_timeout=self._open_timeout_s,
                **tls,
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
        outputs = asyncio.create_task(self._outputs())
        try:
            await self._send(
                "hello",
                agent_version=AGENT_VERSION,
                generation=self._generation,
                node=self._backend.inventory().to_message(),
                workloads=self.workload_report(),
                **({"session": self._proof} if self._proof else {}),
            )
            self._after_hello()
            async for frame in ws:
                # Reset the backoff only once the server has really taken us on, so a server
                # that accepts and then drops every connection is not hammered.
                healthy = await self._handle(frame) or healthy
            logger.info("%s: the server closed the connection", self._hostname)
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code == CLOSE_REFUSED:
                self._refused = True
                logger.error(
                    "%s: the server refused this node (its reason is above); trying again in "
                    "%.0f s",
                    self._hostname,
                    self._refused_retry_s,
                )
            else:
                logger.warning("%s: connection lost: %s", self._hostname, exc)
        finally:
            self._ws = None
            heartbeats.cancel()
            outputs.cancel()
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

    async def _outputs(self) -> None:
        while True:
            await asyncio.sleep(self.output_s)
            budget = OUTPUT_BATCHES_PER_TICK  # shared, so a busy node stays under the server's rate
            for workload in list(self._workloads.values()):
                try:
                    budget -= await self._send_output(workload, budget)
                except Exception:
                    logger.exception("%s: cannot read a workload's output", self._hostname)
                if budget <= 0:
                    break

    async def _send_output(self, workload: _Workload, batches: int) -> int:
        """Send what the run wrote since the last batch sent, up to `batches` batches; returns
        how many went."""
        wid, attempt = workload.assignment.workload_id, workload.assignment.attempt
        sent = 0
        async with self._output_lock:
            while sent < batches:
                offset = workload.output_offset
                output = self._backend.output(wid, offset, OUTPUT_BATCH_BYTES)
                if not output.lines:
                    break
                lines = list(output.lines)
                if not await self._send(
                    "logs", workload_id=wid, attempt=attempt, offset=offset, lines=lines
                ):
                    break
                workload.output_offset = output.next_offset
                sent += 1
        return sent

    async def _send(self, type_: str, **fields: Any) -> bool:
        """Send one message; False when it could not go (no connection, or silent)."""
        ws = self._ws
        if ws is None or self.silent:
            logger.debug("%s: cannot speak now, %s dropped", self._hostname, type_)
            return False
        try:
            await ws.send(encode(type_, **fields))
        except ConnectionClosed:
            logger.debug("%s: connection closed, %s dropped", self._hostname, type_)
            return False
        return True

    # -- events -------------------------------------------------------------------------------

    def _on_backend_event(self, event: BackendEvent) -> None:
        detail = dict(event.detail)
        workload = self._workloads.get(event.workload_id) if event.workload_id is not None else None
        if workload is not None:
            detail["attempt"] = workload.assignment.attempt
        self._queue_event(event.kind, event.workload_id, None, detail)

    def _queue_event(
        self, kind: str, wid: int | None, exit_code: int | None, detail: dict[str, Any]
    ) -> None:
        if self._ws is None and kind not in _KEPT_KINDS:
            return  # the next hello says it
        if len(self._pending) == self._pending.maxlen:
            logger.warning("%s: too many events unsent; the oldest is dropped", self._hostname)
        event = {"kind": kind, "workload_id": wid, "exit_code": exit_code, "detail": detail}
        self._pending.append(event)
        self._wake.set()

    async def _event(
        self, kind: str, wid: int | None, exit_code: int | None, detail: dict[str, Any]
    ) -> None:
        self._queue_event(kind, wid, exit_code, detail)
        await self._flush()

    async def _flush(self) -> None:
        """Send the pending events in order, as far as the connection lets us."""
        async with self._flush_lock:
            while self._pending:
                if not await self._send("event", **self._pending[0]):
                    return
                self._pending.popleft()

    async def _deliver_events(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()

    def _after_hello(self) -> None:
        # Starts and exits queued before the connection dropped: the hello has said them.
        kept = [e for e in self._pending if e["kind"] in _KEPT_KINDS]
        self._pending.clear()
        self._pending.extend(kept)
        self._wake.set()

    def _silence(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._silent_until = loop.time() + seconds
        logger.warning("%s: silent for %g s (fault drill)", self._hostname, seconds)
        loop.call_later(seconds, self._wake.set)  # then send what waited

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
            self._proof = message.get("session", self._proof)
            assignments = self._assemble(message)
            if assignments is not None:
                await self._converge(message["generation"], assignments)
            return True
        if message["type"] == "command":
            await self._on_command(message)
        else:
            refusal = ProtocolError(message["field"], message["reason"])
            logger.warning("%s: the server refused a message: %s", self._hostname, refusal)
        return False

    def _assemble(self, message: dict[str, Any]) -> list[dict[str, Any]] | None:
        """A desired state's assignments once all its parts are here (a large one comes in
        parts); None while some are missing. A part of a newer generation drops the older."""
        parts = message.get("parts", 1)
        if parts == 1:
            return message["assignments"]
        generation = message["generation"]
        if self._parts[0] != generation:
            self._parts = (generation, {})
        held = self._parts[1]
        held[message.get("part", 0)] = message["assignments"]
        if len(held) < parts:
            return None
        self._parts = (-1, {})
        return [item for part in sorted(held) for item in held[part]]

    # -- convergence --------------------------------------------------------------------------

    async def _converge(self, generation: int, assignments: list[dict[str, Any]]) -> None:
        desired = {item["workload_id"]: Assignment.from_message(item) for item in assignments}
        # 1. Forget what the server has seen end and no longer needs reported.
        self._forget_finished(desired)
        # 2. Stop what runs but is no longer listed, and old attempts of what is.
        await asyncio.gather(
            *(
                self._retire(w)
                for wid, w in self._workloads.items()
                if w.state == "running" and _superseded(w, desired.get(wid))
            )
        )
        for wid, workload in list(self._workloads.items()):
            if wid in desired and _superseded(workload, desired[wid]):
                del self._workloads[wid]  # the server wants a new attempt: start afresh
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
            if isinstance(exc, NodeFault):  # the node's fault, said first: the job moves on
                await self._event("fault", None, None, exc.detail)
            self._workloads[wid] = _Workload(assignment, state="exited")
            detail = {"error": str(exc)[:1000], "attempt": assignment.attempt}
            await self._event("workload_exited", wid, None, detail)
            return
        # Recorded only once started, so a heartbeat never asks the backend about a workload
        # it has not heard of yet.
        workload = self._workloads[wid] = _Workload(assignment)
        workload.watcher = asyncio.create_task(self._watch(workload), name=f"workload {wid}")
        logger.info("%s: workload %s started on GPUs %s", self._hostname, wid, gpus)
        detail = {"gpu_indices": gpus, "attempt": assignment.attempt}
        await self._event("workload_started", wid, None, detail)

    async def _watch(self, workload: _Workload) -> None:
        wid = workload.assignment.workload_id
        try:
            result = await self._backend.wait(wid)
        except Exception as exc:
            logger.warning("%s: lost track of workload %s: %s", self._hostname, wid, exc)
            result = WorkloadExit(None, workload.step)
        workload.state, workload.exit_code, workload.step = "exited", result.exit_code, result.step
        try:
            await self._send_output(workload, OUTPUT_BATCHES_AT_EXIT)  # its last words
        except Exception:
            logger.exception("%s: cannot read workload %s's output", self._hostname, wid)
        logger.info("%s: workload %s exited with %s", self._hostname, wid, result.exit_code)
        detail: dict[str, Any] = {"step": result.step, "attempt": workload.assignment.attempt}
        if result.log_tail:
            detail["log_tail"] = list(result.log_tail)
        await self._event("workload_exited", wid, result.exit_code, detail)

    def _report(self, wid: int, workload: _Workload) -> dict[str, Any]:
        step, serving, progress, share = workload.step, None, None, None
        if workload.state == "running":
            try:
                step = workload.step = self._backend.step(wid)
                serving = workload.assignment.serve_port and self._backend.serving(wid)
                progress = self._backend.progress(wid)
                share = workload.assignment.slices and self._backend.share(wid)
            except Exception:  # one workload's report must never silence the node
                logger.exception("%s: cannot read workload %s's state", self._hostname, wid)
        report = {
            "workload_id": wid,
            "state": workload.state,
            "exit_code": workload.exit_code,
            "step": step,
            "attempt": workload.assignment.attempt,
        }
        if progress is not None:
            report["progress"] = progress
        if share:
            report["share"] = share.message()
        return report | {"serving": serving.message()} if serving else report

    def _watchers(self) -> set[asyncio.Task[None]]:
        return {w.watcher for w in self._workloads.values() if w.watcher and not w.watcher.done()}

    # -- commands -----------------------------------------------------------------------------

    async def _on_command(self, message: dict[str, Any]) -> None:
        command_id = message["command_id"]
        if command_id in self._answered:
            # The server retried (it never saw our ack): answer again, do not act again.
            outcome = self._answered[command_id]
            await self._ack(command_id, outcome)
        elif command_id not in self._commands:
            # Still running otherwise: its ack comes when it is done.
            self._commands[command_id] = asyncio.create_task(
                self._run_command(message), name=f"command {command_id}"
            )

    async def _run_command(self, message: dict[str, Any]) -> None:
        command_id = message["command_id"]
        try:
            outcome = await self._execute(message)
        finally:
            self._commands.pop(command_id, None)
        self._answered[command_id] = outcome
        while len(self._answered) > _REMEMBERED_COMMANDS:
            self._answered.popitem(last=False)
        await self._ack(command_id, outcome)
        if outcome.silence_s > 0:
            self._silence(outcome.silence_s)  # after the ack, so the drill is confirmed

    async def _ack(self, command_id: str, outcome: _Outcome) -> None:
        await self._flush()  # what the command caused goes first
        await self._send("ack", command_id=command_id, ok=outcome.ok, detail=outcome.detail)

    async def _execute(self, message: dict[str, Any]) -> _Outcome:
        action, wid, args = message["action"], message["workload_id"], message["args"]
        if action == "inject_fault":
            return self._inject(args)
        if action == "health_check":
            return await self._health_check()
        if wid is None:
            return _Outcome(False, f"{action} needs a workload_id")
        workload = self._workloads.get(wid)
        if workload is None:
            return _Outcome(False, f"{action}: workload {wid} is not on this node")
        try:
            if action == "delete_saves":
                found = await self._backend.delete_saves(wid, args["locations"])
                return _Outcome(True, f"deleted {found} of {len(args['locations'])} saves")
            return await self._checkpoint(workload, message["command_id"], args)
        except Exception as exc:
            logger.warning("%s: %s of workload %s failed: %s", self._hostname, action, wid, exc)
            return _Outcome(False, f"{action} failed: {exc}")

    async def _health_check(self) -> _Outcome:
        try:
            passed = await self._backend.health_check()
        except Exception as exc:
            logger.warning("%s: failed its health check: %s", self._hostname, exc)
            return _Outcome(False, str(exc))
        logger.info("%s: passed its health check: %s", self._hostname, passed)
        return _Outcome(True, passed)

    def _inject(self, args: Mapping[str, Any]) -> _Outcome:
        code = args["code"]
        try:
            drill = self._backend.inject_fault(code, args.get("gpu_index"), args)
        except FaultRefused as exc:
            return _Outcome(False, f"inject_fault {code}: {exc}")
        logger.warning("%s: fault drill %s: %s", self._hostname, code, drill.detail)
        return _Outcome(True, drill.detail, drill.silence_s)

    async def _checkpoint(
        self, workload: _Workload, command_id: str, args: Mapping[str, Any]
    ) -> _Outcome:
        wid = workload.assignment.workload_id
        if workload.state != "running":
            return _Outcome(False, f"checkpoint: workload {wid} is not running")
        timeout_s = float(args.get("timeout_s", DEFAULT_CHECKPOINT_TIMEOUT_S))
        kind, reason = args.get("kind", "requested"), args.get("reason", "")
        try:
            detail = await self._backend.checkpoint(wid, command_id, timeout_s, kind, reason)
        except TimeoutError as exc:
            return _Outcome(False, str(exc))
        # The backend has reported the save itself, as a checkpoint_saved event.
        return _Outcome(True, f"workload {wid} saved step {detail['step']} to {detail['location']}")
