"""Gangs: whole nodes for big jobs, best-fit bin packing for small ones, never a GPU twice."""

from __future__ import annotations

import pytest

from scheduler.engine import Node, Placement, Snapshot, TopologyLevel, Workload, plan
from scheduler.engine.capacity import pools_of
from scheduler.engine.explain import PLANNER_ERROR
from scheduler.engine.testing import (
    cordon,
    make_cluster,
    make_queue,
    make_running,
    make_snapshot,
    make_workload,
    on,
    outcome,
)

nlp = make_queue("nlp", h800=1000, h20=1000)
small = make_queue("small", h800=16)
LEAF = make_cluster(nodes=4)  # dc1-p1-l1-n1 .. n4
N1, N2, N3, N4 = LEAF


def job(workload_id: int, gpus: int, queue=nlp, **kwargs: object) -> Workload:
    return make_workload(workload_id, queue, gpus, **kwargs)


def held(workload_id: int, node: Node, *indices: int) -> Workload:
    return make_running(workload_id, nlp, on(node, *indices))


CASES = [
    pytest.param(LEAF, [job(1, 8)], {1: "dc1-p1-l1-n1"}, id="an 8-GPU job takes one whole node"),
    pytest.param(
        LEAF,
        [job(1, 16)],
        {1: "dc1-p1-l1-n1 dc1-p1-l1-n2"},
        id="a 16-GPU job takes two whole nodes",
    ),
    pytest.param(
        LEAF,
        [job(1, 12)],
        {1: "needs 12 GPUs; jobs of 8 GPUs or more must use whole nodes of 8 GPUs"},
        id="a 12-GPU job waits: jobs of a node or more must be whole nodes",
    ),
    pytest.param(
        LEAF,
        [held(90, N1, 0), job(1, 32)],
        {
            1: "needs 4 whole H800 nodes in one data center; the best data center has 3 free; "
            "reserved leaf dc1/p1/l1 for it: 3 of the 4 nodes it needs free now, the rest busy "
            "with work that has no time limit"
        },
        id="a node with one busy GPU is not a whole node",
    ),
    pytest.param(
        cordon(LEAF, "dc1-p1-l1-n1"),
        [job(1, 8)],
        {1: "dc1-p1-l1-n2"},
        id="a cordoned node is skipped",
    ),
    pytest.param(
        LEAF,
        [held(90, N1, 0, 1), held(91, N2, 0, 1, 2, 3, 4), job(1, 2)],
        {1: "dc1-p1-l1-n2[5,6]"},
        id="a small job goes to the node with the fewest free GPUs that fit",
    ),
    pytest.param(
        LEAF,
        [held(90, N3, 0, 1, 2, 3, 4, 5), held(91, N2, 0, 1, 2, 3, 4, 5), job(1, 2)],
        {1: "dc1-p1-l1-n2[6,7]"},
        id="equally full nodes: the lower name wins",
    ),
    pytest.param(
        LEAF,
        [held(90, N1, 1, 3), job(1, 3)],
        {1: "dc1-p1-l1-n1[0,2,4]"},
        id="a small job takes the lowest free indices",
    ),
    pytest.param(
        LEAF,
        [held(90, N1, 0, 1, 2, 3, 4, 5), job(1, 3)],
        {1: "dc1-p1-l1-n2[0,1,2]"},
        id="a small job breaks a whole node only when no partly used node fits",
    ),
    pytest.param(
        LEAF,
        [job(1, 4), job(2, 4)],
        {1: "dc1-p1-l1-n1[0,1,2,3]", 2: "dc1-p1-l1-n1[4,5,6,7]"},
        id="two small jobs in one plan share a node, not a GPU",
    ),
    pytest.param(
        cordon(LEAF, "dc1-p1-l1-n2", "dc1-p1-l1-n3", "dc1-p1-l1-n4"),
        [held(90, N1, 0, 1, 2, 3, 4, 5), job(1, 3)],
        {1: "no schedulable H800 node has 3 free GPUs (the most on one node is 2; 2 free in all)"},
        id="a small job with no node to fit says how much is free",
    ),
    pytest.param(
        LEAF,
        [job(1, 8, gpu_model="H20")],
        {1: "the cluster has no H20 nodes"},
        id="a GPU model the cluster lacks",
    ),
    pytest.param(
        LEAF,
        [job(1, 0)],
        {1: "asks for 0 GPUs; a workload needs at least one"},
        id="a workload must ask for at least one GPU",
    ),
    pytest.param(
        cordon(LEAF, *(node.name for node in LEAF)),
        [job(1, 12)],
        {1: "needs 12 GPUs; jobs of 8 GPUs or more must use whole nodes of 8 GPUs"},
        id="cordoned nodes still tell the node size",
    ),
    pytest.param(
        (*LEAF, *make_cluster("H20", nodes=2, gpus=4, first_id=100, prefix="h20-")),
        [job(1, 8, gpu_model="H20"), job(2, 8)],
        {1: "h20-dc1-p1-l1-n1 h20-dc1-p1-l1-n2", 2: "dc1-p1-l1-n1"},
        id="node size is per GPU model",
    ),
]


@pytest.mark.parametrize(("nodes", "workloads", "expected"), CASES)
def test_placement(
    nodes: tuple[Node, ...], workloads: list[Workload], expected: dict[int, str]
) -> None:
    snapshot = make_snapshot(nodes, [nlp], workloads)
    assert outcome(plan(snapshot, now=0.0), snapshot) == expected


def test_gpus_of_running_workloads_are_never_given_again_even_if_listed_free() -> None:
    # A racy snapshot: n1 still lists GPUs 0-5 as free although workload 90 holds them.
    snapshot = Snapshot(LEAF[:1], (nlp,), (held(90, N1, 0, 1, 2, 3, 4, 5), job(1, 2), job(2, 2)))
    assert outcome(plan(snapshot, now=0.0), snapshot) == {
        1: "dc1-p1-l1-n1[6,7]",
        2: "no schedulable H800 node has 2 free GPUs (the most on one node is 0; 0 free in all)",
    }


def gpus_admitted(snapshot: Snapshot) -> dict[int, int]:
    result = plan(snapshot, now=1000.0)
    return {a.workload_id: sum(len(p.gpu_indices) for p in a.placements) for a in result.admissions}


@pytest.mark.parametrize(
    ("workloads", "queues", "admitted"),
    [
        pytest.param(
            [held(9, N1), held(8, N2), job(1, 32, min_gpus=8)], [nlp], {1: 16},
            id="an elastic gang that cannot get 32 GPUs starts on the 16 free",
        ),
        pytest.param(
            [held(9, N1, 0, 1, 2), job(1, 8, min_gpus=2, topology=TopologyLevel.NODE),
             *(held(10 + i, n) for i, n in enumerate((N2, N3, N4)))],
            [nlp], {1: 5},
            id="a one-node elastic job takes the 5 GPUs left on a node",
        ),
        pytest.param(
            [job(1, 32, min_gpus=8, queue=small)], [small], {1: 16},
            id="one whose quota allows 16 of its 32 starts on 16",
        ),
        pytest.param(
            [held(9, N1), held(8, N2), held(7, N3), job(1, 32, min_gpus=16)], [nlp], {},
            id="below its minimum it waits",
        ),
    ],
)  # fmt: skip
def test_an_elastic_job_starts_at_the_largest_size_that_fits(workloads, queues, admitted):
    assert gpus_admitted(make_snapshot(LEAF, queues, workloads)) == admitted


# Nodes 2 and 3 busy with no time limit, 2 GPUs free on node 4, and node 1 busy with a job that
# ends by its limit in `ends_in_s` (None: no limit) at the cycle at 1000 s.
def ending(ends_in_s: float | None) -> list[Workload]:
    limit = {} if ends_in_s is None else {"time_limit_s": ends_in_s, "started_at": 1000.0}
    return [
        make_running(9, nlp, on(N1), **limit),
        held(10, N2),
        held(11, N3),
        held(12, N4, 0, 1, 2, 3, 4, 5),
    ]


# An hour on 8 GPUs; 2 do almost as much as 8 with CLOSE, a quarter as much without a curve.
AN_HOUR = {"min_gpus": 1, "time_limit_s": 3600.0}
CLOSE = ((2, 100.0), (8, 110.0))


@pytest.mark.parametrize(
    ("ends_in_s", "newcomer", "admitted"),
    [
        pytest.param(
            600.0, job(1, 8, **AN_HOUR), {},
            id="it waits for its 8 GPUs, free in 10 minutes: on the 2 free it would end later",
        ),
        pytest.param(
            72_000.0, job(1, 8, **AN_HOUR), {1: 2},
            id="its 8 GPUs free in 20 hours: it starts on the 2 free",
        ),
        pytest.param(
            None, job(1, 8, **AN_HOUR), {1: 2},
            id="no telling when its 8 GPUs free: it starts on the 2 free",
        ),
        pytest.param(
            600.0, job(1, 8, throughput=CLOSE, **AN_HOUR), {1: 2},
            id="one whose last GPUs add little ends sooner on the 2 free",
        ),
        pytest.param(
            600.0, job(1, 8, min_gpus=1), {1: 2},
            id="one without a time limit starts on the 2 free",
        ),
    ],
)  # fmt: skip
def test_an_elastic_job_starts_smaller_only_where_it_ends_sooner(ends_in_s, newcomer, admitted):
    snapshot = make_snapshot(LEAF, [nlp], [*ending(ends_in_s), newcomer])
    assert gpus_admitted(snapshot) == admitted


def test_waiting_for_its_size_says_why() -> None:
    result = plan(make_snapshot(LEAF, [nlp], [*ending(600.0), job(1, 8, **AN_HOUR)]), now=1000.0)
    (waiting,) = result.pending
    assert waiting.reason == (
        "needs 1 whole H800 node in one data center; the best data center has 0 free; it waits "
        "for its 8 GPUs, expected free in 10 min: it ends sooner so than on fewer now"
    )


LONG_AGO = 0.0  # started long before the cycle at 1000 s, so it may grow


def elastic(workload_id: int, *placements, most: int, queue=nlp, **extra) -> Workload:
    extra.setdefault("started_at", LONG_AGO)
    extra.setdefault("last_checkpoint_at", 900.0)  # saved 100 s before the cycle
    return make_running(workload_id, queue, *placements, min_gpus=2, max_gpus=most, **extra)


# A fifth GPU adds 40 % of one alone to a job that already does half per GPU, 60 % to one that
# does 90 %: the second gains more, though the first gains more of what it does per GPU.
SPENT = ((1, 100.0), (4, 200.0), (5, 240.0))
SCALING = ((1, 100.0), (4, 360.0), (5, 420.0))
nine = make_queue("nine", h800=9)  # one GPU more than the two jobs hold


def grown(snapshot: Snapshot) -> dict[int, int]:
    return {g.workload_id: g.gpus for g in plan(snapshot, now=1000.0).grows}


@pytest.mark.parametrize(
    ("workloads", "queues", "expected"),
    [
        pytest.param(
            [elastic(1, on(N1, 0, 1, 2, 3), most=8)], [nlp], {1: 8},
            id="a one-node job takes the free GPUs of its node up to its most",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=32)], [nlp], {1: 32},
            id="a gang takes whole free nodes of its domain",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=32, queue=small)], [small], {},
            id="not past its queue's quota",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=32), held(2, N3), job(3, 16)], [nlp], {},
            id="not while work waits for these GPUs",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=32, resized_at=900.0)], [nlp], {},
            id="not within five minutes of its last resize",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=32, saves=False)], [nlp], {},
            id="not a job that never saves: it would start over",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=32, last_checkpoint_at=None)], [nlp], {1: 32},
            id="one that has not saved yet: it is asked to save first",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=32, last_checkpoint_at=100.0)], [nlp], {1: 32},
            id="one whose last save is old: it is asked to save first",
        ),
        pytest.param(
            [elastic(1, on(N1), most=16, throughput=((8, 100.0), (16, 110.0))),
             elastic(2, on(N2), most=16), held(3, N3)],
            [nlp], {2: 16},
            id="the one free node goes where it adds the most throughput",
        ),
        pytest.param(
            [elastic(1, on(N1, 0, 1, 2, 3), most=8, queue=nine, throughput=SPENT),
             elastic(2, on(N2, 0, 1, 2, 3), most=8, queue=nine, throughput=SCALING)],
            [nine], {2: 5},
            id="the one GPU its quota allows goes where it does more, in what one GPU does alone",
        ),
    ],
)  # fmt: skip
def test_an_elastic_job_grows_into_free_gpus_nobody_waits_for(workloads, queues, expected):
    assert grown(make_snapshot(LEAF, queues, workloads)) == expected


def test_a_gang_on_a_cordoned_node_does_not_grow() -> None:
    nodes = cordon(LEAF, N2.name)
    workloads = [elastic(1, on(N1), on(N2), most=32)]
    assert grown(make_snapshot(nodes, [nlp], workloads)) == {}


def test_a_queue_moved_to_a_region_without_its_gpus_does_not_stop_the_cycle() -> None:
    elsewhere = make_queue("nlp", h800=1000, region="elsewhere")
    workloads = [elastic(1, on(N1, 0, 1, 2, 3), most=8, queue=elsewhere)]
    assert grown(make_snapshot(LEAF, [elsewhere], workloads)) == {}


def test_a_grow_says_why() -> None:
    workload = elastic(1, on(N1), on(N2), most=32, throughput=((16, 100.0), (32, 180.0)))
    (grow,) = plan(make_snapshot(LEAF, [nlp], [workload]), now=1000.0).grows
    assert [p.node_id for p in grow.added] == [N3.id, N4.id]
    assert grow.reason == (
        "grown from 16 to 32 GPUs, 80% more throughput: they were free and no work waits for "
        "H800 GPUs"
    )


def test_a_grow_whose_gain_is_within_the_planners_error_says_so() -> None:
    """Twice the GPUs for 4 % more throughput: the planner's curve is no surer than that."""
    workload = elastic(1, on(N1), on(N2), most=32, throughput=((16, 100.0), (32, 104.0)))
    (grow,) = plan(make_snapshot(LEAF, [nlp], [workload]), now=1000.0).grows
    assert grow.reason == (
        "grown from 16 to 32 GPUs, 4% more throughput, less than the planner's error of "
        f"{PLANNER_ERROR}: they were free and no work waits for H800 GPUs"
    )


def test_a_domains_whole_nodes_are_its_entirely_free_nodes_by_name() -> None:
    [pool] = pools_of(make_cluster(pods=2, leaves=2, nodes=3)).values()
    by_name = {node.name: node for node in pool.nodes()}
    pool.take(Placement(by_name["dc1-p1-l1-n2"].id, (0,)))
    for n in (1, 2, 3):  # one leaf without a free whole node
        pool.take(Placement(by_name[f"dc1-p1-l2-n{n}"].id, tuple(range(8))))

    assert [n.name for n in pool.whole_nodes(("dc1", "p1"))] == ["dc1-p1-l1-n1", "dc1-p1-l1-n3"]
    assert [n.name for n in pool.whole_nodes(("dc1", "p1", "l2"))] == []
    for domain in [(), ("dc1",), ("dc1", "p2"), ("dc1", "p1", "l1")]:
        scanned = [node for node in pool.domain_nodes(domain) if pool.is_whole(node)]
        assert pool.whole_nodes(domain) == scanned


# Throughput by GPU count of a job whose GPUs past two add little: 8 GPUs do 3.2 GPUs' work of
# what one does alone, 2 do 2.
FLAT = ((2, 100.0), (8, 160.0))
cv = make_queue("cv", h800=1000)
full = make_queue("full", h800=32)  # all four nodes


def shrunk_for(snapshot: Snapshot, now: float = 1000.0) -> dict[int, tuple[int, int]]:
    """Per shrunk workload: the GPUs it keeps and the workload it gives them to."""
    return {s.workload_id: (s.gpus, s.for_workload_id) for s in plan(snapshot, now).shrinks}


BUSY = [held(10, N2), held(11, N3), held(12, N4)]


@pytest.mark.parametrize(
    ("workloads", "queues", "expected"),
    [
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT), *BUSY, job(2, 8, min_gpus=1)],
            [nlp], {1: (2, 2)},
            id="a job whose last GPUs add little shrinks for a newcomer of its queue and priority",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8), *BUSY, job(2, 8, min_gpus=1)], [nlp], {},
            id="not where both scale alike: the gain is within the planner's error",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT), *BUSY, job(2, 8)], [nlp], {},
            id="never below its fewest: a rigid newcomer of 8 would need all its GPUs",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT), *BUSY, job(2, 6)], [nlp], {1: (2, 2)},
            id="a rigid newcomer of 6 gets the 6 above its fewest",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT, resized_at=900.0), *BUSY,
             job(2, 8, min_gpus=1)],
            [nlp], {},
            id="not within five minutes of its last resize",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT, started_at=800.0), *BUSY,
             job(2, 8, min_gpus=1)],
            [nlp], {},
            id="not within five minutes of its start",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT, saves=False), *BUSY,
             job(2, 8, min_gpus=1)],
            [nlp], {},
            id="not a job that never saves: it would start over",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT, priority=1), *BUSY,
             job(2, 8, min_gpus=1)],
            [nlp], {},
            id="not for a newcomer of a lower priority",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT), *BUSY, job(2, 8, queue=cv, min_gpus=1)],
            [nlp, cv], {},
            id="not for a newcomer of another queue",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT), *BUSY, job(2, 8, min_gpus=1),
             job(3, 8, min_gpus=1)],
            [nlp], {1: (2, 2)},
            id="once a cycle: the second newcomer waits",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=16, throughput=(*FLAT, (16, 180.0))),
             held(11, N3), held(12, N4), job(2, 8, min_gpus=1)],
            [nlp], {1: (8, 2)},
            id="a job of several nodes gives back its last node",
        ),
        pytest.param(
            [elastic(1, on(N1), on(N2), most=16, throughput=(*FLAT, (16, 180.0))),
             held(11, N3), held(12, N4), job(2, 16)],
            [nlp], {},
            id="not for a rigid gang of several nodes: one node given back is no room for it",
        ),
        pytest.param(
            [elastic(1, on(N1), most=8, throughput=FLAT, queue=full),
             *(make_running(10 + i, full, on(n)) for i, n in enumerate((N2, N3, N4))),
             job(2, 8, queue=full, min_gpus=1)],
            [full], {1: (2, 2)},
            id="in a queue at its quota: the GPUs given back are its own",
        ),
    ],
)  # fmt: skip
def test_elastic_work_shrinks_where_its_gpus_do_more_for_a_newcomer(workloads, queues, expected):
    assert shrunk_for(make_snapshot(LEAF, queues, workloads)) == expected


def test_the_newcomer_starts_on_the_gpus_given_back_and_the_job_is_not_shrunk_again() -> None:
    """The cycle after the shrink: the newcomer starts on the 6 GPUs given back (it waited
    for them), and the shrunk job, resized that cycle, is left alone however much a later
    newcomer would gain."""
    shrunk = elastic(1, on(N1, 0, 1), most=8, throughput=FLAT, resized_at=1000.0)
    workloads = [shrunk, *BUSY, job(2, 8, min_gpus=1), job(3, 8, min_gpus=1)]
    result = plan(make_snapshot(LEAF, [nlp], workloads), now=1010.0)
    assert {
        a.workload_id: sum(len(p.gpu_indices) for p in a.placements) for a in result.admissions
    } == {2: 6}
    assert result.shrinks == []


def test_a_shrink_for_a_newcomer_says_why() -> None:
    workloads = [elastic(1, on(N1), most=8, throughput=FLAT), *BUSY, job(2, 8, min_gpus=1)]
    result = plan(make_snapshot(LEAF, [nlp], workloads), now=1000.0)
    (shrink,) = result.shrinks
    assert shrink.reason == (
        "shrunk from 8 to 2 GPUs (its minimum is 2) for workload 2 of the same queue nlp and "
        "priority 0: its 6 GPUs there do 6 GPUs' work for it, the 6 given back did 1.2 here, "
        f"a gain beyond the planner's error of {PLANNER_ERROR}"
    )
    (waiting,) = result.pending
    assert waiting.reason == (
        "shrinking 1 elastic workload to make room in leaf dc1/p1/l1 (the GPUs do more for it "
        "than for the elastic work of its queue nlp and priority 0 that gives them back); it "
        "starts once they have stopped"
    )
