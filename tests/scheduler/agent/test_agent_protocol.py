"""The wire protocol tables: what passes, and what each kind of malformed message is told."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from scheduler.agent.protocol import (
    AGENT,
    AGENT_MESSAGES,
    LOG_LINE_CHARS,
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
    "ecc_sbe": 3,
    "ecc_dbe": 0,
    "retired_pages": 1,
}
FACTS = {
    "driver_version": "550.90.07",
    "cuda_version": "12.4",
    "nvlink": {"up": 144, "total": 144},
    "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
    "cpu_count": 224,
    "memory_mb": 2063731,
    "nics": [{"name": "ib0", "speed_mbps": 400000, "up": True}],
    "datacenter": "dc-east",
    "pod": "pod-3",
    "leaf": None,
}
FAULT = {"code": "xid-79", "xid": 79, "gpu_index": 3, "message": "XID 79 on GPU 3"}
SAVED = {
    "step": 1200,
    "location": "/ckpt/step-000001200.pt",
    "size_bytes": 18874368,
    "duration_s": 0.41,
    "kind": "requested",
    "request_id": "c-17",
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
            "facts": FACTS,
        },
        "workloads": [WORKLOAD],
    },
    "heartbeat": {
        "generation": 3,
        "gpus": [dict(GPU_SAMPLE, index=i) for i in range(3)],
        "workloads": [WORKLOAD, dict(WORKLOAD, workload_id=8, state="exited", exit_code=0)],
    },
    "event": {"kind": "workload_exited", "workload_id": 7, "exit_code": -15, "detail": {}},
    "logs": {"workload_id": 7, "attempt": 1, "offset": 0, "lines": ["step 1", ""]},
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
        changed("event", ("workload_id",), None) | {"kind": "fault", "detail": FAULT},
        id="a node fault names no workload",
    ),
    pytest.param(
        message("event", kind="fault", detail=dict(FAULT, code="ecc-dbe", xid=None)),
        id="a fault from the ECC counters has no XID",
    ),
    pytest.param(
        message("event", kind="checkpoint_saved", detail=dict(SAVED, request_id=None)),
        id="a periodic save answers no request",
    ),
    pytest.param(
        message("event", detail={"step": 40, "log_tail": ["loss 0.5", "Traceback"]}),
        id="an exit with the last lines of its log",
    ),
    pytest.param(
        message("event", kind="workload_started", detail={"anything": [1]}),
        id="a kind without a detail schema takes any object",
    ),
    pytest.param(
        changed("hello", ("node", "facts")), id="a hello from an agent that predates facts"
    ),
    pytest.param(
        changed("heartbeat", ("gpus", 0, "ecc_sbe")),
        id="a sample from an agent that predates the ECC counters",
    ),
    pytest.param(
        message("command", action="inject_fault", args={"code": "xid-79", "gpu_index": 0}),
        id="a fault drill on GPU 0",
    ),
    pytest.param(
        message(
            "command", action="inject_fault", args={"code": "heartbeat-loss", "duration_s": 30}
        ),
        id="a heartbeat-loss drill for 30 s",
    ),
    pytest.param(
        message("command", args={"timeout_s": 120, "reason": "preemption"}),
        id="a checkpoint with a deadline and a reason",
    ),
    pytest.param(
        message("command", args={"kind": "triggered", "reason": "fault 12"}),
        id="a save a fault triggers",
    ),
    pytest.param(
        changed("desired_state", ("assignments", 0, "attempt"), 2),
        id="the third attempt of a workload",
    ),
    pytest.param(
        changed("heartbeat", ("workloads", 0, "attempt"), 2), id="a run reported by its attempt"
    ),
    pytest.param(
        message(
            "event",
            kind="checkpoint_saved",
            detail=dict(SAVED, status="failed", stall_s=0.2, attempt=1),
        ),
        id="a failed save is reported too",
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
        AGENT,
        changed("heartbeat", ("gpus", 1, "ecc_dbe"), -1),
        "heartbeat.gpus[1].ecc_dbe",
        "must be between 0 and",
        id="a negative ECC counter",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("gpus", 0, "retired_pages"), 2.5),
        "heartbeat.gpus[0].retired_pages",
        "expected an integer",
        id="half a retired page",
    ),
    pytest.param(
        AGENT,
        changed("hello", ("node", "facts", "nvlink", "up")),
        "hello.node.facts.nvlink.up",
        "missing field",
        id="facts whose NVLink count lacks the links up",
    ),
    pytest.param(
        AGENT,
        changed("hello", ("node", "facts", "nics", 0, "up"), "yes"),
        "hello.node.facts.nics[0].up",
        "expected true or false",
        id="a NIC whose state is a string",
    ),
    pytest.param(
        AGENT,
        changed("hello", ("node", "facts", "datacenter"), 7),
        "hello.node.facts.datacenter",
        "expected a string",
        id="a data center label that is a number",
    ),
    pytest.param(
        AGENT,
        message("event", kind="fault", detail={"xid": 79, "gpu_index": 3, "message": ""}),
        "event.detail.code",
        "missing field",
        id="a fault without its catalogue code",
    ),
    pytest.param(
        AGENT,
        message("event", kind="fault", detail=dict(FAULT, code=79)),
        "event.detail.code",
        "expected a string",
        id="a fault code as a bare XID number",
    ),
    pytest.param(
        AGENT,
        message("event", kind="fault", detail=dict(FAULT, gpu_index=256)),
        "event.detail.gpu_index",
        "between 0 and 255",
        id="a fault on a GPU no node has",
    ),
    pytest.param(
        AGENT,
        message("event", kind="checkpoint_saved", detail=dict(SAVED, kind="nightly")),
        "event.detail.kind",
        "expected one of 'periodic', 'async', 'triggered', 'requested'",
        id="a save of a kind the contract does not know",
    ),
    pytest.param(
        AGENT,
        message("event", kind="checkpoint_saved", detail=dict(SAVED, location="")),
        "event.detail.location",
        "non-empty",
        id="a save with no location",
    ),
    pytest.param(
        AGENT,
        message("event", kind="checkpoint_saved", detail=dict(SAVED, duration_s=-1)),
        "event.detail.duration_s",
        "must be >= 0",
        id="a save that took negative time",
    ),
    pytest.param(
        AGENT,
        message("event", detail={"log_tail": "one long string"}),
        "event.detail.log_tail",
        "expected a list",
        id="a log tail that is not a list of lines",
    ),
    pytest.param(
        AGENT,
        message("event", kind="checkpoint_saved", detail=dict(SAVED, status="partial")),
        "event.detail.status",
        "expected one of 'complete', 'failed'",
        id="a save neither complete nor failed",
    ),
    pytest.param(
        AGENT,
        changed("heartbeat", ("workloads", 0, "attempt"), -1),
        "heartbeat.workloads[0].attempt",
        "must be between 0",
        id="a negative attempt",
    ),
    pytest.param(
        SERVER,
        changed("desired_state", ("assignments", 0, "attempt"), "2"),
        "desired_state.assignments[0].attempt",
        "expected an integer",
        id="an attempt as a string",
    ),
    pytest.param(
        SERVER,
        message("command", args={"kind": "nightly"}),
        "command.args.kind",
        "expected one of",
        id="a checkpoint of a kind the contract does not know",
    ),
    pytest.param(
        SERVER,
        message("command", action="inject_fault", args={"gpu_index": 0}),
        "command.args.code",
        "missing field",
        id="a fault drill that names no fault",
    ),
    pytest.param(
        SERVER,
        message("command", action="inject_fault", args={"code": "slow-node", "factor": 0.5}),
        "command.args.factor",
        "must be >= 1",
        id="a slow node that runs faster",
    ),
    pytest.param(
        SERVER,
        message("command", args={"timeout_s": "soon"}),
        "command.args.timeout_s",
        "expected a number",
        id="a checkpoint deadline that is not a number",
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


def test_an_agent_version_longer_than_the_node_record_keeps_is_refused() -> None:
    """A 200 kB version string was stored (SQLite) or made the hello fail in the database."""
    frame = json.dumps(changed("hello", ("agent_version",), "9" * 200_000))
    with pytest.raises(ProtocolError, match=r"^hello\.agent_version: expected at most 32"):
        parse(frame, AGENT)
    assert parse(json.dumps(changed("hello", ("agent_version",), "x" * 32)), AGENT)


def test_a_gpu_uuid_longer_than_the_node_record_keeps_is_refused() -> None:
    """A longer one passed, then made the hello fail in the database (PostgreSQL)."""
    frame = json.dumps(changed("hello", ("node", "gpus", 0, "uuid"), "GPU-" + "f" * 61))
    with pytest.raises(ProtocolError, match=r"^hello\.node\.gpus\[0\]\.uuid: expected at most 64"):
        parse(frame, AGENT)
    assert parse(json.dumps(changed("hello", ("node", "gpus", 0, "uuid"), "G" * 64)), AGENT)


def test_a_log_line_longer_than_the_protocol_carries_is_refused() -> None:
    frame = json.dumps(changed("logs", ("lines", 0), "x" * (LOG_LINE_CHARS + 1)))
    with pytest.raises(ProtocolError, match=r"^logs\.lines\[0\]: expected at most 4096"):
        parse(frame, AGENT)


def test_a_large_desired_state_goes_in_parts_of_whole_assignments():
    """Five assignments of 250 kB: 1.25 MB in all, over what one WebSocket frame carries."""
    from scheduler.agent.protocol import PART_BYTES, split_state

    def assignment(wid):
        return {"workload_id": wid, "gpu_indices": [wid], "command": "x" * 250_000, "env": {},
                "simulated_duration_s": None, "nnodes": 1, "node_rank": 0,
                "master_addr": "", "master_port": 0}  # fmt: skip

    state = {"generation": 7, "assignments": [assignment(w) for w in range(5)], "session": "s"}
    frames = split_state(state)
    parts = [parse(frame, SERVER) for frame in frames]
    assert len(frames) > 1 and all(len(frame) <= PART_BYTES for frame in frames)
    assert [(p["generation"], p["part"], p["parts"], p["session"]) for p in parts] == [
        (7, i, len(frames), "s") for i in range(len(frames))
    ]
    assert [a for p in parts for a in p["assignments"]] == state["assignments"]
    small = {"generation": 8, "assignments": [assignment(0)]}
    assert "parts" not in parse(split_state(small)[0], SERVER)  # one frame, as ever


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("\x1b[31mred\x1b[0m ok", "red ok"),  # colours
        ("epoch 1\r 10%\r 50%", " 50%"),  # a progress bar: its last state
        ("\x1b]0;owned\x07title", "title"),  # a window title
        ("\x1b[2J\x1b[Hcleared", "cleared"),  # a cleared screen
        ("nul\x00 bell\x07 tab\tkept", "nul bell tab\tkept"),
        ("a lone escape\x1b", "a lone escape"),
    ],
)
def test_a_jobs_output_is_shown_without_terminal_control(written, shown):
    from scheduler.agent.protocol import printable

    assert printable(written) == shown
