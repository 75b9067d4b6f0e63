"""A node's desired state: one workload whose assignment cannot be sent never keeps the node
from hearing about the others."""

from portal.workloads.choices import State
from portal.workloads.cycle import scheduling_cycle
from portal.workloads.desired import desired_state
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
