"""A node's desired state: one workload whose assignment cannot be sent never keeps the node
from hearing about the others."""

from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.desired import desired_state, desired_states
from scheduler.agent import protocol
from tests.builders import make_workload


def _refreshed(workload):
    workload.refresh_from_db()
    return workload


def test_a_bad_assignment_fails_its_workload_and_the_node_hears_of_the_others(acme_llm):
    """Written to the database past the API's checks (an older portal, a script with database
    access): a negative duration breaks the protocol, a megabyte command an agent's frame."""
    good = make_workload(acme_llm, "good", gpus=2)
    negative = make_workload(acme_llm, "negative", gpus=2, simulated_duration_s=-1)
    huge = make_workload(acme_llm, "huge", gpus=2, command="x" * (1 << 20))
    plan = scheduling_cycle()
    nodes = {p.node_id for a in plan.admissions for p in a.placements}
    assert len(nodes) == 1  # bin-packed on one node, as in the probe
    state = desired_state(good.allocations.first().node)
    assert [a["workload_id"] for a in state["assignments"]] == [good.pk]
    protocol.encode("desired_state", **state)  # and it can be sent
    for bad, why in ((negative, "breaks the agent protocol"), (huge, "bytes, over the")):
        assert _refreshed(bad).state == State.FAILED
        assert why in bad.events.last().reason
        assert not bad.allocations.exists()
    assert _refreshed(good).state == State.ADMITTED


def test_the_desired_states_of_many_nodes_cost_the_same_few_queries(
    acme_llm, django_assert_max_num_queries
):
    """Eight whole-node jobs on eight nodes: the same queries as for one (no query per job)."""
    jobs = [make_workload(acme_llm, f"job-{i}", gpus=8) for i in range(8)]
    scheduling_cycle()
    nodes = {j.allocations.first().node_id for j in jobs}
    assert len(nodes) == 8
    with django_assert_max_num_queries(8):
        states = desired_states(list(nodes))
    assert sorted(a["workload_id"] for s in states.values() for a in s["assignments"]) == sorted(
        j.pk for j in jobs
    )
    assert all(a["nnodes"] == 1 for s in states.values() for a in s["assignments"])


def test_a_job_on_fewer_gpus_than_it_asked_for_runs_that_much_slower_on_simulated_nodes(
    acme_llm,
):
    """An elastic job started at 8 of its 16 GPUs: simulated nodes run it at half its pace, as
    the simulator does (a shrink that nothing slowed made the stack and the simulator part)."""
    make_workload(acme_llm, "blocker", gpus=56)  # of the queue's 64 GPUs, 8 are left
    elastic = make_workload(acme_llm, "elastic", gpus=16, min_gpus=8)
    scheduling_cycle()
    assert elastic.allocations.count() == 8
    (assignment,) = desired_state(elastic.allocations.first().node)["assignments"]
    assert assignment["simulated_speed"] == 0.5
    protocol.encode("desired_state", generation=0, assignments=[assignment])
