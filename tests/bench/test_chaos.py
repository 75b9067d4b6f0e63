"""The chaos bench's own checks: a GPU two workloads run on, as an agent sees its node, and
the cleanup of what is not a child process (its PostgreSQL cluster)."""

from types import SimpleNamespace

from bench import processes
from bench.chaos import double_booked


def agent(hostname, *workloads):
    """An agent's table of workloads: (state, GPU indices) each."""
    table = {
        i: SimpleNamespace(state=state, assignment=SimpleNamespace(gpu_indices=gpus))
        for i, (state, gpus) in enumerate(workloads)
    }
    return SimpleNamespace(hostname=hostname, _workloads=table)


def test_a_gpu_two_running_workloads_use_is_double_booked():
    agents = [
        agent("n1", ("running", (0, 1)), ("running", (1, 2))),
        agent("n2", ("running", (0, 1)), ("exited", (0, 1))),  # the old run has ended
    ]
    assert double_booked(agents) == {("n1", 1)}


def test_what_is_not_a_child_is_stopped_once_after_the_children():
    calls = []
    processes.on_stop(lambda: calls.append("stopped"))
    processes.stop_all(grace=0)
    processes.stop_all(grace=0)
    assert calls == ["stopped"]
