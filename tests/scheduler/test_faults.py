"""The fault catalogue: what each fault means for its node and its jobs, unknown XIDs, when a
fault-triggered save is possible, and the telemetry classifiers."""

from __future__ import annotations

import pytest

from scheduler.faults import (
    CATALOGUE,
    Action,
    FaultKind,
    Severity,
    ecc_fault,
    for_xid,
    hang_fault,
    lookup,
    straggler_fault,
    triggered_save_possible,
)

REQUIRED_XIDS = (13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
REQUIRED_OTHERS = (
    "ecc-dbe", "ecc-sbe-storm", "nvlink-down", "nic-down", "heartbeat-loss", "hang", "straggler",
    "slow-node",
)  # fmt: skip


def test_the_catalogue_covers_the_required_xids_and_telemetry_faults() -> None:
    assert {f"xid-{n}" for n in REQUIRED_XIDS} | set(REQUIRED_OTHERS) <= set(CATALOGUE)


@pytest.mark.parametrize("kind", CATALOGUE.values(), ids=lambda kind: kind.code)
def test_every_entry_is_filed_under_its_code_and_says_what_to_do(kind: FaultKind) -> None:
    assert CATALOGUE[kind.code] is kind
    assert kind.xid == (int(kind.code[4:]) if kind.code.startswith("xid-") else None)
    assert kind.title and kind.meaning.endswith(".")


@pytest.mark.parametrize("kind", CATALOGUE.values(), ids=lambda kind: kind.code)
def test_a_fault_that_leaves_the_job_running_leaves_its_memory_readable(kind: FaultKind) -> None:
    """Otherwise a running job could not save, and the triggered-save rule would be wrong."""
    assert kind.kills_job or kind.memory_readable


# code: (action, cordon, kills_job)
VERDICTS = {
    "xid-13": (Action.RESTART_PROCESS, False, True),
    "xid-31": (Action.RESTART_PROCESS, False, True),
    "xid-43": (Action.RESTART_PROCESS, False, True),
    "xid-45": (Action.NONE, False, False),
    "xid-48": (Action.RESET_GPU, True, True),
    "xid-63": (Action.RESET_GPU, True, False),
    "xid-64": (Action.REPAIR, True, False),
    "xid-74": (Action.RESET_GPU, True, True),
    "xid-79": (Action.REBOOT_NODE, True, True),
    "xid-92": (Action.NONE, False, False),
    "xid-94": (Action.RESET_GPU, True, True),
    "xid-95": (Action.RESET_GPU, True, True),
    "xid-119": (Action.RESET_GPU, True, True),
    "xid-120": (Action.RESET_GPU, True, True),
    "ecc-dbe": (Action.RESET_GPU, True, True),
    "ecc-sbe-storm": (Action.DRAIN_NODE, True, False),
    "nvlink-down": (Action.RESET_GPU, True, True),
    "nic-down": (Action.DRAIN_NODE, True, True),
    "heartbeat-loss": (Action.REBOOT_NODE, True, True),
    "hang": (Action.RESTART_PROCESS, False, True),
    "straggler": (Action.NONE, False, False),
    "slow-node": (Action.DRAIN_NODE, True, False),
}
STORIES = {
    "xid-13": "an engine exception is the application's: restart it, the node stays in service",
    "xid-31": "an illegal address is the application's: restart it, the node stays in service",
    "xid-43": "a channel aborted after a workload error: restart, the GPU is fine",
    "xid-45": "preemptive cleanup only echoes an earlier fault: nothing to do",
    "xid-48": "a double-bit ECC error loses the job and the GPU needs a reset",
    "xid-63": "a pending row remap lets the job finish, then the idle GPU is reset",
    "xid-64": "a failed row remap sends the GPU for repair once the job is done",
    "xid-74": "an NVLink error breaks the collectives and the GPU is reset",
    "xid-79": "a GPU fallen off the bus takes a reboot",
    "xid-92": "a high corrected-error rate is only watched",
    "xid-94": "a contained ECC error kills the process using the memory; reset the GPU",
    "xid-95": "an uncontained ECC error kills everything on the GPU; reset it",
    "xid-119": "a GSP timeout wedges the GPU: reset it",
    "xid-120": "a GSP firmware error: reset the GPU",
    "ecc-dbe": "new uncorrectable ECC counts lose the job and the GPU is reset",
    "ecc-sbe-storm": "too many retired pages drain the node without killing the job",
    "nvlink-down": "an NVLink down kills the job and the GPUs are reset",
    "nic-down": "a NIC down cuts the job off; the node is drained",
    "heartbeat-loss": "a silent node is presumed dead and power-cycled",
    "hang": "a hung job is restarted, no node is blamed yet",
    "straggler": "a straggler is a warning: the job runs on, the node stays in service",
    "slow-node": "a slow node finishes its work and takes no new work",
}


@pytest.mark.parametrize(
    ("code", "verdict"),
    [pytest.param(code, verdict, id=STORIES[code]) for code, verdict in VERDICTS.items()],
)
def test_what_each_fault_means_for_node_and_job(
    code: str, verdict: tuple[Action, bool, bool]
) -> None:
    kind = lookup(code)
    assert (kind.action, kind.cordon, kind.kills_job) == verdict


def test_a_node_with_several_faults_gets_the_most_drastic_action() -> None:
    faults = [lookup("straggler"), lookup("xid-74"), lookup("xid-79"), lookup("xid-13")]
    assert max(kind.action for kind in faults) is Action.REBOOT_NODE
    assert Action.NONE < Action.RESTART_PROCESS < Action.RESET_GPU < Action.DRAIN_NODE
    assert Action.DRAIN_NODE < Action.REBOOT_NODE < Action.REPAIR
    assert Severity.INFO < Severity.WARNING < Severity.CRITICAL


def test_an_unknown_xid_is_a_generic_warning_that_restarts_the_job() -> None:
    kind = for_xid(999)
    assert (kind.code, kind.xid, kind.severity) == ("xid-999", 999, Severity.WARNING)
    assert (kind.action, kind.kills_job, kind.cordon) == (Action.RESTART_PROCESS, True, False)
    assert "999" in kind.meaning and "xid-999" not in CATALOGUE


def test_a_known_xid_comes_from_the_catalogue() -> None:
    assert for_xid(79) is CATALOGUE["xid-79"]


def test_a_stored_unknown_xid_code_looks_up_like_the_xid() -> None:
    assert lookup("xid-999") == for_xid(999)


@pytest.mark.parametrize("code", ["gpu-on-fire", "xid-", "xid-abc", "XID-79", ""])
def test_an_unknown_code_is_a_key_error_naming_it(code: str) -> None:
    with pytest.raises(KeyError, match="unknown fault code") as caught:
        lookup(code)
    assert repr(code) in str(caught.value)


@pytest.mark.parametrize(
    ("code", "nodes", "data_parallel", "possible"),
    [
        pytest.param("xid-79", 1, 1, False, id="a one-node job whose GPU fell off the bus cannot"),
        pytest.param("xid-79", 1, 8, False, id="nor can it with replicas all on that one node"),
        pytest.param("xid-79", 16, 1, False, id="one replica spread over nodes loses a piece"),
        pytest.param("xid-79", 16, 2, True, id="a second replica on other nodes saves the state"),
        pytest.param("heartbeat-loss", 128, 64, True, id="a dead node in a wide job is covered"),
        pytest.param("heartbeat-loss", 2, 1, False, id="a dead node without a replica is not"),
        pytest.param("nic-down", 1, 1, True, id="a NIC down leaves GPU memory readable"),
        pytest.param("nvlink-down", 4, 1, True, id="an NVLink down leaves GPU memory readable"),
        pytest.param("hang", 1, 1, True, id="a hung job's ranks can save once aborted"),
        pytest.param("straggler", 1, 1, True, id="a straggler's job is still running"),
        pytest.param("xid-95", 1, 1, False, id="uncontained ECC on a one-node job: nothing left"),
    ],
)
def test_when_a_fault_triggered_save_is_possible(
    code: str, nodes: int, data_parallel: int, possible: bool
) -> None:
    assert triggered_save_possible(lookup(code), nodes, data_parallel) is possible


@pytest.mark.parametrize(
    ("nodes", "data_parallel", "per_node", "sharded", "possible"),
    [
        pytest.param(2, 16, 8, False, True, id="16 replicas of one GPU on 2 nodes: 8 survive"),
        pytest.param(2, 2, 4, False, False, id="2 replicas of 4 GPUs, both on the lost node"),
        pytest.param(16, 4, 1, True, False, id="optimizer state sharded: a node takes its shard"),
    ],
)
def test_the_plan_says_how_many_replicas_a_lost_node_takes(
    nodes: int, data_parallel: int, per_node: int, sharded: bool, possible: bool
) -> None:
    kind = lookup("xid-79")
    assert triggered_save_possible(kind, nodes, data_parallel, per_node, sharded) is possible
    assert triggered_save_possible(lookup("nic-down"), nodes, data_parallel, per_node, sharded)


def test_an_unknown_xid_counts_as_unreadable_memory() -> None:
    assert not triggered_save_possible(for_xid(999), 1, 1)
    assert triggered_save_possible(for_xid(999), 2, 2)


@pytest.mark.parametrize(("nodes", "data_parallel"), [(0, 1), (1, 0), (-1, 4)])
def test_a_job_without_nodes_or_replicas_is_an_error(nodes: int, data_parallel: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        triggered_save_possible(lookup("xid-79"), nodes, data_parallel)


@pytest.mark.parametrize(
    ("dbe_delta", "retired", "expected"),
    [
        pytest.param(0, 0, None, id="clean counters are healthy"),
        pytest.param(0, 59, None, id="retired pages below the limit are healthy"),
        pytest.param(0, 60, "ecc-sbe-storm", id="retired pages at the limit drain the node"),
        pytest.param(1, 0, "ecc-dbe", id="one new double-bit error is an ECC fault"),
        pytest.param(2, 80, "ecc-dbe", id="a double-bit error outranks retired pages"),
    ],
)
def test_ecc_counters(dbe_delta: int, retired: int, expected: str | None) -> None:
    fault = ecc_fault(dbe_delta, retired)
    assert (fault.code if fault else None) == expected


def test_the_retired_pages_limit_is_a_setting() -> None:
    assert ecc_fault(0, 10, limit=10) is CATALOGUE["ecc-sbe-storm"]


@pytest.mark.parametrize(
    ("quiet_s", "limit_s", "hung"),
    [
        pytest.param(60.0, 600.0, False, id="a minute without progress is not a hang"),
        pytest.param(600.0, 600.0, True, id="reaching the limit is a hang"),
        pytest.param(3600.0, 1800.0, True, id="an hour past a half-hour limit is a hang"),
    ],
)
def test_hangs(quiet_s: float, limit_s: float, hung: bool) -> None:
    assert (hang_fault(quiet_s, limit_s) is CATALOGUE["hang"]) is hung


@pytest.mark.parametrize(
    ("step_s", "peers", "straggles"),
    [
        pytest.param(10.5, [10.0, 10.2, 9.9], False, id="a step near its peers' is fine"),
        pytest.param(16.0, [10.0, 10.2, 9.9], True, id="a step 1.6 times the median straggles"),
        pytest.param(16.0, [10.0, 10.0, 40.0], True, id="another slow peer does not hide it"),
        pytest.param(16.0, [], False, id="without peers there is nothing to compare"),
    ],
)
def test_stragglers(step_s: float, peers: list[float], straggles: bool) -> None:
    assert (straggler_fault(step_s, peers) is CATALOGUE["straggler"]) is straggles
