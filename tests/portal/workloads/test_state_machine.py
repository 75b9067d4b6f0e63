import pytest

from portal.workloads.choices import TRANSITIONS, State
from portal.workloads.models import IllegalTransition, Workload, WorkloadEvent, transition
from tests.builders import make_workload

LEGAL = [(source, to) for source, targets in TRANSITIONS.items() for to in sorted(targets)]
ILLEGAL = [(source, to) for source in State for to in State if to not in TRANSITIONS[source]]


def _in_state(queue, state):
    workload = make_workload(queue)
    Workload.objects.filter(pk=workload.pk).update(state=state)
    workload.refresh_from_db()
    return workload


@pytest.mark.parametrize(("source", "to"), LEGAL, ids=[f"{s}->{t}" for s, t in LEGAL])
def test_every_legal_transition_moves_and_records_an_event(acme_llm, source, to):
    workload = _in_state(acme_llm, source)
    transition(workload, to, reason="because")
    workload.refresh_from_db()
    assert workload.state == to
    event = WorkloadEvent.objects.get(workload=workload)
    assert (event.from_state, event.to_state, event.reason) == (source, to, "because")


@pytest.mark.parametrize(("source", "to"), ILLEGAL, ids=[f"{s}->{t}" for s, t in ILLEGAL])
def test_every_illegal_transition_is_refused_and_changes_nothing(acme_llm, source, to):
    workload = _in_state(acme_llm, source)
    with pytest.raises(IllegalTransition):
        transition(workload, to)
    workload.refresh_from_db()
    assert workload.state == source
    assert not WorkloadEvent.objects.filter(workload=workload).exists()


def test_the_design_paths_are_legal():
    happy = [State.PENDING, State.ADMITTED, State.STARTING, State.RUNNING, State.SUCCEEDED]
    requeue = [State.RUNNING, State.PREEMPTING, State.PENDING]
    recover = [State.RUNNING, State.RECOVERING, State.RUNNING]
    for path in (happy, requeue, recover):
        assert all(b in TRANSITIONS[a] for a, b in zip(path, path[1:], strict=False))


def test_a_stale_copy_loses_the_race(acme_llm):
    """Two callers hold the same PENDING workload; only the first move wins."""
    first = make_workload(acme_llm)
    second = Workload.objects.get(pk=first.pk)
    transition(first, State.ADMITTED)
    with pytest.raises(IllegalTransition):
        transition(second, State.CANCELLED)
    assert Workload.objects.get(pk=first.pk).state == State.ADMITTED


def test_entering_running_and_terminal_states_stamps_the_time(acme_llm):
    workload = _in_state(acme_llm, State.STARTING)
    transition(workload, State.RUNNING)
    transition(workload, State.SUCCEEDED, exit_code=0)
    workload.refresh_from_db()
    assert workload.started_at and workload.finished_at and workload.exit_code == 0
