"""The one shape of every interruption: save first or not, which nodes save, the grace, and
where the job restarts."""

import pytest

from scheduler.checkpointing import PolicyKind
from scheduler.faults import lookup
from scheduler.interruptions import Cause, Restart, grace_s, save_first, savers, where

XID_79 = lookup("xid-79")  # the GPU's memory is gone with it
HANG = lookup("hang")  # the GPUs are fine: every rank can save


@pytest.mark.parametrize(
    ("cause", "policy", "running", "fault", "nodes", "expected"),
    [
        (Cause.PREEMPT, PolicyKind.ASYNC, True, None, 4, "requested"),
        (Cause.SHRINK, PolicyKind.PERIODIC, True, None, 4, "requested"),
        (Cause.GROW, PolicyKind.TRIGGERED, True, None, 4, "requested"),
        (Cause.DRAIN, PolicyKind.ASYNC, True, lookup("drain"), 1, "requested"),
        (Cause.PREEMPT, PolicyKind.NONE, True, None, 4, None),  # nothing to save with
        (Cause.PREEMPT, PolicyKind.ASYNC, False, None, 4, None),  # not started: no process
        (Cause.FAULT, PolicyKind.ASYNC, True, XID_79, 4, None),  # only triggered saves on faults
        (Cause.FAULT, PolicyKind.TRIGGERED, True, XID_79, 4, "triggered"),  # 3 replicas left
        (Cause.FAULT, PolicyKind.TRIGGERED, True, XID_79, 1, None),  # its only copy is lost
        (Cause.FAULT, PolicyKind.TRIGGERED, True, HANG, 1, "triggered"),  # memory readable
    ],
)
def test_save_first(cause, policy, running, fault, nodes, expected):
    assert save_first(cause, policy, running, fault, nodes) == expected


def test_a_sharded_optimizer_loses_its_shards_with_the_node():
    assert save_first(Cause.FAULT, PolicyKind.TRIGGERED, True, XID_79, 4, 4, 1, True) is None


def test_the_ranks_that_save_are_those_whose_memory_is_readable():
    assert savers([1, 2, 3], [2], XID_79) == [1, 3]
    assert savers([1, 2, 3], [2], HANG) == [1, 2, 3]
    assert savers([1, 2, 3], [2], None) == [1, 2, 3]  # nothing failed: a drain


def test_the_grace_is_the_faults_or_the_jobs_cut_to_a_deadline():
    assert grace_s(Cause.FAULT, 300, 60) == 60
    assert grace_s(Cause.PREEMPT, 300, 60) == 300
    assert grace_s(Cause.PREEMPT, 300, 60, deadline_s=120) == 120


@pytest.mark.parametrize(
    ("lost", "held", "min_gpus", "spares", "expected"),
    [
        (0, 16, None, False, Restart.IN_PLACE),
        (8, 16, None, True, Restart.SPARE),
        (8, 16, 8, True, Restart.SPARE),  # a spare keeps its size: better than shrinking
        (8, 24, 8, False, Restart.SHRUNK),
        (8, 16, 16, False, Restart.REQUEUED),  # below its minimum
        (8, 8, 8, False, Restart.REQUEUED),  # nothing left
        (8, 16, None, False, Restart.REQUEUED),
    ],
)
def test_where_it_restarts(lost, held, min_gpus, spares, expected):
    assert where(lost, held, min_gpus, spares) is expected
