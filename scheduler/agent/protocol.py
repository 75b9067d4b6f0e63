"""The node agent wire protocol, shared by the agent and the server's consumer.

Every message is one JSON object ``{"type": str, "v": 1, "id": str, ...fields}`` sent as a
WebSocket text frame. The tables below (`AGENT_MESSAGES`, `SERVER_MESSAGES`) are the whole
protocol: one schema per message type and direction. `parse` checks an incoming frame against
them and `encode` checks an outgoing one, so neither end can send what the other would refuse.

Error paths: the envelope fields are named bare (``type``, ``v``, ``id``); body fields are
prefixed by the message type (``heartbeat.gpus[2].util``). A server answers a malformed message
with ``encode("error", reason=e.reason, field=e.field)``.

Fields a table does not name are ignored rather than refused, so a newer peer can add optional
fields within version 1; a change of meaning bumps `PROTOCOL_VERSION`. Fields added within
version 1 are optional (`record(..., optional=...)`): checked when present, so a server that knows
them still takes messages from agents that predate them, and an agent of this version always
sends them. Some bodies depend on a tag: an event's `detail` on its `kind`, a command's `args`
on its `action` (`VARIANTS`).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

PROTOCOL_VERSION = 1

AGENT = "agent"
SERVER = "server"
# The close code of a connection whose hello the server refused: its inventory is not the
# node's its token was issued to (another hostname, GPU model or GPUs). An operator must act.
CLOSE_REFUSED = 4003
# The close code of a second connection with a node's token while the node's agent is connected
# and beating: one node, one agent. The agent tries again with its usual backoff (its own old
# connection, half-open, is soon dropped). An agent that proves it is the same one (the session
# the server gave it at its last hello, which it keeps in memory only) is taken at once, its old
# connection dropped: its web process died, say, and never saw it go.
CLOSE_TAKEN = 4008
# An agent that lost its connection tries again within this many seconds (its backoff's
# ceiling): a control plane back from an outage waits as long again before it takes an agent's
# silence for its node's.
RECONNECT_CAP_S = 30.0
# A node's desired state larger than this goes in parts (`split_state`): a WebSocket server
# sends, and an agent takes, frames of up to 1 MiB. The whole state is bounded by
# DESIRED_STATE_BYTES (each assignment at most a 64th of it).
PART_BYTES = 768 * 1024
DESIRED_STATE_BYTES = 16 * 1024 * 1024

WORKLOAD_STATES = ("running", "exited")
EVENT_KINDS = ("workload_started", "workload_exited", "fault", "checkpoint_saved")
COMMAND_ACTIONS = ("checkpoint", "delete_saves", "inject_fault", "health_check")
CHECKPOINT_KINDS = ("periodic", "async", "triggered", "requested")
CHECKPOINT_STATUSES = ("complete", "failed")
LOG_LINE_CHARS = 4096  # the longest line of a workload's output that a `logs` message carries
# Terminal control in a job's output: escape sequences (colours, cursor moves, titles) and the
# C0 controls but the tab. Shown raw they can redraw a reader's terminal; a page shows noise.
_TERMINAL_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erasing
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, links
    r"|\x1b[@-Z\\-_]?"  # other escapes, or a lone ESC
    r"|[\x00-\x08\x0b-\x1f\x7f]"
)


def printable(line: str) -> str:
    """A line of a job's output as a reader should see it: after a carriage return only what
    a terminal would show (the progress bar's last state), without terminal control."""
    return _TERMINAL_CONTROL.sub("", line.rstrip("\r").rsplit("\r", 1)[-1])


class ProtocolError(ValueError):
    """A message that does not follow the protocol; `field` is its path, or None for the frame."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


# A check takes a value and its path, and raises ProtocolError when the value does not fit.
Check = Callable[[Any, str], None]


def _is_int(value: Any) -> bool:
    # bool is a subclass of int in Python, but `true` is not a number on the wire.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_range(value: float, path: str, low: float | None, high: float | None) -> None:
    if low is not None and high is not None:
        if not low <= value <= high:
            raise ProtocolError(path, f"must be between {low} and {high}, got {value}")
    elif low is not None and value < low:
        raise ProtocolError(path, f"must be >= {low}, got {value}")
    elif high is not None and value > high:
        raise ProtocolError(path, f"must be <= {high}, got {value}")


def integer(low: int | None = None, high: int | None = None) -> Check:
    """An integer (not a bool), optionally within [low, high]."""

    def check(value: Any, path: str) -> None:
        if not _is_int(value):
            raise ProtocolError(path, "expected an integer")
        _check_range(value, path, low, high)

    return check


def number(low: float | None = None, high: float | None = None) -> Check:
    """A finite integer or float (not a bool), optionally within [low, high]."""

    def check(value: Any, path: str) -> None:
        if not (_is_int(value) or isinstance(value, float)):
            raise ProtocolError(path, "expected a number")
        if not math.isfinite(value):
            raise ProtocolError(path, "expected a finite number")
        _check_range(value, path, low, high)

    return check


def string(non_empty: bool = False, max_length: int | None = None) -> Check:
    """A string, optionally non-empty, optionally at most `max_length` characters."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, str):
            raise ProtocolError(path, "expected a string")
        if non_empty and not value:
            raise ProtocolError(path, "expected a non-empty string")
        if max_length is not None and len(value) > max_length:
            raise ProtocolError(path, f"expected at most {max_length} characters")

    return check


def boolean() -> Check:
    """true or false."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, bool):
            raise ProtocolError(path, "expected true or false")

    return check


def choice(*options: str) -> Check:
    """One of a fixed set of strings."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, str) or value not in options:
            listed = ", ".join(repr(option) for option in options)
            raise ProtocolError(path, f"expected one of {listed}, got {_show(value)}")

    return check


def nullable(inner: Check) -> Check:
    """null, or whatever `inner` accepts. The field itself must still be present."""

    def check(value: Any, path: str) -> None:
        if value is not None:
            inner(value, path)

    return check


def list_of(item: Check) -> Check:
    """A list whose every item passes `item`."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, list):
            raise ProtocolError(path, "expected a list")
        for index, element in enumerate(value):
            item(element, f"{path}[{index}]")

    return check


def mapping_of(item: Check) -> Check:
    """An object with any keys whose every value passes `item`."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise ProtocolError(path, "expected an object")
        for key, element in value.items():
            item(element, f"{path}.{key}")

    return check


def any_object() -> Check:
    """An object with any content."""
    return mapping_of(lambda value, path: None)


def record(fields: Mapping[str, Check], optional: Mapping[str, Check] | None = None) -> Check:
    """An object that has every field of `fields` and may have those of `optional`, each passing
    its check when present (fields neither names are ignored)."""

    def check(value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise ProtocolError(path, "expected an object")
        for name, field_check in fields.items():
            if name not in value:
                raise ProtocolError(f"{path}.{name}", "missing field")
            field_check(value[name], f"{path}.{name}")
        for name, field_check in (optional or {}).items():
            if name in value:
                field_check(value[name], f"{path}.{name}")

    return check


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool | None) else "an object"
    return text if len(text) <= 40 else text[:37] + "..."


# -- the schema tables --------------------------------------------------------------------------

# Bounded so that a value always fits the columns the server stores it in.
_INT64_MAX = 2**63 - 1
_COUNT = integer(low=0, high=_INT64_MAX)
_ID = integer(low=0, high=_INT64_MAX)
_EXIT_CODE = integer(low=-(2**31), high=2**31 - 1)
_GPU_INDEX = integer(low=0, high=255)

_SERVING = record(
    {"host": string(non_empty=True, max_length=255), "port": integer(low=1, high=65535)},
    optional={"in_flight": _COUNT, "requests_per_s": number(low=0)},
)

_SHARE = record(
    {
        "mode": choice("mps", "time_slicing"),
        "sm_percent": integer(low=0, high=100),
        "memory_mb": _COUNT,
    }
)

_WORKLOAD = record(
    {
        "workload_id": _ID,
        "state": choice(*WORKLOAD_STATES),
        "exit_code": nullable(_EXIT_CODE),
        "step": _COUNT,
    },
    # Which run of the workload: the control plane bumps it to restart a workload after a fault.
    # An inference replica says where it listens and, when the agent can tell, its load. step:
    # what it can resume from; progress: the training step it reports having reached, absent
    # when it reports none.
    # share: how a share job is held to its share of its GPU (MPS limits, or time slicing).
    optional={"attempt": _COUNT, "serving": _SERVING, "progress": _COUNT, "share": _SHARE},
)

_NIC = record({"name": string(non_empty=True), "speed_mbps": nullable(_COUNT), "up": boolean()})

# What the node is beyond its GPUs: driver stack, NVLink, host, and where it sits in the network
# (topology labels from the agent's configuration; null when not configured).
_FACTS = record(
    {
        "driver_version": nullable(string()),
        "cuda_version": nullable(string()),
        "nvlink": record({"up": _COUNT, "total": _COUNT}),
        "cpu_model": string(),
        "cpu_count": _COUNT,
        "memory_mb": _COUNT,
        "nics": list_of(_NIC),
        "datacenter": nullable(string()),
        "pod": nullable(string()),
        "leaf": nullable(string()),
    },
    # Whether its agent runs each tenant's jobs as a user of its own (false: one tenant at a
    # time on the node; null: it runs no processes).
    optional={"isolates_tenants": nullable(boolean())},
)

_NODE = record(
    {
        "hostname": string(non_empty=True),
        "gpu_model": string(),
        # A GPU's UUID as the node's record keeps it (NVML's are 40 characters).
        "gpus": list_of(
            record({"index": _GPU_INDEX, "uuid": string(max_length=64), "memory_mb": _COUNT})
        ),
    },
    optional={"facts": _FACTS},
)

# A GPU has at most seven MIG devices (seven compute slices; NVML's MIG docs).
MIG_DEVICES_MAX = 7
_MIG_DEVICE = record(
    {
        "uuid": string(non_empty=True, max_length=64),
        "profile": string(non_empty=True, max_length=32),
        "in_use": boolean(),
    }
)
_MIG = record({"enabled": boolean(), "pending": boolean(), "devices": list_of(_MIG_DEVICE)})


def check_mig(value: Any, path: str) -> None:
    """A GPU sample's `mig` record: its MIG mode, now and pending, and its MIG devices.

    Not part of the heartbeat's schema, so `parse` leaves it alone: the server checks it apart,
    and a malformed layout costs that layout, not the heartbeat that carries it."""
    _MIG(value, path)
    if len(value["devices"]) > MIG_DEVICES_MAX:
        raise ProtocolError(f"{path}.devices", f"expected at most {MIG_DEVICES_MAX} MIG devices")


_GPU_SAMPLE = record(
    {
        "index": _GPU_INDEX,
        "util": number(low=0, high=100),
        "memory_used_mb": _COUNT,
        "temperature_c": number(),
        "power_w": number(low=0),
    },
    # Volatile ECC counters (since the driver last loaded) and pages retired or rows remapped;
    # the processes seen on the GPU and the workload each belongs to (null: a stranger). A GPU
    # with MIG on or pending also carries `mig`, which `check_mig` checks.
    optional={
        "ecc_sbe": _COUNT,
        "ecc_dbe": _COUNT,
        "retired_pages": _COUNT,
        "processes": list_of(record({"pid": _COUNT, "workload_id": nullable(_ID)})),
    },
)

_ASSIGNMENT = record(
    {
        "workload_id": _ID,
        "gpu_indices": list_of(_GPU_INDEX),
        "command": string(),
        "env": mapping_of(string()),
        "simulated_duration_s": nullable(number(low=0)),
        "nnodes": integer(low=1),
        "node_rank": _COUNT,
        "master_addr": string(),
        "master_port": integer(low=0, high=65535),
    },
    # A new attempt of a listed workload means: stop the old run, start afresh. A simulated
    # workload runs at `simulated_speed` of its pace (the share of its GPUs it holds). `tenant`:
    # whose work it is, so that a node runs each tenant's as a user of its own.
    optional={
        "attempt": _COUNT,
        "simulated_speed": number(low=0),
        "serve_port": integer(low=1, high=65535),
        "tenant": _ID,
        "slices": integer(low=1, high=7),  # a share of its one GPU, in eighths
        "mig": string(max_length=16),  # a MIG instance of its one GPU, of this profile
    },
)

AGENT_MESSAGES: dict[str, Mapping[str, Check]] = {
    "hello": {
        "agent_version": string(max_length=32),  # as the node's record keeps it
        "generation": _COUNT,
        "node": _NODE,
        "workloads": list_of(_WORKLOAD),
    },
    "heartbeat": {
        "generation": _COUNT,
        "gpus": list_of(_GPU_SAMPLE),
        "workloads": list_of(_WORKLOAD),
    },
    "event": {
        "kind": choice(*EVENT_KINDS),
        "workload_id": nullable(_ID),
        "exit_code": nullable(_EXIT_CODE),
        "detail": any_object(),
    },
    # Lines a workload's run wrote, from byte `offset` of its output on (a resend after a
    # reconnect repeats an offset, which the server keeps once).
    "logs": {
        "workload_id": _ID,
        "attempt": _COUNT,
        "offset": _COUNT,
        "lines": list_of(string(max_length=LOG_LINE_CHARS)),
    },
    "ack": {
        "command_id": string(non_empty=True),
        "ok": boolean(),
        "detail": string(),
    },
}

SERVER_MESSAGES: dict[str, Mapping[str, Check]] = {
    "desired_state": {
        "generation": _COUNT,
        "assignments": list_of(_ASSIGNMENT),
    },
    "command": {
        "command_id": string(non_empty=True),
        "action": choice(*COMMAND_ACTIONS),
        "workload_id": nullable(_ID),
        "args": any_object(),
    },
    "error": {
        "reason": string(),
        "field": nullable(string()),
    },
}

# Bodies that depend on a tag: (message type) -> (tag field, body field, {tag value: check}).
# A tag value not listed leaves its body to the message table's own check.
VARIANTS: dict[str, tuple[str, str, Mapping[str, Check]]] = {
    "event": (
        "kind",
        "detail",
        {
            "fault": record(
                {
                    "code": string(non_empty=True),  # a fault catalogue code: "xid-79"
                    "xid": nullable(integer(low=0, high=2**32 - 1)),
                    "gpu_index": nullable(_GPU_INDEX),
                    "message": string(),
                }
            ),
            "checkpoint_saved": record(
                {
                    "step": _COUNT,
                    "location": string(non_empty=True),
                    "size_bytes": _COUNT,
                    "duration_s": number(low=0),
                    "kind": choice(*CHECKPOINT_KINDS),
                    "request_id": nullable(string()),
                },
                # A failed save is reported too, so it is never taken for the newest; stall_s:
                # how long training waited (less than duration_s for an async save).
                optional={
                    "status": choice(*CHECKPOINT_STATUSES),
                    "stall_s": number(low=0),
                    "attempt": _COUNT,
                },
            ),
            "workload_started": record({}, optional={"attempt": _COUNT}),
            "workload_exited": record(
                {},
                optional={
                    "step": _COUNT,
                    "log_tail": list_of(string()),
                    "error": string(),
                    "attempt": _COUNT,
                },
            ),
        },
    ),
    "command": (
        "action",
        "args",
        {
            "checkpoint": record(
                {},
                optional={
                    "timeout_s": number(low=0),
                    "reason": string(),
                    "kind": choice(*CHECKPOINT_KINDS),
                },
            ),
            # Saves past retention: the agent removes them where they live, in the workload's
            # checkpoint directory (a location elsewhere is refused).
            "delete_saves": record({"locations": list_of(string(non_empty=True))}),
            # Before a repaired node returns to service: its GPUs answer and compute, and no
            # process the agent did not start holds one.
            "health_check": record({}),
            "inject_fault": record(
                {"code": string(non_empty=True)},
                optional={
                    "gpu_index": nullable(_GPU_INDEX),
                    "duration_s": number(low=0),
                    "factor": number(low=1),
                },
            ),
        },
    ),
}

# Fields a message may carry beyond its table's. A desired state too large for one frame comes
# in `parts` messages of one generation, `part` 0 to parts - 1; the agent acts once it holds
# them all.
OPTIONAL_FIELDS: dict[str, Mapping[str, Check]] = {
    "desired_state": {
        "part": _COUNT,
        "parts": integer(low=1, high=1024),
        "session": string(non_empty=True, max_length=64),  # the answer to a hello
    },
    "hello": {"session": string(non_empty=True, max_length=64)},  # the last one it was given
}

_TABLES = {AGENT: AGENT_MESSAGES, SERVER: SERVER_MESSAGES}
_BODY_CHECKS = {
    (sender, type_): record(fields, OPTIONAL_FIELDS.get(type_))
    for sender, table in _TABLES.items()
    for type_, fields in table.items()
}
_SENDER_OF = {type_: sender for sender, table in _TABLES.items() for type_ in table}


# -- parse and encode ---------------------------------------------------------------------------


def parse(text: str | bytes, sender: str) -> dict[str, Any]:
    """Decode one frame sent by `sender` ("agent" or "server") and check it against its schema.

    Returns the message as a dict; raises ProtocolError naming the first offending field.
    """
    if sender not in _TABLES:
        raise ValueError(f"sender must be {AGENT!r} or {SERVER!r}, not {sender!r}")
    message = _decode(text)
    _validate(message, sender)
    return message


def encode(type: str, **fields: Any) -> str:
    """Build, check and serialise one message of `type`; fills in `v` and a fresh `id`.

    Pass `id=` to reuse a known id. Raises ProtocolError if the fields do not fit the schema.
    """
    sender = _SENDER_OF.get(type)
    if sender is None:
        raise ProtocolError("type", f"unknown message type {_show(type)}")
    message = {"type": type, "v": PROTOCOL_VERSION, "id": uuid.uuid4().hex, **fields}
    _validate(message, sender)
    return json.dumps(message, allow_nan=False, separators=(",", ":"))


def split_state(state: Mapping[str, Any]) -> list[str]:
    """A `desired_state` (generation, assignments, and a session when it answers a hello) as
    frames of about PART_BYTES at most: one frame when it fits, else parts of whole
    assignments, each marked with `part` and `parts` and carrying the rest."""
    whole = encode("desired_state", **state)
    if len(whole) <= PART_BYTES:
        return [whole]
    groups: list[list[Any]] = [[]]
    size = 0
    for assignment in state["assignments"]:
        item = len(json.dumps(assignment, separators=(",", ":"))) + 1
        if groups[-1] and size + item > PART_BYTES - 200:  # room for the message's own fields
            groups.append([])
            size = 0
        groups[-1].append(assignment)
        size += item
    rest = {key: value for key, value in state.items() if key != "assignments"}  # each part's
    return [
        encode("desired_state", **rest, assignments=group, part=i, parts=len(groups))
        for i, group in enumerate(groups)
    ]


def _decode(text: str | bytes) -> Any:
    if isinstance(text, bytes | bytearray):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(None, "invalid JSON: not UTF-8 text") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ProtocolError(None, f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except ValueError as exc:
        # Such as an integer of more digits than Python agrees to convert.
        raise ProtocolError(None, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError(None, "invalid JSON: nested too deeply") from None


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON itself, and the other end, may not.
    raise ProtocolError(None, f"invalid JSON: {name} is not a JSON number")


def _validate(message: Any, sender: str) -> None:
    if not isinstance(message, dict):
        raise ProtocolError(None, "expected a JSON object")
    _check_version(message)
    type_ = _check_type(message, sender)
    if "id" not in message:
        raise ProtocolError("id", "missing field")
    string(non_empty=True)(message["id"], "id")
    _BODY_CHECKS[sender, type_](message, type_)
    _check_variant(message, type_)


def _check_variant(message: dict[str, Any], type_: str) -> None:
    if type_ not in VARIANTS:
        return
    tag, body, checks = VARIANTS[type_]
    check = checks.get(message[tag])
    if check is not None:
        check(message[body], f"{type_}.{body}")


def _check_version(message: dict[str, Any]) -> None:
    # Checked before the type, so a message from a newer protocol is named as such.
    supported = f"this end speaks protocol version {PROTOCOL_VERSION}"
    if "v" not in message:
        raise ProtocolError("v", f"missing field; {supported}")
    version = message["v"]
    if not _is_int(version) or version != PROTOCOL_VERSION:
        raise ProtocolError("v", f"unsupported protocol version {_show(version)}; {supported}")


def _check_type(message: dict[str, Any], sender: str) -> str:
    if "type" not in message:
        raise ProtocolError("type", "missing field")
    type_ = message["type"]
    string(non_empty=True)(type_, "type")
    if type_ in _TABLES[sender]:
        return type_
    if type_ in _SENDER_OF:
        raise ProtocolError(
            "type", f"{type_!r} is sent by the {_SENDER_OF[type_]}, not the {sender}"
        )
    known = ", ".join(sorted(_TABLES[sender]))
    raise ProtocolError(
        "type", f"unknown message type {_show(type_)} from the {sender}; expected one of: {known}"
    )
