"""Kueue's own table tests, held against the engine.

Each case is one of kubernetes-sigs/kueue's table tests (`pkg/scheduler/preemption/
preemption_test.go`: TestPreemption, TestHierarchicalPreemptions, TestFairPreemptions; `pkg/
scheduler/scheduler_test.go`: TestSchedule), under its Kueue name, written out again on Wanka's
model: Kueue's one resource (cpu) is one GPU model, a ClusterQueue is a queue with the same
nominal quota, borrowing and lending limits and preemption policy (`PreemptionPolicy` uses
Kueue's names), a Cohort is a cohort, and the cluster is one node as large as the cohort tree's
quota (or what runs, if more) in one-GPU nodes, so that only quota binds, as in Kueue's
tests. Kueue hands its
preemptor an assignment that needs preemption and checks whom it preempts; here the engine
plans the whole cycle and the test compares whom it preempts (and, for TestSchedule, whom it
admits). A case either agrees with Kueue or names, in `wanka`, what the engine does instead
and, in `why`, the section of docs/adr/0003-differences-from-kueue.md that says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from scheduler.engine import (
    FairSharing,
    Placement,
    PreemptionPolicy,
    ReclaimWithinCohort,
    WithinClusterQueue,
    plan,
)
from scheduler.engine.testing import (
    make_cohort,
    make_node,
    make_queue,
    make_snapshot,
    make_workload,
)

ADR = Path(__file__).parents[3] / "docs" / "adr" / "0003-differences-from-kueue.md"
NOW = 10_000.0
NEVER, LOWER, ANY = "Never", "LowerPriority", "Any"
NEWER = "LowerOrNewerEqualPriority"
PREEMPTION = "preemption_test.go TestPreemption"
HIERARCHY = "preemption_test.go TestHierarchicalPreemptions"
FAIR = "preemption_fair_test.go TestFairPreemptions"
SCHEDULE = "scheduler_test.go TestSchedule"


@dataclass(frozen=True)
class CQ:
    """A Kueue ClusterQueue: quota in Kueue's units, limits, preemption policy, weight."""

    name: str
    nominal: float
    cohort: str | None = None
    borrowing_limit: float | None = None
    lending_limit: float | None = None
    within: str = NEVER  # withinClusterQueue
    reclaim: str = NEVER  # reclaimWithinCohort
    borrow: bool = False  # borrowWithinCohort: LowerPriority
    threshold: int | None = None  # ... its maxPriorityThreshold
    weight: float = 1.0


@dataclass(frozen=True)
class Co:
    """A Kueue Cohort object: its parent and quota of its own."""

    name: str
    parent: str | None = None
    nominal: float = 0


@dataclass(frozen=True)
class W:
    """A workload: name, ClusterQueue, priority, cpu; times in seconds from now."""

    name: str
    cq: str
    priority: int
    cpu: float
    created: float | None = None  # None: in the order listed, before now
    reserved: float = 0.0  # when its quota was reserved (it started)
    evicted: bool = False  # already evicted, still holding its quota


@dataclass(frozen=True)
class Case:
    source: str
    name: str
    queues: tuple[CQ, ...]
    running: tuple[W, ...]
    incoming: tuple[W, ...]
    kueue: frozenset[str]  # whom Kueue preempts
    admitted: frozenset[str] | None = None  # whom Kueue admits (TestSchedule only)
    cohorts: tuple[Co, ...] = ()
    wanka: frozenset[str] | None = None  # whom Wanka preempts, where it differs by design
    wanka_admits: frozenset[str] | None = None  # whom it admits, where that differs
    why: str = ""  # the ADR section that says why
    fair: FairSharing = FairSharing.OFF
    by_share: bool = False  # Kueue's preemption with fair sharing enabled
    scale: int = 1  # GPUs per Kueue cpu, for cases in halves


def case(source, name, queues, running, incoming, kueue, **rest) -> pytest.param:
    incoming = incoming if isinstance(incoming, tuple) else (incoming,)
    for key in ("admitted", "wanka", "wanka_admits"):
        if rest.get(key) is not None:
            rest[key] = frozenset(rest[key])
    made = Case(source, name, tuple(queues), tuple(running), incoming, frozenset(kueue), **rest)
    return pytest.param(made, id=name)


# The sections of the ADR that give the reason for each deliberate difference.
OVER_QUOTA = "Preemption does not bring a tree back under a lowered quota"
BORROW_OWN = "A job that must borrow may evict its own queue's lower-priority work"
FEWEST = "Fewest victims first, then the queue that borrows most"
SHARE_BEFORE = "A borrowing claimant's share counts all it asks for"
QUEUE_SHARES = "Fair shares are queues' shares, with no cohort weights"
IDLE_LENT = "Idle quota is lent even when its owner could not take it back"
ROOM_KEPT = "Borrowing preemption keeps the room with the claimant"
CHEAPEST = "Where its own work must go anyway, the cheapest room wins"

# -- TestPreemption's ClusterQueues (single resource: cpu; memory never binds in these cases) --

STANDALONE = CQ("standalone", 6, within=LOWER)
C1 = CQ("c1", 6, "cohort", borrowing_limit=6, within=LOWER, reclaim=LOWER)
C2 = CQ("c2", 6, "cohort", borrowing_limit=6, within=NEVER, reclaim=ANY)
D1 = CQ("d1", 6, "cohort-no-limits", within=LOWER, reclaim=LOWER)
D2 = CQ("d2", 6, "cohort-no-limits", within=NEVER, reclaim=ANY)
L1 = CQ("l1", 6, "legion", borrowing_limit=12, within=LOWER, reclaim=LOWER)
STARVE = CQ("preventStarvation", 6, within=NEWER)
SHARED = "with_shared_cq"
A_STD = CQ("a_standard", 1, SHARED, 12, within=NEVER, reclaim=LOWER, borrow=True, threshold=0)
B_STD = CQ("b_standard", 1, SHARED, 12, within=LOWER, reclaim=ANY, borrow=True, threshold=0)
A_BE = CQ("a_best_effort", 1, SHARED, 12, within=NEVER, reclaim=LOWER, borrow=True, threshold=0)
B_BE = CQ("b_best_effort", 0, SHARED, 13, within=NEVER, reclaim=LOWER, borrow=True, threshold=0)
SHARED_CQ = CQ("shared", 10, SHARED)
WITH_SHARED = (A_STD, B_STD, A_BE, B_BE, SHARED_CQ)
LEND1 = CQ("lend1", 6, "cohort-lend", lending_limit=4, within=LOWER, reclaim=LOWER)
LEND2 = CQ("lend2", 6, "cohort-lend", lending_limit=2, within=LOWER, reclaim=LOWER)
THREE = (CQ("a", 2, "cohort-three", within=LOWER, reclaim=ANY), CQ("b", 2, "cohort-three"))
THREE += (CQ("c", 2, "cohort-three"),)


def trio(cq: str) -> tuple[W, ...]:
    """low, mid and high, two cpu each: TestPreemption's common start."""
    return (W("low", cq, -1, 2), W("mid", cq, 0, 2), W("high", cq, 1, 2))


PREEMPTION_CASES = [
    case(
        PREEMPTION,
        "preempt lowest priority",
        [STANDALONE],
        trio("standalone"),
        W("in", "standalone", 1, 2),
        {"low"},
    ),
    case(
        PREEMPTION,
        "preempt multiple",
        [STANDALONE],
        trio("standalone"),
        W("in", "standalone", 1, 3),
        {"low", "mid"},
    ),
    case(
        PREEMPTION,
        "no preemption for low priority",
        [STANDALONE],
        [W("low", "standalone", -1, 3), W("mid", "standalone", 0, 3)],
        W("in", "standalone", -1, 1),
        set(),
    ),
    case(
        PREEMPTION,
        "not enough low priority workloads",
        [STANDALONE],
        [W("low", "standalone", -1, 3), W("mid", "standalone", 0, 3)],
        W("in", "standalone", 0, 4),
        set(),
    ),
    case(
        PREEMPTION,
        "some free quota, preempt low priority",
        [STANDALONE],
        [
            W("low", "standalone", -1, 1),
            W("mid", "standalone", 0, 1),
            W("high", "standalone", 1, 3),
        ],
        W("in", "standalone", 1, 2),
        {"low"},
    ),
    case(
        PREEMPTION,
        "minimal set excludes low priority",
        [STANDALONE],
        [
            W("low", "standalone", -1, 1),
            W("mid", "standalone", 0, 2),
            W("high", "standalone", 1, 3),
        ],
        W("in", "standalone", 1, 2),
        {"mid"},
    ),
    case(
        PREEMPTION,
        "reclaim quota from borrower",
        [C1, C2],
        [W("c1-low", "c1", -1, 3), W("c2-mid", "c2", 0, 3), W("c2-high", "c2", 1, 6)],
        W("in", "c1", 1, 3),
        {"c2-mid"},
    ),
    case(
        PREEMPTION,
        "reclaim quota if workload requests 0 resources for a resource at nominal quota",
        [C1, C2],
        [W("c1-low", "c1", -1, 3), W("c2-mid", "c2", 0, 3), W("c2-high", "c2", 1, 6)],
        W("in", "c1", 1, 3),
        {"c2-mid"},
    ),
    case(
        PREEMPTION,
        "no workloads borrowing",
        [C1, C2],
        [W("c1-high", "c1", 1, 4), W("c2-low-1", "c2", -1, 4)],
        W("in", "c1", 1, 4),
        set(),
    ),
    case(
        PREEMPTION,
        "not enough workloads borrowing",
        [C1, C2],
        [W("c1-high", "c1", 1, 4), W("c2-low-1", "c2", -1, 4), W("c2-low-2", "c2", -1, 4)],
        W("in", "c1", 1, 4),
        set(),
    ),
    case(
        PREEMPTION,
        "preempting locally and borrowing same resource in cohort",
        [C1, C2],
        [W("c1-med", "c1", 0, 4), W("c1-low", "c1", -1, 4), W("c2-low-1", "c2", -1, 4)],
        W("in", "c1", 1, 4),
        {"c1-low"},
    ),
    case(
        PREEMPTION,
        "preempting locally and borrowing same resource in cohort; no borrowing "
        "limit in the cohort",
        [D1, D2],
        [W("d1-med", "d1", 0, 4), W("d1-low", "d1", -1, 4), W("d2-low-1", "d2", -1, 4)],
        W("in", "d1", 1, 4),
        {"d1-low"},
    ),
    case(
        PREEMPTION,
        "preempting locally and not borrowing same resource in 1-queue cohort",
        [L1],
        [W("l1-med", "l1", 0, 4), W("l1-low", "l1", -1, 2)],
        W("in", "l1", 1, 4),
        {"l1-med"},
    ),
    case(
        PREEMPTION,
        "do not reclaim borrowed quota from same priority for "
        "withinCohort=ReclaimFromLowerPriority",
        [C1, C2],
        [W("c1", "c1", 0, 2), W("c2-1", "c2", 0, 4), W("c2-2", "c2", 0, 4)],
        W("in", "c1", 0, 4),
        set(),
    ),
    case(
        PREEMPTION,
        "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny",
        [C1, C2],
        [W("c1-1", "c1", 0, 4), W("c1-2", "c1", 1, 4), W("c2", "c2", 0, 2)],
        W("in", "c2", 0, 4),
        {"c1-1"},
    ),
    case(
        PREEMPTION,
        "preempt from all ClusterQueues in cohort",
        [C1, C2],
        [
            W("c1-low", "c1", -1, 3),
            W("c1-mid", "c1", 0, 2),
            W("c2-low", "c2", -1, 3),
            W("c2-mid", "c2", 0, 4),
        ],
        W("in", "c1", 0, 4),
        {"c1-low", "c2-low"},
    ),
    case(
        PREEMPTION,
        "can't preempt workloads in ClusterQueue for withinClusterQueue=Never",
        [C1, C2],
        [W("c2-low", "c2", -1, 3)],
        W("in", "c2", 1, 4),
        set(),
    ),
    case(
        PREEMPTION,
        "preempt newer workloads with the same priority",
        [STARVE],
        [
            W("wl1", STARVE.name, 2, 2, created=-NOW),
            W("wl2", STARVE.name, 1, 2, 0, reserved=1),
            W("wl3", STARVE.name, 1, 2, 0),
        ],
        W("in", STARVE.name, 1, 2, created=-15),
        {"wl2"},
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; allow preempting a lower-priority workload from "
        "another ClusterQueue while borrowing",
        WITH_SHARED,
        [
            W("a_best_effort_low", "a_best_effort", -1, 10),
            W("b_best_effort_low", "b_best_effort", -1, 1),
        ],
        W("in", "a_standard", 0, 10),
        {"a_best_effort_low"},
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; don't allow preempting a lower-priority workload "
        "with priority above MaxPriorityThreshold, if borrowing is required even after the "
        "preemption",
        WITH_SHARED,
        [W("b_standard", "b_standard", 1, 10)],
        W("in", "a_standard", 2, 10),
        set(),
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; allow preempting a lower-priority workload with "
        "priority above MaxPriorityThreshold, if borrowing is not required after the "
        "preemption",
        WITH_SHARED,
        [W("b_standard", "b_standard", 1, 13)],
        W("in", "a_standard", 2, 1),
        {"b_standard"},
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; don't allow for preemption of lower-priority "
        "workload from the same ClusterQueue",
        WITH_SHARED,
        [W("a_standard", "a_standard", 1, 13)],
        W("in", "a_standard", 2, 1),
        set(),
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; only preempt from CQ if no workloads below "
        "threshold and already above nominal",
        WITH_SHARED,
        [
            W("a_standard_1", "a_standard", 1, 10),
            W("a_standard_2", "a_standard", 1, 1),
            W("b_standard_1", "b_standard", 1, 1),
            W("b_standard_2", "b_standard", 2, 1),
        ],
        W("in", "b_standard", 3, 1),
        {"b_standard_1"},
    ),
    case(
        PREEMPTION,
        "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold",
        WITH_SHARED,
        [
            W("b_standard_high", "b_standard", 2, 10),
            W("b_standard_mid", "b_standard", 1, 1),
            W("a_best_effort_low", "a_best_effort", -1, 1),
            W("a_best_effort_lower", "a_best_effort", -2, 1),
        ],
        W("in", "b_standard", 2, 2),
        {"b_standard_mid", "a_best_effort_lower"},
        wanka=set(),
        why=ROOM_KEPT,
    ),
    case(
        PREEMPTION,
        "reclaim quota from lender",
        [LEND1, LEND2],
        [
            W("lend1-low", "lend1", -1, 3),
            W("lend2-mid", "lend2", 0, 3),
            W("lend2-high", "lend2", 1, 4),
        ],
        W("in", "lend1", 1, 3),
        {"lend2-mid"},
    ),
    case(
        PREEMPTION,
        "preempt from all ClusterQueues in cohort-lend",
        [LEND1, LEND2],
        [
            W("lend1-low", "lend1", -1, 3),
            W("lend1-mid", "lend1", 0, 2),
            W("lend2-low", "lend2", -1, 3),
            W("lend2-mid", "lend2", 0, 4),
        ],
        W("in", "lend1", 0, 4),
        {"lend1-low", "lend2-low"},
    ),
    case(
        PREEMPTION,
        "cannot preempt from other ClusterQueues if exceeds requestable quota "
        "including lending limit",
        [LEND1, LEND2],
        [W("lend2-low", "lend2", -1, 10)],
        W("in", "lend1", 0, 9),
        set(),
    ),
    case(
        PREEMPTION,
        "preemptions from cq when target queue is exhausted for the single requested resource",
        THREE,
        [
            W("a1", "a", -2, 1),
            W("a2", "a", -2, 1),
            W("a3", "a", -1, 1),
            W("b1", "b", 0, 1),
            W("b2", "b", 0, 1),
            W("b3", "b", 0, 1),
        ],
        W("in", "a", 0, 2),
        {"a1", "a2"},
    ),
    case(
        PREEMPTION,
        "preemptions from cq when target queue is exhausted for one requested "
        "resource, but not the other",
        THREE,
        [
            W("a1", "a", -2, 1),
            W("a2", "a", -2, 1),
            W("a3", "a", -1, 1),
            W("b1", "b", 0, 1),
            W("b2", "b", 0, 1),
            W("b3", "b", 0, 1),
        ],
        W("in", "a", 0, 2),
        {"a1", "a2"},
    ),
    case(
        PREEMPTION,
        "allow preemption from other cluster queues if target cq is not exhausted "
        "for the requested resource",
        THREE,
        [
            W("a1", "a", -1, 1),
            W("b1", "b", 0, 1),
            W("b2", "b", 0, 1),
            W("b3", "b", 0, 1),
            W("b4", "b", 0, 1),
            W("b5", "b", -1, 1),
        ],
        W("in", "a", 0, 2),
        {"a1", "b5"},
    ),
    case(
        PREEMPTION,
        "long range preemption",
        [CQ("cq-left", 10, "cohort-left", reclaim=ANY), CQ("cq-right", 0, "cohort-right")],
        [W("to-be-preempted", "cq-right", 0, 5)],
        W("in", "cq-left", 0, 8),
        {"to-be-preempted"},
        cohorts=(Co("cohort-left", "root"), Co("cohort-right", "root")),
    ),
]

# -- TestHierarchicalPreemptions: cohorts with quota of their own, fair sharing off ----------

LP_ANY = {"within": LOWER, "reclaim": ANY}
BWC0 = {"borrow": True, "threshold": 0}
R_C2 = (Co("r"), Co("c", "r", 2))

HIERARCHY_CASES = [
    case(
        HIERARCHY,
        "preempt with hierarchical advantage",
        [CQ("q", 0, "c", **LP_ANY), CQ("q_borrowing", 0, "r", **LP_ANY)],
        [W("admitted2", "q_borrowing", 0, 2)],
        W("in", "q", 0, 2),
        {"admitted2"},
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "avoid queues within nominal quota",
        [
            CQ("q_nominal", 2, "r", **LP_ANY),
            CQ("q", 0, "c", **LP_ANY),
            CQ("q_borrowing", 0, "r", **LP_ANY),
        ],
        [W("admitted1", "q_nominal", -10, 2), W("admitted2", "q_borrowing", 0, 2)],
        W("in", "q", 0, 2),
        {"admitted2"},
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "preempt multiple with hierarchical advantage",
        [CQ("q", 0, "c", **LP_ANY), CQ("q_borrowing", 0, "r", **LP_ANY)],
        [W("admitted1", "q_borrowing", 1, 1), W("admitted2", "q_borrowing", 2, 1)],
        W("in", "q", 0, 2),
        {"admitted1", "admitted2"},
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "preempt in cohort and own CQ",
        [CQ("q", 0, "c", **LP_ANY, **BWC0), CQ("q_same_cohort", 0, "c", **LP_ANY)],
        [
            W("admitted_not_preemptible", "q_same_cohort", 1, 1),
            W("admitted_preemptible", "q_same_cohort", 0, 2),
            W("admitted_own_queue", "q", -1, 1),
        ],
        W("in", "q", 1, 2),
        {"admitted_preemptible", "admitted_own_queue"},
        cohorts=(Co("r"), Co("c", "r", 3)),
        wanka=set(),
        why=OVER_QUOTA,
    ),
    case(
        HIERARCHY,
        "prefer to preempt hierarchical candidate",
        [CQ("q", 0, "c", **LP_ANY), CQ("q_borrowing", 0, "r", **LP_ANY)],
        [W("admitted_borrowing", "q_borrowing", 1, 1), W("admitted_same_queue", "q", -2, 1)],
        W("in", "q", 0, 1),
        {"admitted_borrowing"},
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "forced to preempt priority candidate",
        [
            CQ("q", 0, "c", **LP_ANY, **BWC0),
            CQ("q_nominal", 2, "r", **LP_ANY),
            CQ("q_same_cohort", 0, "c", **LP_ANY),
        ],
        [
            W("admitted_nominal", "q_nominal", -10, 2),
            W("admitted_same_cohort", "q_same_cohort", -1, 2),
        ],
        W("in", "q", 0, 2),
        {"admitted_same_cohort"},
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "incoming workload fits in CQ nominal quota",
        [
            CQ("q", 4, "c", **LP_ANY),
            CQ("q_borrowing", 0, "r", **LP_ANY),
            CQ("q_same_cohort", 0, "c", **LP_ANY),
        ],
        [
            W("admitted_borrowing", "q_borrowing", 10, 3),
            W("admitted_same_cohort", "q_same_cohort", 10, 3),
        ],
        W("in", "q", 0, 4),
        {"admitted_borrowing", "admitted_same_cohort"},
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "preempt hierarchical and priority candidates",
        [
            CQ("q", 0, "c", within=LOWER, reclaim=LOWER, **BWC0),
            CQ("q_borrowing", 0, "r", **LP_ANY),
            CQ("q_same_cohort", 0, "c", **LP_ANY),
        ],
        [
            W("admitted_borrowing", "q_borrowing", -1, 2),
            W("admitted_same_cohort_preemptible", "q_same_cohort", -1, 1),
            W("admitted_borrowing_not_preemptible", "q_borrowing", 1, 2),
        ],
        W("in", "q", 0, 3),
        {"admitted_borrowing", "admitted_same_cohort_preemptible"},
        cohorts=(Co("r", None, 1), Co("c", "r", 4)),
        wanka=set(),
        why=ROOM_KEPT,
    ),
    case(
        HIERARCHY,
        "preempt hierarchical candidates and inside CQ",
        [
            CQ("q", 0, "c", within=LOWER, reclaim=LOWER, **BWC0),
            CQ("q_borrowing", 0, "r", **LP_ANY),
            CQ("q_same_cohort", 0, "c", **LP_ANY),
        ],
        [
            W("admitted_borrowing", "q_borrowing", -1, 2),
            W("admitted_same_queue_preemptible", "q", -1, 1),
            W("admitted_borrowing_not_preemptible", "q_borrowing", 1, 2),
        ],
        W("in", "q", 0, 3),
        {"admitted_borrowing", "admitted_same_queue_preemptible"},
        cohorts=(Co("r", None, 1), Co("c", "r", 4)),
    ),
    case(
        HIERARCHY,
        "reclaim nominal quota from lowest priority workload, excluding non-borrowing",
        [
            CQ("q", 0, "c", **LP_ANY),
            CQ("q_borrowing", 0, "r", **LP_ANY),
            CQ("q_nominal", 2, "r", **LP_ANY),
        ],
        [
            W("admitted_borrowing_prio_8", "q_borrowing", 8, 1),
            W("admitted_borrowing_prio_9", "q_borrowing", 9, 1),
            W("admitted_borrowing_prio_10", "q_borrowing", 9, 1),
            W("admitted_nominal", "q_nominal", -2, 2),
        ],
        W("in", "q", 0, 1),
        {"admitted_borrowing_prio_8"},
        cohorts=(Co("r"), Co("c", "r", 3)),
    ),
    case(
        HIERARCHY,
        "infeasible preemption all available workloads in pruned subtrees",
        [
            CQ("q_other", 0, "c_other", **LP_ANY),
            CQ("q", 0, "c", **LP_ANY),
            CQ("q_same_cohort", 0, "c", **LP_ANY),
        ],
        [
            W("admitted_other_1", "q_other", -10, 1),
            W("admitted_other_2", "q_other", -10, 1),
            W("admitted_same_cohort", "q_same_cohort", 0, 2),
        ],
        W("in", "q", 0, 2),
        set(),
        cohorts=(Co("r"), Co("c", "r", 2), Co("c_other", "r", 2)),
    ),
    case(
        HIERARCHY,
        "prefer to preempt evicted workloads",
        [
            CQ("q", 0, "c", **LP_ANY, **BWC0),
            CQ("q_borrowing", 0, "r", **LP_ANY),
            CQ("q_same_cohort", 0, "c", **LP_ANY),
        ],
        [
            W("admitted_borrowing", "q_borrowing", -10, 1),
            W("evicted_same_cohort", "q_same_cohort", -1, 1, evicted=True),
        ],
        W("in", "q", 0, 1),
        set(),
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "respect lending limits",
        [CQ("q", 3, "c", lending_limit=2, **LP_ANY), CQ("q_borrowing", 0, "r", **LP_ANY)],
        [W("admitted_borrowing", "q_borrowing", 0, 4)],
        W("in", "q", -2, 5),
        {"admitted_borrowing"},
        cohorts=R_C2,
    ),
    case(
        HIERARCHY,
        "reclaim in complex hierarchy",
        [
            CQ("q1", 0, "c12", **LP_ANY),
            CQ("q2", 0, "c23", **LP_ANY),
            CQ("q3", 0, "c22", **LP_ANY),
            CQ("q4", 0, "c32", **LP_ANY),
            CQ("q5", 0, "c31", **LP_ANY),
        ],
        [
            W("admitted_borrowing_1", "q1", -6, 4),
            W("admitted_borrowing_2", "q1", -5, 4),
            W("admitted_borrowing_3", "q2", -9, 4),
            W("admitted_borrowing_4", "q2", -10, 4),
            W("admitted_borrowing_5", "q3", -4, 4),
            W("admitted_borrowing_6", "q3", -3, 3),
            W("admitted_borrowing_7", "q4", 4, 2),
            W("admitted_borrowing_8", "q4", 2, 3),
        ],
        W("in", "q5", -2, 7),
        {"admitted_borrowing_1", "admitted_borrowing_4"},
        cohorts=(
            Co("r"),
            Co("c11", "r", 4),
            Co("c12", "r", 4),
            Co("c21", "c11", 4),
            Co("c22", "c11", 4),
            Co("c23", "c11", 4),
            Co("c31", "c21", 4),
            Co("c32", "c21", 4),
        ),
    ),
]


# -- TestFairPreemptions: fair sharing on (Kueue's default strategies; the first is Wanka's) --

FAIR_BASE = {"within": LOWER, "reclaim": ANY, "borrow": True, "threshold": -3}
FA, FB, FC = (CQ(name, 3, "all", **FAIR_BASE) for name in "abc")
FAIR_CQS = (FA, FB, FC, CQ("preemptible", 0, "all"))
LP_ANY_CQ = {"within": LOWER, "reclaim": ANY}


def units(cq: str, count: int, first: int = 1, priority: int = 0, name: str = "") -> list[W]:
    """Kueue's unitWl: `count` one-cpu workloads named a1, a2, ... (after their queue)."""
    return [W(f"{name or cq}{i}", cq, priority, 1) for i in range(first, first + count)]


def fair(name, queues, running, incoming, kueue, **rest) -> pytest.param:
    rest.setdefault("fair", FairSharing.BOTH)  # Kueue's default
    return case(FAIR, name, queues, running, incoming, kueue, by_share=True, **rest)


FAIR_CASES = [
    fair(
        "reclaim nominal from user using the most",
        FAIR_CQS,
        [*units("a", 3), *units("b", 5), *units("c", 1)],
        W("in", "c", 0, 1),
        {"b1"},
    ),
    fair(
        "can reclaim from queue using less, if taking the latest workload from user using the "
        "most isn't enough",
        FAIR_CQS,
        [W("a1", "a", 0, 3), W("a2", "a", 0, 1), W("b1", "b", 0, 2), W("b2", "b", 0, 3)],
        W("in", "c", 0, 3),
        {"a1"},
    ),
    fair(
        "reclaim borrowable quota from user using the most",
        FAIR_CQS,
        [*units("a", 3), *units("b", 5), *units("c", 1)],
        W("in", "a", 0, 1),
        {"b1"},
    ),
    fair(
        "preempt one from each CQ borrowing",
        FAIR_CQS,
        [
            W("a1", "a", 0, 0.5),
            W("a2", "a", 0, 0.5),
            W("a3", "a", 0, 3),
            W("b1", "b", 0, 0.5),
            W("b2", "b", 0, 0.5),
            W("b3", "b", 0, 3),
        ],
        W("in", "c", 0, 2),
        {"a1", "b1"},
        scale=2,
        wanka={"b1", "b2"},
        why=FEWEST,
    ),
    fair(
        "can't preempt when everyone under nominal",
        FAIR_CQS,
        [*units("a", 3), *units("b", 3), *units("c", 3)],
        W("in", "c", 0, 1),
        set(),
    ),
    fair(
        "can't preempt when it would switch the imbalance",
        FAIR_CQS,
        [*units("a", 3), *units("b", 5)],
        W("in", "a", 0, 2),
        set(),
    ),
    fair(
        "can preempt lower priority workloads from same CQ",
        FAIR_CQS,
        [W("a1_low", "a", -1, 1), W("a2_low", "a", -1, 1), *units("a", 2, first=3), *units("b", 5)],
        W("in", "a", 0, 2),
        {"a1_low", "a2_low"},
    ),
    fair(
        "can preempt a combination of same CQ and highest user",
        FAIR_CQS,
        [W("a_low", "a", -1, 1), *units("a", 2, first=2), *units("b", 6)],
        W("in", "a", 0, 2),
        {"a_low", "b1"},
    ),
    fair(
        "preempt huge workload if there is no other option, as long as the target CQ gets a "
        "lower share",
        FAIR_CQS,
        [W("b1", "b", 0, 9)],
        W("in", "a", 0, 2),
        {"b1"},
    ),
    fair(
        "can't preempt huge workload if the incoming is also huge",
        FAIR_CQS,
        [W("a1", "a", 0, 2), W("b1", "b", 0, 7)],
        W("in", "a", 0, 5),
        set(),
    ),
    fair(
        "can't preempt 2 smaller workloads if the incoming is huge",
        FAIR_CQS,
        [W("b1", "b", 0, 2), W("b2", "b", 0, 2), W("b3", "b", 0, 3)],
        W("in", "a", 0, 6),
        set(),
    ),
    fair(
        "preempt from target and others even if over nominal",
        FAIR_CQS,
        [W("a1_low", "a", -1, 2), W("a2_low", "a", -1, 1), W("b1", "b", 0, 3), W("b2", "b", 0, 3)],
        W("in", "a", 0, 4),
        {"a1_low", "b1"},
        wanka=set(),
        why=SHARE_BEFORE,
    ),
    fair(
        "prefer to preempt workloads that don't make the target CQ have the biggest share",
        FAIR_CQS,
        [W("b1", "b", 0, 2), W("b2", "b", 0, 1), W("b3", "b", 0, 2), W("c1", "c", 0, 1)],
        W("in", "a", 0, 3.5),
        {"b2"},
        scale=2,
    ),
    fair(
        "preempt from different cluster queues if the end result has a smaller max share",
        FAIR_CQS,
        [W("b1", "b", 0, 2), W("b2", "b", 0, 2.5), W("c1", "c", 0, 2), W("c2", "c", 0, 2.5)],
        W("in", "a", 0, 3.5),
        {"b1", "c1"},
        scale=2,
    ),
    fair(
        "scenario above does not flap",
        FAIR_CQS,
        [W("a1", "a", 0, 3.5), W("b2", "b", 0, 2.5), W("c2", "c", 0, 2.5)],
        W("in", "b", 0, 2),
        set(),
        scale=2,
    ),
    fair(
        "cannot preempt if it would make the candidate CQ go under nominal after preempting one "
        "element",
        FAIR_CQS,
        [W("b1", "b", 0, 3), W("b2", "b", 0, 3), W("c1", "c", 0, 3)],
        W("in", "a", 0, 4),
        set(),
    ),
    fair(
        "workloads under priority threshold not capriciously preempted",
        FAIR_CQS,
        [*units("a", 3), *units("b", 3), *units("preemptible", 3, priority=-3)],
        W("in", "a", 0, 2),
        set(),
    ),
    fair(
        "preempt lower priority first, even if big",
        FAIR_CQS,
        [W("a1", "a", 0, 3), W("b_low", "b", 0, 5), W("b_high", "b", 1, 1)],
        W("in", "a", 0, 1),
        {"b_low"},
        fair=FairSharing.LESS_THAN_INITIAL_SHARE,
    ),
    fair(
        "preempt workload that doesn't transfer the imbalance, even if high priority",
        FAIR_CQS,
        [W("a1", "a", 0, 3), W("b_low", "b", 0, 5), W("b_high", "b", 1, 1)],
        W("in", "a", 0, 1),
        {"b_high"},
        fair=FairSharing.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    ),
    fair(
        "CQ with higher weight can preempt more",
        [
            CQ("a", 3, "all", weight=2, **LP_ANY_CQ),
            CQ("b", 3, "all", **LP_ANY_CQ),
            CQ("c", 3, "all", **LP_ANY_CQ),
        ],
        [*units("a", 3), *units("b", 6)],
        W("in", "a", 0, 2),
        {"b1", "b2"},
    ),
    fair(
        "can preempt anything borrowing from CQ with 0 weight",
        [
            CQ("a", 3, "all", **LP_ANY_CQ),
            CQ("b", 3, "all", weight=0, **LP_ANY_CQ),
            CQ("c", 3, "all", **LP_ANY_CQ),
        ],
        [*units("a", 3), *units("b", 6)],
        W("in", "a", 0, 3),
        {"b1", "b2", "b3"},
    ),
    fair(
        "can't preempt nominal from CQ with 0 weight",
        [CQ("a", 3, "all", **LP_ANY_CQ), CQ("b", 3, "all", weight=0, **LP_ANY_CQ)],
        [*units("a", 3), *units("b", 3)],
        W("in", "a", 0, 1),
        set(),
    ),
    fair(
        "can preempt within cluster queue when no cohort",
        [CQ("a", 1, within=LOWER)],
        units("a", 1),
        W("in", "a", 1000, 1),
        {"a1"},
    ),
    fair(
        "borrowing cq in non-borrowing cohort is protected",
        [CQ("a", 5, "ROOT", weight=10, **LP_ANY_CQ), CQ("b", 0, "RIGHT", weight=0.1)],
        [*units("a", 3, priority=-1), *units("b", 1, priority=-1)],
        W("in", "a", 0, 5),
        {"a1", "a2", "a3"},
        cohorts=(Co("ROOT"), Co("RIGHT", "ROOT", 1)),
    ),
    fair(
        "forced to preempt within clusterqueue because borrowing workload too important",
        [CQ("a", 5, "ROOT", weight=10, within=LOWER, reclaim=LOWER), CQ("b", 0, "RIGHT")],
        [*units("a", 3, priority=-1), W("b1", "b", 100, 4)],
        W("in", "a", 0, 4),
        {"a1", "a2", "a3"},
        cohorts=(Co("ROOT"), Co("RIGHT", "ROOT", 3)),
    ),
    fair(
        "cq with zero weight can reclaim nominal quota",
        [CQ("a", 1, "ROOT", weight=0, reclaim=ANY), CQ("b", 0, "ROOT")],
        units("b", 1),
        W("in", "a", 0, 1),
        {"b1"},
    ),
    fair(
        "cohort with zero weight can reclaim nominal quota",
        [CQ("a", 0, "A", weight=0, reclaim=ANY), CQ("b", 0, "ROOT")],
        units("b", 1),
        W("in", "a", 0, 1),
        {"b1"},
        cohorts=(Co("ROOT"), Co("A", "ROOT", 1)),
    ),
    fair(
        "deep preemption",
        [CQ("a", 0, "AAA", reclaim=ANY), CQ("b", 0, "BBB")],
        units("b", 1),
        W("in", "a", 0, 1),
        {"b1"},
        wanka=set(),
        why=QUEUE_SHARES,
        cohorts=(
            Co("ROOT"),
            Co("A", "ROOT"),
            Co("AA", "A"),
            Co("AAA", "AA"),
            Co("B", "ROOT"),
            Co("BB", "B"),
            Co("BBB", "BB"),
            Co("C", "ROOT"),
            Co("CC", "C"),
            Co("CCC", "CC"),
            Co("CCCC", "CCC", 1),
        ),
    ),
]

# -- TestSchedule: one whole cycle, fair sharing off; whom Kueue admits is compared too ------

ALPHA = CQ("eng-alpha", 50, "eng", borrowing_limit=50)
BETA = CQ("eng-beta", 50, "eng", borrowing_limit=10, within=LOWER, reclaim=ANY)
LENDERS = (CQ("lend-a", 3, "lend", lending_limit=2), CQ("lend-b", 2, "lend", lending_limit=2))
OTHER = (CQ("other-alpha", 2, "other", within=LOWER, reclaim=ANY), CQ("other-beta", 2, "other"))


def lender(lending_limit: int) -> tuple[CQ, ...]:
    return (
        CQ("cq-lender", 10, "child", lending_limit=lending_limit),
        CQ("cq-borrower", 5, "child", borrowing_limit=10),
    )


def reclaimer(reclaim: str) -> tuple[CQ, ...]:
    return (CQ("ClusterQueueA", 2, "root", reclaim=reclaim), CQ("ClusterQueueB", 0, "root"))


def schedule(name, queues, running, incoming, kueue, admitted, **rest) -> pytest.param:
    return case(SCHEDULE, name, queues, running, tuple(incoming), kueue, admitted=admitted, **rest)


SCHEDULE_CASES = [
    schedule(
        "admit in same cohort with no borrowing",
        [ALPHA, BETA],
        [],
        [W("alpha", "eng-alpha", 0, 40), W("beta", "eng-beta", 0, 40)],
        set(),
        {"alpha", "beta"},
    ),
    schedule(
        "cannot borrow if cohort was assigned and would result in overadmission",
        [ALPHA, BETA],
        [],
        [W("alpha", "eng-alpha", 0, 45), W("beta", "eng-beta", 0, 56)],
        set(),
        {"alpha"},
    ),
    schedule(
        "can borrow if cohort was assigned and will not result in overadmission",
        [ALPHA, BETA],
        [],
        [W("alpha", "eng-alpha", 0, 45), W("beta", "eng-beta", 0, 55)],
        set(),
        {"alpha", "beta"},
    ),
    schedule(
        "workload exceeds lending limit when borrow in cohort",
        LENDERS,
        [W("a", "lend-b", 0, 2)],
        [W("b", "lend-b", 0, 3)],
        set(),
        set(),
    ),
    schedule(
        "hierarchical cohort respects lending limit when borrowing",
        lender(3),
        [W("wl-existing", "cq-borrower", 0, 5)],
        [W("wl-pending", "cq-borrower", 0, 4)],
        set(),
        set(),
        cohorts=(Co("root"), Co("child", "root")),
    ),
    schedule(
        "hierarchical cohort allows borrowing up to lending limit",
        lender(5),
        [W("wl-existing", "cq-borrower", 0, 5)],
        [W("wl-borrowing", "cq-borrower", 0, 5)],
        set(),
        {"wl-borrowing"},
        cohorts=(Co("root"), Co("child", "root")),
    ),
    schedule(
        "preempt workloads in ClusterQueue and cohort",
        [ALPHA, BETA],
        [
            W("low-1", "eng-beta", -1, 30),
            W("low-2", "eng-beta", -2, 10),
            W("borrower", "eng-alpha", 0, 60),
        ],
        [W("preemptor", "eng-beta", 0, 20)],
        {"borrower", "low-2"},
        set(),
        wanka={"low-1"},
        why=CHEAPEST,
    ),
    schedule(
        "multiple CQs need preemption",
        [
            CQ("other-alpha", 50, "other", borrowing_limit=50),
            CQ("other-beta", 50, "other", borrowing_limit=10, within=LOWER, reclaim=ANY),
        ],
        [W("use-all", "other-alpha", 0, 100)],
        [W("preemptor", "other-beta", -1, 1), W("pending", "other-alpha", 1, 1)],
        {"use-all"},
        set(),
    ),
    schedule(
        "minimal preemptions when target queue is exhausted",
        [
            CQ("other-alpha", 2, "other", within=LOWER, reclaim=ANY),
            CQ("other-beta", 2, "other"),
            CQ("other-gamma", 2, "other"),
        ],
        [
            W("a1", "other-alpha", -2, 1),
            W("a2", "other-alpha", -2, 1),
            W("a3", "other-alpha", -1, 1),
            *units("other-beta", 3, name="b"),
        ],
        [W("incoming", "other-alpha", 0, 2)],
        {"a1", "a2"},
        set(),
    ),
    schedule(
        "A workload is only eligible to do preemptions if it fits fully within nominal quota",
        OTHER,
        [W("a1", "other-alpha", -1, 1), W("b1", "other-beta", -1, 1)],
        [W("incoming", "other-alpha", 1, 3)],
        set(),
        set(),
        wanka={"a1"},
        why=BORROW_OWN,
    ),
    schedule(
        "multiple preemptions without borrowing",
        [CQ("other-alpha", 2, "other", within=LOWER), CQ("other-beta", 2, "other", within=LOWER)],
        [W("a1", "other-alpha", 0, 2), W("b1", "other-beta", 0, 2)],
        [W("preemptor-a", "other-alpha", 100, 2), W("preemptor-b", "other-beta", 100, 2)],
        {"a1", "b1"},
        set(),
    ),
    schedule(
        "multiple preemptions preemption possible after earlier workload fits",
        [CQ("other-alpha", 1, "other", within=LOWER), CQ("other-beta", 2, "other", within=LOWER)],
        [W("b1", "other-beta", 0, 2)],
        [W("fit", "other-alpha", 100, 1), W("preemptor", "other-beta", 99, 2)],
        {"b1"},
        {"fit"},
    ),
    schedule(
        "multiple preemptions skip preemption when shared limited resource",
        [
            CQ("other-alpha", 2, "other", within=LOWER, borrow=True),
            CQ("other-beta", 2, "other", within=LOWER, borrow=True),
            CQ("resource-bank", 1, "other"),
        ],
        [W("a1", "other-alpha", 0, 2), W("b1", "other-beta", 0, 2)],
        [W("preemptor", "other-alpha", 100, 3), W("pretending-preemptor", "other-beta", 99, 3)],
        {"a1"},
        set(),
    ),
    schedule(
        "preemption while borrowing, workload waiting for preemption should not block a "
        "borrowing workload in another CQ",
        [
            CQ("cq_shared", 4, "pwb", borrowing_limit=0),
            CQ("cq_a", 0, "pwb", borrowing_limit=3, reclaim=LOWER, borrow=True),
            CQ("cq_b", 0, "pwb", reclaim=LOWER, borrow=True),
        ],
        [W("admitted_a", "cq_a", 0, 2)],
        [W("a", "cq_a", 0, 3, created=1), W("b", "cq_b", 0, 1, created=2)],
        set(),
        {"b"},
    ),
    schedule(
        "workload requiring reclaimation prioritized over wl in another full cq",
        [CQ("CQ1", 10, "other"), CQ("CQ2", 10, "other", reclaim=ANY), CQ("CQ3", 0, "other")],
        [
            W("Admitted-Workload-1", "CQ1", 0, 5),
            W("Admitted-Workload-2", "CQ3", 0, 5),
            W("Admitted-Workload-3", "CQ3", 1, 5),
        ],
        [W("WL1", "CQ1", 0, 10, created=0), W("WL2", "CQ2", 0, 10, created=1)],
        {"Admitted-Workload-2"},
        set(),
    ),
    schedule(
        "capacity not blocked when lending clusterqueue can reclaim (ReclaimWithinCohort=Any)",
        reclaimer(ANY),
        [W("a1-admitted", "ClusterQueueA", 0, 1)],
        [
            W("a2-pending", "ClusterQueueA", 0, 2, created=-NOW),
            W("b1-pending", "ClusterQueueB", 0, 1, created=0),
        ],
        set(),
        {"b1-pending"},
    ),
    *(
        schedule(
            "capacity blocked when lending clusterqueue not guaranteed to reclaim "
            f"(ReclaimWithinCohort={policy})",
            reclaimer(policy),
            [W("a1-admitted", "ClusterQueueA", 0, 1)],
            [
                W("a2-pending", "ClusterQueueA", 0, 2, created=-NOW),
                W("b1-pending", "ClusterQueueB", 0, 1, created=0),
            ],
            set(),
            set(),
            wanka_admits={"b1-pending"},
            why=IDLE_LENT,
        )
        for policy in (LOWER, NEVER)
    ),
    schedule(
        "in a hierarchical cohort, workload borrowing less is scheduled first",
        [CQ("guaranteed", 0, "GUARANTEED"), CQ("best-effort", 0, "ROOT")],
        [],
        [W("guaranteed", "guaranteed", 0, 4), W("best-effort", "best-effort", 3, 4)],
        set(),
        {"guaranteed"},
        cohorts=(Co("ROOT"), Co("GUARANTEED", "ROOT", 4)),
    ),
    schedule(
        "single clusterQueue full",
        [CQ("sales", 50, borrowing_limit=0)],
        [W("assigned", "sales", 0, 40)],
        [W("new", "sales", 0, 11)],
        set(),
        set(),
    ),
    schedule(
        "preempt when workload requests zero of a resource not defined in ClusterQueue",
        [CQ("preempt-zero-gpu-cq", 4, within=LOWER)],
        [W("low-priority", "preempt-zero-gpu-cq", -1, 4)],
        [W("preemptor", "preempt-zero-gpu-cq", 0, 2)],
        {"low-priority"},
        set(),
    ),
]

CASES = PREEMPTION_CASES + HIERARCHY_CASES + FAIR_CASES + SCHEDULE_CASES


# -- the translation --------------------------------------------------------------------------


def _policy(cq: CQ, c: Case) -> PreemptionPolicy:
    return PreemptionPolicy(
        reclaim_within_cohort=ReclaimWithinCohort(cq.reclaim),
        within_cluster_queue=WithinClusterQueue(cq.within),
        borrow_within_cohort=cq.borrow,
        max_priority_threshold=cq.threshold,
        fair_sharing=c.fair,
        preempt_by_fair_share=c.by_share,
    )


def _gpus(amount: float | None, scale: int) -> int | None:
    if amount is None:
        return None
    gpus = amount * scale
    assert gpus == int(gpus), f"{amount} cpu is not a whole number of GPUs at scale {scale}"
    return int(gpus)


def run(c: Case) -> tuple[set[str], set[str]]:
    """(whom the engine preempts, whom it admits) in the case's cycle."""
    queues = {
        cq.name: make_queue(
            cq.name,
            cohort=cq.cohort,
            borrowing_limit=_gpus(cq.borrowing_limit, c.scale),
            lending_limit=_gpus(cq.lending_limit, c.scale),
            weight=cq.weight,
            preemption=_policy(cq, c),
            h800=_gpus(cq.nominal, c.scale),
        )
        for cq in c.queues
    }
    cohorts = [make_cohort(co.name, co.parent, h800=_gpus(co.nominal, c.scale)) for co in c.cohorts]
    quota = sum(_gpus(cq.nominal, c.scale) for cq in c.queues) + sum(
        _gpus(co.nominal, c.scale) for co in c.cohorts
    )
    used = sum(_gpus(w.cpu, c.scale) for w in c.running)
    # One-GPU nodes, as many as the quota (or what runs, if more): no placement ever binds.
    nodes = [make_node(f"n{i}", node_id=i, gpus=1) for i in range(1, max(quota, used, 1) + 1)]
    names, workloads, taken = {}, [], 0
    everyone = [*c.running, *c.incoming]
    for number, w in enumerate(everyone, start=1):
        gpus = _gpus(w.cpu, c.scale)
        created = NOW - 1000 + number if w.created is None else NOW + w.created
        extra = {}
        if w in c.running:
            extra = {
                "placements": tuple(Placement(n.id, (0,)) for n in nodes[taken : taken + gpus]),
                "started_at": NOW + w.reserved,
                "last_checkpoint_at": NOW + w.reserved,
                "preempting": w.evicted,
            }
            taken += gpus
        workloads.append(
            make_workload(
                number, queues[w.cq], gpus, submitted_at=created, priority=w.priority, **extra
            )
        )
        names[number] = w.name
    result = plan(make_snapshot(nodes, queues.values(), workloads, cohorts), NOW)
    preempted = {names[p.workload_id] for p in result.preemptions}
    admitted = {names[a.workload_id] for a in result.admissions}
    return preempted, admitted


@pytest.mark.parametrize("c", CASES)
def test_kueue_case(c: Case) -> None:
    preempted, admitted = run(c)
    if c.wanka is None and c.wanka_admits is None:
        assert preempted == c.kueue
        if c.admitted is not None:
            assert admitted == c.admitted
        return
    assert c.why, "a difference from Kueue needs its reason"
    if c.wanka is not None:
        assert preempted == c.wanka != c.kueue
    if c.wanka_admits is not None:
        assert admitted == c.wanka_admits != c.admitted


def test_enough_cases_and_every_difference_is_in_the_adr() -> None:
    cases = [p.values[0] for p in CASES]
    assert len(cases) >= 40
    assert len({(c.source, c.name) for c in cases}) == len(cases)
    text = ADR.read_text()
    for c in cases:
        if c.wanka is not None:
            assert c.name in text, f"the ADR does not list {c.name!r}"
            assert re.search(rf"^#+ .*{re.escape(c.why)}", text, re.M), c.why
