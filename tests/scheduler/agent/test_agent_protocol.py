"""The wire protocol tables: what passes, and what each kind of malformed message is told."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from scheduler.agent.protocol import (
    AGENT,
    AGENT_MESSAGES,
    PROTOCOL_VERSION,
    SERVER,
    SERVER_MESSAGES,
    ProtocolError,
    encode,
    parse,
)

WORKLOAD = {"workload_id": 7, "state": "running", "exit_code": None, "step": 120}
GPU_SAMPLE = {
    "index": 0,
    "util": 91.5,
    "memory_used_mb": 70000,
    "temperature_c": 71.0,
    "power_w": 640.5,
}
ASSIGNMENT = {
    "workload_id": 7,
    "gpu_indices": [0, 1],
    "command": "torchrun train.py",
    "env": {"NCCL_DEBUG": "WARN"},
    "simulated_duration_s": 3600.0,
    "nnodes": 2,
    "node_rank": 1,
    "master_addr": "node-a",
    "master_port": 29500,
}

BODIES: dict[str, dict[str, Any]] = {
    "hello": {
        "agent_version": "0.1.0",
        "generation": 0,
        "node": {
            "hostname": "node-a",
            "gpu_model": "H100-SXM-80GB",
            "gpus": [{"index": 0, "uuid": "GPU-0", "memory_mb": 81559}],
        },
        "workloads": [WORKLOAD],
    },
    "heartbeat": {
        "generation": 3,
        "gpus": [dict(GPU_SAMPLE, index=i) for i in range(3)],
        "workloads": [WORKLOAD, dict(WORKLOAD, workload_id=8, state="exited", exit_code=0)],
    },
    "event": {"kind": "workload_exited", "workload_id": 7, "exit_code": -15, "detail": {}},
    "ack": {"command_id": "c1", "ok": True, "detail": "workload 7 stopped"},
    "desired_state": {"generation": 3, "assignments": [ASSIGNMENT]},
    "command": {"command_id": "c1", "action": "checkpoint", "workload_id": 7, "args": {}},
    "error": {"reason": "expected a number", "field": "heartbeat.gpus[2].util"},
}

SENDER = {**{t: AGENT for t in AGENT_MESSAGES}, **{t: SERVER for t in SERVER_MESSAGES}}


def message(type_: str, **changes: Any) -> dict[str, Any]:
    """A valid message of `type_`, with top-level fields replaced (None values kept)."""
    return {"type": type_, "v": 1, "id": "5f0c" * 8, **copy.deepcopy(BODIES[type_]), **changes}


def changed(type_: str, path: tuple[str | int, ...], value: Any = ...) -> dict[str, Any]:
    """A valid message of `type_` with the value at `path` replaced, or deleted for `...`."""
    result = message(type_)
    parent = result
    for key in path[:-1]:
        parent = parent[key]
    if value is ...:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return result


def test_the_tables_cover_every_message_type() -> None:
    assert set(BODIES) == set(AGENT_MESSAGES) | set(SERVER_MESSAGES)
    assert not set(AGENT_MESSAGES) & set(SERVER_MESSAGES)


@pytest.mark.parametrize("type_", sorted(BODIES))
def test_a_valid_message_of_every_type_parses_as_sent(type_: str) -> None:
    sent = message(type_)
    assert parse(json.dumps(sent), SENDER[type_]) == sent


@pytest.mark.parametrize("type_", sorted(BODIES))
def test_encode_fills_in_version_and_a_fresh_id_and_parses_back(type_: str) -> None:
    first, second = (parse(encode(type_, **BODIES[type_]), SENDER[type_]) for _ in range(2))
    assert first["v"] == PROTOCOL_VERSION
    assert len(first["id"]) == 32 and int(first["id"], 16) >= 0
    assert first["id"] != second["id"]
    assert {k: v for k, v in first.items() if k not in ("type", "v", "id")} == BODIES[type_]


VALID_VARIANTS = [
    pytest.param(changed("hello", ("workloads",), []), id="a first hello with no workloads"),
    pytest.param(
        changed("heartbeat", ("gpus", 0, "util"), 0), id="an integer utilisation is a number"
    ),
    pytest.param(
        changed("desired_state", ("assignments", 0, "simulated_duration_s"), None),
        id="a real workload has no simulated duration",
    ),
    pytest.param(
        changed("event", ("workload_id",), None) | {"kind": "fault", "detail": {"xid": 79}},
        id="a node fault names no workload",
    ),
    pytest.param(changed("error", ("field",), None), id="an error about the whole frame"),
    pytest.param(
        message("heartbeat", future_field={"x": 1}), id="fields a newer peer adds are ignored"
    ),
]


@pytest.mark.parametrize("sent", VALID_VARIANTS)
def test_valid_variants_pass(sent: dict[str, Any]) -> None:
    assert parse(json.dumps(sent).encode(), SENDER[sent["type"]]) == sent


def nan_util() -> str:
    return json.dumps(changed("heartbeat", ("gpus", 0, "util"), float("nan")))


MALFORMED = [
    # (sender, frame, field, reason fragment)
    pytest.param(AGENT, "{nope", None, "invalid JSON", id="text that is not JSON"),
    pytest.param(AGENT, b"\xff\xfe", None, "not UTF-8", id="bytes that are not UTF-8"),
    pytest.param(AGENT, nan_util(), None, "NaN is not a JSON number", id="NaN smuggled in"),
    pytest.param(AGENT, "[]", None, "expected a JSON object", id="a JSON list is not a message"),
    pytest.param(AGENT, "[" * 100_000, None, "invalid JSON", id="brackets nested beyond reason"),
    pytest.param(AGENT, "9" * 5000, None, "invalid JSON", id="a number too long to read"),
    pytest.param(
        AGENT,
        changed("hello", ("v",)),
        "v",
        "speaks protocol version 1",
        id="a message without a version is told the supported one",
    ),
    pytest.param(
        AGENT,
        message("hello", v=2),
        "v",
        "unsupported protocol version 2; this end speaks protocol version 1",
        id="a message from protocol version 2 is told the supported one",
    ),
    pytest.param(
        AGENT,
        message("hello", v=True),
        "v",
        "unsupported protocol version true",
        id="version true is not version 1",
    ),
    pytest.param(AGENT, changed("hello", ("type",)), "type", "missing", id="no type"),
    pytest.param(
        AGENT,
        message("hello", type="reboot"),
        "type",
        "expected one of: ack, event",
        id="a type nobody sends",
    ),
    pytest.param(
        AGENT,
        message("desired_state"),
        "type",
        "sent by the server, not the agent",
        id="an agent may not send a desired state",
    ),
    pytest.param(
        SERVER,
        message("heartbeat"),
        "type",
        "sent by the agent, not the server",
        id="a server may not send a heartbeat",
    ),
    pytest.param(AGENT, changed("ack", ("id",)), "id", "missing", id="a message without an id"),
    pytest.param(AGENT, message("ack", id=""), "id", "non-empty", id="an empty id"),
    pytest.param(
        AGENT, changed("hello", ("node",)), "hello.node", "missing field", id="hello without node"
    ),
    pytest.param(
        AGENT,
        changed("hello", ("node", "gpus", 0, "uuid")),
        "hello.node.gpus[0].uuid",
        "missing field",
        id="an inventory GPU without its uuid",
    ),
    pytest.param(
        AGENT,
        changed("hello", ("workloads", 0, "state"), "zombie"),
        "hello.workloads[0].state",
        "expected one of 'running', 'exited', got \"zombie\"",
        id="a workload state off the list",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("generation",), True),
        "heartbeat.generation",
        "expected an integer",
        id="a generation of true (bool is not an int)",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("generation",), -1),
        "heartbeat.generation",
        "must be between 0 and 9223372036854775807, got -1",
        id="a negative generation",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("generation",), 2**70),
        "heartbeat.generation",
        "must be between 0 and 9223372036854775807, got 1180591620717411303424",
        id="a generation too large to store",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("gpus", 0, "index"), 40000),
        "heartbeat.gpus[0].index",
        "must be between 0 and 255, got 40000",
        id="a GPU index no node has",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("gpus", 2, "util"), "91"),
        "heartbeat.gpus[2].util",
        "expected a number",
        id="a utilisation sent as a string",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("gpus", 0, "util"), 100.5),
        "heartbeat.gpus[0].util",
        "must be between 0 and 100",
        id="a utilisation above 100",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("gpus",), {"0": GPU_SAMPLE}),
        "heartbeat.gpus",
        "expected a list",
        id="GPUs as an object instead of a list",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("workloads", 1, "exit_code"), "0"),
        "heartbeat.workloads[1].exit_code",
        "expected an integer",
        id="an exit code as a string",
    ),
    pytest.param(
        AGENT,
        changed("event", ("kind",), "meltdown"),
        "event.kind",
        "expected one of",
        id="an event of an unknown kind",
    ),
    pytest.param(
        AGENT,
        changed("event", ("detail",), []),
        "event.detail",
        "expected an object",
        id="an event detail that is a list",
    ),
    pytest.param(
        AGENT,
        changed("ack", ("ok",), "yes"),
        "ack.ok",
        "expected true or false",
        id="an ack whose ok is a string",
    ),
    pytest.param(
        SERVER,
        changed("desired_state", ("assignments", 0, "gpu_indices", 1), 1.0),
        "desired_state.assignments[0].gpu_indices[1]",
        "expected an integer",
        id="a GPU index as a float",
    ),
    pytest.param(
        SERVER,
        changed("desired_state", ("assignments", 0, "env", "NCCL_DEBUG"), 1),
        "desired_state.assignments[0].env.NCCL_DEBUG",
        "expected a string",
        id="an environment value that is not a string",
    ),
    pytest.param(
        SERVER,
        changed("desired_state", ("assignments", 0, "master_port"), 70000),
        "desired_state.assignments[0].master_port",
        "between 0 and 65535",
        id="a port out of range",
    ),
    pytest.param(
        SERVER,
        changed("desired_state", ("assignments", 0, "simulated_duration_s"), True),
        "desired_state.assignments[0].simulated_duration_s",
        "expected a number",
        id="a duration of true",
    ),
    pytest.param(
        SERVER,
        changed("command", ("action",), "reboot"),
        "command.action",
        "expected one of",
        id="a command with an unknown action",
    ),
    pytest.param(
        SERVER,
        changed("command", ("args",)),
        "command.args",
        "missing field",
        id="a command without args",
    ),
    pytest.param(
        SERVER,
        changed("command", ("workload_id",)),
        "command.workload_id",
        "missing field",
        id="a nullable field must still be present",
    ),
    pytest.param(
        SERVER,
        changed("error", ("field",), 3),
        "error.field",
        "expected a string",
        id="an error whose field is a number",
    ),
]


@pytest.mark.parametrize(("sender", "frame", "field", "reason"), MALFORMED)
def test_a_malformed_message_names_the_field_and_the_reason(
    sender: str, frame: Any, field: str | None, reason: str
) -> None:
    text = frame if isinstance(frame, str | bytes) else json.dumps(frame)
    with pytest.raises(ProtocolError) as caught:
        parse(text, sender)
    assert caught.value.field == field
    assert reason in caught.value.reason
    assert str(caught.value) == (
        f"{field}: {caught.value.reason}" if field else caught.value.reason
    )


def test_the_error_string_reads_as_a_path_and_a_reason() -> None:
    frame = json.dumps(changed("heartbeat", ("gpus", 2, "util"), None))
    with pytest.raises(ProtocolError, match=r"^heartbeat\.gpus\[2\]\.util: expected a number$"):
        parse(frame, AGENT)


def test_a_protocol_error_is_a_value_error() -> None:
    assert issubclass(ProtocolError, ValueError)


def test_encode_checks_what_it_sends() -> None:
    with pytest.raises(ProtocolError) as caught:
        encode("heartbeat", generation=1, gpus=[dict(GPU_SAMPLE, util=float("inf"))], workloads=[])
    assert caught.value.field == "heartbeat.gpus[0].util"
    with pytest.raises(ProtocolError, match="^type: unknown message type"):
        encode("reboot")
    with pytest.raises(ProtocolError, match="^ack.detail: missing field$"):
        encode("ack", command_id="c1", ok=True)


def test_encode_keeps_an_id_given_to_it() -> None:
    assert json.loads(encode("ack", id="abc", command_id="c1", ok=False, detail=""))["id"] == "abc"


def test_parse_refuses_an_unknown_sender_as_a_programming_error() -> None:
    with pytest.raises(ValueError, match="sender must be") as caught:
        parse(encode("ack", command_id="c1", ok=True, detail=""), "browser")
    assert not isinstance(caught.value, ProtocolError)
