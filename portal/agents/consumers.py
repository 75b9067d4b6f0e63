"""The server end of the node agent protocol: one consumer per connected agent."""

import asyncio
import contextlib
import hmac
import logging
import secrets
import time

from channels.db import DatabaseSyncToAsync
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.agents import fanin, intake, limits
from portal.cluster import commands, gpu_history, mig
from portal.cluster.delivery import mailbox
from portal.cluster.faults import classify
from portal.cluster.models import Gpu, Node
from portal.cluster.summary import LAST_SEEN, REPORTED, listening, write_heartbeat
from portal.core.collector import Freezer
from portal.core.consumers import DirectDispatch, GroupCommit
from portal.core.redis import aclient, client
from portal.tenancy.models import hash_token
from portal.workloads import lifecycle, logs
from portal.workloads.checkpoints import record_saved
from portal.workloads.desired import desired_state
from scheduler.agent import protocol

log = logging.getLogger(__name__)
# The largest frame an agent may send; a hello or heartbeat of an 8-GPU node with its jobs is a
# few kilobytes. A larger one closes the connection at once, before any of it is decoded.
MAX_FRAME_BYTES = 256 * 1024
CLOSE_TOO_BIG = 4009  # "too big" (daphne lets an application close only with 1000 or 3000-4999)


def in_db(func):
    """Run `func` on a pool thread with its own database connection. (Channels' default runs
    every consumer's database calls on one thread, one at a time: a thousand agents saying
    hello at once would queue behind each other long enough to time out.)"""
    return DatabaseSyncToAsync(func, thread_sensitive=False)


async def write_to_redis(writers):
    """Each writer queues its commands on one pipeline; per writer, its replies, or the error
    of a command of its (or its own, its commands then left out): one bad heartbeat never
    costs the others theirs."""
    spans = []
    async with aclient().pipeline(transaction=False) as pipe:
        for write in writers:
            start = len(pipe)
            try:
                write(pipe)
            except Exception as error:
                del pipe.command_stack[start:]
                spans.append(error)
            else:
                spans.append((start, len(pipe)))
        replies = await pipe.execute(raise_on_error=False) if len(pipe) else []
    results = []
    for span in spans:
        if isinstance(span, Exception):
            results.append(span)
            continue
        mine = replies[span[0] : span[1]]
        results.append(next((r for r in mine if isinstance(r, Exception)), mine))
    return results


# The reports that come from every node of a large job at once, written down in batches.
STARTED = GroupCommit(lifecycle.mark_started_many)
ACKED = GroupCommit(intake.record_acks)
LOGGED = GroupCommit(logs.record_many)
# Heartbeats: on its own each one's few writes cost a pipeline, a pooled connection and a
# socket write to Redis, more of the process's CPU than the rest of the heartbeat; under load
# those that arrive together share one.
BEATS = GroupCommit(write_to_redis, retry_alone=False)
SAVES_SEEN = "wanka:checkpoint:"  # Redis keys "<prefix><workload>:<step>": a save already recorded

# This process's agent connections by channel name, for what its mailbox brings them.
CONNECTED: dict[str, "AgentConsumer"] = {}
FROZEN = Freezer(CONNECTED)  # their sockets, out of the collector's sight
_readers: dict[tuple[int, str], asyncio.Task] = {}  # (event loop, mailbox) -> its reader


def read_mailbox(layer, name: str) -> None:
    """Have a task of this event loop read the mailbox `name` (`cluster.delivery.tell`),
    unless one does."""
    key = (id(asyncio.get_running_loop()), name)
    if key not in _readers or _readers[key].done():
        _readers[key] = asyncio.create_task(_read(layer, name))


async def _read(layer, name: str) -> None:
    """Hand each connection its messages from the mailbox, in the order they came."""
    while True:
        try:
            delivery = await layer.receive(name)
        except Exception:
            log.exception("mailbox %s: cannot read; trying again in a second", name)
            await asyncio.sleep(1)
            continue
        for channel, message in delivery["messages"]:
            consumer = CONNECTED.get(channel)
            if consumer is None:
                continue  # gone: it hears everything again when its agent says hello
            try:
                await consumer.dispatch(message)
            except Exception:
                log.exception("node %s: failed to deliver %s", consumer.node.name, message["type"])


_beating_loops: dict[int, asyncio.Task] = {}  # event loop -> its `_listen`


def keep_listening() -> None:
    """Have a task of this event loop say, every second, that this process hears agents (the
    lost-node sweep judges no silence from before the web tier was up), unless one does."""
    key = id(asyncio.get_running_loop())
    if key not in _beating_loops or _beating_loops[key].done():
        _beating_loops[key] = asyncio.create_task(_listen())


async def _listen() -> None:
    started = True  # this process's agents, should it replace one that died, are coming back
    while True:
        try:
            await asyncio.to_thread(listening, client(), time.time(), started)
            started = False
        except Exception:  # Redis down: said again in a second
            log.warning("cannot say the web tier is up", exc_info=True)
        await asyncio.sleep(1)


@contextlib.contextmanager
def _reported(seen: set, run: tuple[int, int]):
    """Count `run` as reported (the heartbeats that repeat it cost nothing) unless writing it
    down fails: a database restarting under the server must not leave a job starting, or one
    that ended running, until its agent reconnects; the next heartbeat says it again."""
    seen.add(run)
    try:
        yield
    except BaseException:
        seen.discard(run)
        raise


class AgentConsumer(DirectDispatch, AsyncWebsocketConsumer):
    """Authenticates a node by its token, records what it reports, and keeps it converged."""

    node: Node | None = None
    sent_generation = -1  # the newest desired state this connection has sent

    async def connect(self):
        headers = dict(self.scope["headers"])
        scheme, _, token = headers.get(b"authorization", b"").decode().partition(" ")
        if scheme.lower() == "bearer" and token:
            self.node = await _node_for_token(token.strip())
        if self.node is None:
            log.warning("agent rejected: missing or unknown token from %s", self.scope["client"])
            await self.close(code=4401)
            return
        self.greeted = False  # until its hello is taken, nothing else it says is
        # (workload, attempt) pairs this connection already reported, so heartbeats cost no SQL.
        self.started, self.exited = set(), set()
        self.attempts = {}  # workload -> the newest attempt sent to this agent
        self.refused = set()  # workloads not its own it reported (logged once each)
        self.group = (self.node.leaf.pod.datacenter.name, self.node.gpu_model.name)
        self.throttle = limits.Throttle(time.monotonic())
        self.history = gpu_history.Recorder(self.node.id)
        self.mig = None  # the MIG layouts last kept for the node (none yet on this connection)
        CONNECTED[self.channel_name] = self
        FROZEN.opened()
        read_mailbox(self.channel_layer, mailbox(self.channel_name))
        keep_listening()
        await self.accept()

    async def disconnect(self, code):
        if self.node is not None:
            CONNECTED.pop(self.channel_name, None)
            FROZEN.closed_one()
            await _disconnected(self.node.id, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        started = time.perf_counter()
        raw = text_data if text_data is not None else bytes_data
        size = len(raw) if isinstance(raw, bytes) else len(raw.encode())
        if size > MAX_FRAME_BYTES:
            log.warning(
                "node %s: frame of %d bytes, over the %d allowed: connection closed",
                self.node.name,
                size,
                MAX_FRAME_BYTES,
            )
            await self.close(code=CLOSE_TOO_BIG)
            return
        now = time.monotonic()
        if not self.throttle.admit(now):
            if refused := self.throttle.report(now):
                log.warning(
                    "node %s: over %d messages a second: %d dropped",
                    self.node.name,
                    limits.MESSAGES_PER_S,
                    refused,
                )
            return
        await self.handle(raw)
        fanin.stats.record(time.perf_counter() - started)
        if fanin.stats.due():
            await fanin.stats.flush(len(CONNECTED))

    async def handle(self, raw):
        try:
            message = protocol.parse(raw, "agent")
        except protocol.ProtocolError as error:
            log.warning("node %s: rejected message: %s", self.node.name, error)
            await self.send(protocol.encode("error", reason=error.reason, field=error.field))
            return
        if not self.greeted and message["type"] != "hello":
            # A refused hello's connection is closing: what it still says is not this node's.
            log.warning("node %s: rejected %s before a hello", self.node.name, message["type"])
            await self.send(protocol.encode("error", reason="Say hello first.", field="type"))
            return
        try:
            await getattr(self, f"on_{message['type']}")(message)
        except Exception:
            # One message that fails to apply must not cut the node off; it says it again
            # (heartbeats repeat the whole state) and the traceback is in the log.
            log.exception("node %s: failed to apply %s", self.node.name, message["type"])

    async def on_hello(self, message):
        try:
            state, unanswered, session = await _hello(self.node.id, self.channel_name, message)
        except protocol.ProtocolError as error:
            log.warning(
                "node %s: hello refused, connection closed: %s (from %s)",
                self.node.name,
                error,
                self.scope["client"],
            )
            await self.send(protocol.encode("error", reason=error.reason, field=error.field))
            taken = isinstance(error, AlreadyConnected)
            await self.close(code=protocol.CLOSE_TAKEN if taken else protocol.CLOSE_REFUSED)
            return
        self.greeted = True
        await self.send_state(state, session)
        for command in unanswered:
            await self.send(protocol.encode("command", **command))
        await self.on_workloads(message["workloads"])

    async def on_heartbeat(self, message):
        now = time.time()
        layouts = mig.take_layouts(self.node.name, message["gpus"])

        def write(pipe):
            write_heartbeat(pipe, self.node.id, now, message, self.group)
            pipe.zadd(LAST_SEEN, {self.node.id: now})
            # The generation the agent has converged to: live here, in the database at hello.
            pipe.hset(REPORTED, self.node.id, message["generation"])
            self.history.add(pipe, now, message["gpus"])  # a point when the minute turns
            pipe.srem(intake.LOST, self.node.id)  # last: its answer is read below

        *_, declared_lost = await BEATS(write)
        if declared_lost:
            await self.reclaim()
        if layouts != self.mig:  # rarely: a re-sliced GPU, a MIG device taken or freed
            await in_db(mig.record_layouts)(self.node.id, layouts)
            self.mig = layouts
        await self.on_workloads(message["workloads"])

    async def reclaim(self):
        """The node was declared lost (silent too long) while this connection stayed open: it
        beats again, so it speaks for the node again and hears what the node should run now
        (its jobs were recovered elsewhere meanwhile). Health stays where the fault put it,
        for an operator."""
        try:
            taken = await _reclaim(self.node.id, self.channel_name)
        except Exception:
            await aclient().sadd(intake.LOST, self.node.id)  # the next heartbeat tries again
            raise
        if taken is not None:
            state, unanswered = taken
            if state["generation"] >= self.sent_generation:  # else a sync sent a newer one
                await self.send_state(state)
            for command in unanswered:
                await self.send(protocol.encode("command", **command))

    async def on_workloads(self, workloads):
        """Level-triggered: a heartbeat's list of workloads is as good as the events."""
        for item in workloads:
            if not self.holds(item["workload_id"]):
                continue
            run = (item["workload_id"], item.get("attempt", 0))
            if item["state"] == "running" and run not in self.started:
                await self.on_started(*run)
            elif item["state"] == "exited" and run not in self.exited:
                await self.on_exited(*run, item["exit_code"])

    def holds(self, workload_id) -> bool:
        """Whether the workload was assigned to this node (sent in a desired state on this
        connection): what an agent says of any other is refused, and logged once."""
        if workload_id in self.attempts:
            return True
        if workload_id not in self.refused:
            self.refused.add(workload_id)
            log.warning(
                "node %s: rejected a report of workload %s, not its own",
                self.node.name,
                workload_id,
            )
        return False

    def replaced(self, workload_id, attempt) -> bool:
        """Whether this connection has already sent a newer attempt of the workload: then a
        report about this one decides nothing, and costs no trip to the database (a restart of
        a 1,000-node job brings 1,000 of them)."""
        return attempt < self.attempts.get(workload_id, attempt)

    async def on_started(self, workload_id, attempt):
        with _reported(self.started, (workload_id, attempt)):
            if not self.replaced(workload_id, attempt):
                await STARTED((workload_id, self.node.id, attempt))

    async def on_exited(self, workload_id, attempt, exit_code):
        code = -1 if exit_code is None else exit_code  # an exit without a code is a failure
        with _reported(self.exited, (workload_id, attempt)):
            if not self.replaced(workload_id, attempt):
                await in_db(lifecycle.finish)(workload_id, self.node.id, code, attempt)

    async def on_event(self, message):
        kind, workload_id, detail = message["kind"], message["workload_id"], message["detail"]
        if workload_id is not None and not self.holds(workload_id):
            return
        if workload_id is not None and kind in ("workload_started", "workload_exited"):
            # The event's attempt, else the heartbeat that follows says which run it was.
            attempt = detail.get("attempt")
            if not isinstance(attempt, int):
                return
            if kind == "workload_started":
                await self.on_started(workload_id, attempt)
            else:
                await self.on_exited(workload_id, attempt, message["exit_code"])
        elif kind == "fault":
            await self.on_fault(detail)
        elif kind == "checkpoint_saved" and workload_id is not None:
            await self.on_checkpoint(workload_id, detail)
        else:
            log.info("node %s: event %s %s", self.node.name, kind, detail)

    async def on_checkpoint(self, workload_id, detail):
        step, key = detail.get("step"), None
        if detail.get("status", "complete") == "complete" and isinstance(step, int):
            # Every rank of a gang reports the same save: only the first is written down.
            key = f"{SAVES_SEEN}{workload_id}:{step}"
            if not await aclient().set(key, 1, nx=True, ex=3600):
                return
        try:
            await in_db(record_saved)(workload_id, self.node.id, detail)
        except Exception:
            if key:
                await aclient().delete(key)  # let another rank's report write it down
            raise

    async def on_fault(self, detail):
        try:
            kind = classify(detail)
        except KeyError as error:
            log.warning("node %s: rejected fault event: %s", self.node.name, error)
            await self.send(protocol.encode("error", reason=str(error), field="event.detail"))
            return
        gpu = detail.get("gpu_index")
        gpu = gpu if isinstance(gpu, int) and 0 <= gpu < 256 else None
        if not await limits.admit_fault(self.node, kind, gpu):
            return
        try:
            await in_db(intake.record_fault)(
                self.node.id, kind, str(detail.get("message", "")), gpu
            )
        except Exception:
            await limits.forget_fault(self.node.id, kind.code, gpu)
            raise

    async def on_logs(self, message):
        workload_id, attempt = message["workload_id"], message["attempt"]
        if not self.holds(workload_id):  # the node's own name is on every chunk it sends
            return
        await LOGGED((self.node.id, workload_id, attempt, message["offset"], message["lines"]))

    async def on_ack(self, message):
        await ACKED((self.node.id, message["command_id"], message["ok"], message["detail"]))

    async def agent_sync(self, event):
        """Channel layer message: send this node its whole desired state, as the sender worked
        it out, unless this connection has already sent a newer one (then read it afresh)."""
        state = event.get("state")
        if state is None or state["generation"] < self.sent_generation:
            state = await in_db(_desired_state)(self.node.id)
        await self.send_state(state)

    async def send_state(self, state, session: str | None = None):
        self.sent_generation = state["generation"]
        self.attempts.update((a["workload_id"], a["attempt"]) for a in state["assignments"])
        if session:  # the answer to a hello
            state = {**state, "session": session}
        for frame in protocol.split_state(state):  # in parts when large
            await self.send(frame)

    async def agent_command(self, event):
        """Channel layer message: pass a command on to the agent."""
        fields = {key: event[key] for key in ("command_id", "action", "workload_id", "args")}
        await self.send(protocol.encode("command", **fields))


@in_db
def _node_for_token(token: str) -> Node | None:
    return (
        Node.objects.select_related("leaf__pod__datacenter", "gpu_model")
        .filter(token_hash=hash_token(token))
        .first()
    )


@in_db
def _reclaim(node_id: int, channel_name: str) -> tuple[dict, list[dict]] | None:
    """Connect the node again through this connection, unless another connection of its agent
    speaks for it; then, as for a hello, its desired state and the commands it has not acked
    (while it was off, nothing was sent to it)."""
    taken = Node.objects.filter(pk=node_id, connected=False, agent_channel="").update(
        connected=True, agent_channel=channel_name, last_seen_at=timezone.now()
    )
    return (_desired_state(node_id), commands.unanswered(node_id)) if taken else None


@in_db
def _disconnected(node_id: int, channel_name: str) -> None:
    """Mark the node disconnected, unless a newer connection of its agent has taken over."""
    Node.objects.filter(pk=node_id, agent_channel=channel_name).update(
        connected=False, agent_channel="", last_seen_at=timezone.now()
    )


def _desired_state(node_id: int) -> dict:
    return desired_state(Node.objects.get(pk=node_id))


@in_db
def _hello(node_id: int, channel_name: str, message: dict) -> tuple[dict, list[dict], str]:
    """Record the hello; return the node's desired state, the commands it has not acked and the
    agent's new session: one trip to the database."""
    session = _record_hello(node_id, channel_name, message)
    return _desired_state(node_id), commands.unanswered(node_id), session


@transaction.atomic
def _record_hello(node_id: int, channel_name: str, message: dict) -> str:
    """This connection now speaks for the node; record the inventory it reports (GPU uuids and
    memory, and its facts over the enrolled ones), writing only what changed so a fleet
    reconnecting at once costs little; return the agent's new session (its proof at its next
    hello). Raises ProtocolError, and records nothing, when the inventory cannot be this node's
    (`_not_this_node`), or the node's agent is connected on another connection and beating and
    this one does not prove it is that agent."""
    node = (
        Node.objects.select_for_update(of=("self",))
        .select_related("gpu_model", "leaf__pod__datacenter")
        .get(pk=node_id)
    )
    reported = message["node"]
    if refusal := _not_this_node(node, reported):
        raise refusal
    if node.connected and node.agent_channel != channel_name and _beating(node.pk):
        if not _proven(node, message.get("session")):
            raise AlreadyConnected(
                "node", f"Node {node.name}'s agent is connected and beating: one node, one agent."
            )
        log.info("node %s: its agent is back on a new connection (session proven)", node.name)
    session = secrets.token_urlsafe(24)
    node.connected, node.agent_channel = True, channel_name
    node.last_seen_at, node.agent_version = timezone.now(), message["agent_version"]
    node.reported_generation, node.agent_session = message["generation"], hash_token(session)
    fields = ["connected", "agent_channel", "last_seen_at", "agent_version", "reported_generation",
              "agent_session"]  # fmt: skip
    # What the hello does not know (None) keeps what enrolment recorded.
    reported_facts = {k: v for k, v in reported.get("facts", {}).items() if v is not None}
    facts = _placed(node, {**node.facts, **reported_facts})
    if node.facts != facts:
        node.facts = facts
        fields.append("facts")
    if node.single_tenant != (facts.get("isolates_tenants") is False):
        node.single_tenant = not node.single_tenant
        fields.append("single_tenant")
    node.save(update_fields=fields)
    known = {gpu.index: gpu for gpu in node.gpus.all()}
    new, changed = [], []
    for item in reported["gpus"]:
        gpu = known.get(item["index"])
        if gpu is None:
            new.append(
                Gpu(node=node, index=item["index"], uuid=item["uuid"], memory_mb=item["memory_mb"])
            )
        elif (gpu.uuid, gpu.memory_mb) != (item["uuid"], item["memory_mb"]):
            gpu.uuid, gpu.memory_mb = item["uuid"], item["memory_mb"]
            changed.append(gpu)
    Gpu.objects.bulk_create(new)
    Gpu.objects.bulk_update(changed, ["uuid", "memory_mb"])
    return session


def _proven(node: Node, session: str | None) -> bool:
    """Whether a hello's session is the one the node's agent was last given."""
    return bool(session and node.agent_session) and hmac.compare_digest(
        hash_token(session), node.agent_session
    )


class AlreadyConnected(protocol.ProtocolError):
    """A hello with the token of a node whose agent is connected and beating: a copy of the
    token (a job that read it, say), or the agent's own new connection while its old one is
    still open. Refused either way; the agent's own comes back once the old one is gone."""


def _beating(node_id: int) -> bool:
    """Whether the node heartbeated within the lost-node grace."""
    window = intake.MISSED_HEARTBEATS * settings.WANKA["HEARTBEAT_S"]
    last = client().zscore(LAST_SEEN, node_id)
    return last is not None and last >= time.time() - window


def _not_this_node(node: Node, reported: dict) -> protocol.ProtocolError | None:
    """Why a hello's inventory cannot be the enrolled node's: another hostname (its token
    copied to another machine), another GPU model, or a GPU beyond the enrolled count or
    reported twice. Fewer GPUs than enrolled is a fault the heartbeats report, not a refusal."""
    if reported["hostname"] != node.name:
        return protocol.ProtocolError(
            "node.hostname", f"This token is node {node.name}'s, not {reported['hostname']}'s."
        )
    if reported["gpu_model"] != node.gpu_model.name:
        return protocol.ProtocolError(
            "node.gpu_model",
            f"Node {node.name} is enrolled with {node.gpu_model.name} GPUs, "
            f"not {reported['gpu_model']}.",
        )
    indices = [gpu["index"] for gpu in reported["gpus"]]
    for index in indices:
        if index >= node.gpu_count or indices.count(index) > 1:
            why = "reported twice" if index < node.gpu_count else "not one of them"
            return protocol.ProtocolError(
                "node.gpus",
                f"Node {node.name} is enrolled with {node.gpu_count} GPUs; GPU {index} is {why}.",
            )
    return None


def _placed(node: Node, facts: dict) -> dict:
    """The hello's facts with the node's place in the fabric as the portal records it: the
    record is what scheduling reads, and an operator may have moved the node since its agent's
    labels were written. A label that differs is logged, for the agent's configuration."""
    leaf = node.leaf
    place = {"datacenter": leaf.pod.datacenter.name, "pod": leaf.pod.name, "leaf": leaf.name}
    for key, recorded in place.items():
        if facts.get(key) not in (None, recorded):
            log.warning(
                "node %s: its agent says %s %s, the node is in %s: kept",
                node.name,
                key,
                facts[key],
                recorded,
            )
    return {**facts, **place}
