"""Nodes whose agent cannot keep tenants apart (not root) take one tenant's work at a time:
partly free, their GPUs go only to the tenant whose work they hold; empty, to anyone."""

from __future__ import annotations

from dataclasses import replace

from scheduler.engine import plan
from scheduler.engine.testing import make_cluster, make_queue, make_running, make_snapshot, on
from scheduler.engine.testing import make_workload as workload

NOW = 10_000.0
ACME, GLOBEX = 1, 2
acme, globex = make_queue("acme", h800=64), make_queue("globex", h800=64)


def nodes(single: bool, holder: int | None = ACME):
    """Two nodes; the first single-tenant (or not), holding `holder`'s 2-GPU job."""
    first, second = make_cluster(nodes=2)
    return (replace(first, single_tenant=single, tenant=holder if single else None), second)


def placed(snapshot) -> dict[int, tuple[int, ...]]:
    return {
        a.workload_id: tuple(p.node_id for p in a.placements)
        for a in plan(snapshot, NOW).admissions
    }


def test_another_tenants_small_job_goes_elsewhere_and_the_same_tenants_packs_in() -> None:
    shared, alone = nodes(single=False), nodes(single=True)
    running = make_running(9, acme, on(alone[0], 0, 1), tenant=ACME)
    theirs = workload(1, globex, 2, tenant=GLOBEX)
    mine = workload(2, acme, 2, tenant=ACME)
    # On shared nodes both small jobs fill the partly used node first, as ever.
    assert placed(make_snapshot(shared, [acme, globex], [running, theirs, mine])) == {
        1: (1,),
        2: (1,),
    }
    # Single-tenant: Globex's job takes the empty node, Acme's packs in beside its own.
    assert placed(make_snapshot(alone, [acme, globex], [running, theirs, mine])) == {
        1: (2,),
        2: (1,),
    }


def test_with_no_other_node_another_tenant_waits_and_says_why() -> None:
    [alone] = nodes(single=True)[:1]
    running = make_running(9, acme, on(alone, 0, 1), tenant=ACME)
    snapshot = make_snapshot(
        [alone], [acme, globex], [running, workload(1, globex, 2, tenant=GLOBEX)]
    )
    result = plan(snapshot, NOW)
    assert not result.admissions
    [waiting] = result.pending
    assert "no schedulable H800 node has 2 free GPUs" in waiting.reason


def test_a_single_tenant_node_taken_this_cycle_is_its_tenants_from_then_on() -> None:
    """Empty, it goes to the first small job; then, within the same cycle, to more of that
    tenant's work and to no one else's."""
    first, second = make_cluster(nodes=2)
    both = (replace(first, single_tenant=True), replace(second, single_tenant=True))
    jobs = [workload(1, acme, 2, tenant=ACME), workload(2, globex, 2, tenant=GLOBEX),
            workload(3, acme, 2, tenant=ACME), workload(4, globex, 6, tenant=GLOBEX),
            workload(5, acme, 6, tenant=ACME)]  # fmt: skip
    assert placed(make_snapshot(both, [acme, globex], jobs)) == {1: (1,), 2: (2,), 3: (1,), 4: (2,)}
