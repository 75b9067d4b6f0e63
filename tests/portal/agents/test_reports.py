"""A start or exit an agent reports is written down once per connection, and again when the
database did not take it (found by `bench.chaos`: a PostgreSQL restart left a job starting
for good, its nodes' reports lost on pooled connections the restart had cut)."""

import asyncio
from types import SimpleNamespace

import pytest

from portal.agents import consumers


class Database:
    """Stands in for the writes: the first `failures` calls fail as a cut connection does."""

    def __init__(self, failures: int):
        self.failures, self.calls = failures, []

    async def write(self, *args):
        self.calls.append(args)
        if len(self.calls) <= self.failures:
            raise ConnectionError("server closed the connection unexpectedly")
        return None


@pytest.fixture
def consumer():
    agent = consumers.AgentConsumer()
    agent.node = SimpleNamespace(id=3, name="node-3")
    agent.started, agent.exited, agent.attempts, agent.refused = set(), set(), {7: 0}, set()
    return agent


def heartbeat(consumer, state: str, **report):
    item = {"workload_id": 7, "attempt": 0, "state": state, **report}
    return consumer.on_workloads([item])


@pytest.mark.parametrize(
    ("state", "report", "patch"),
    [
        pytest.param("running", {}, "STARTED", id="a start the database refused is reported again"),
        pytest.param(
            "exited",
            {"exit_code": 0},
            "in_db",
            id="an exit the database refused is reported again",
        ),
    ],
)
def test_a_report_that_failed_is_made_again_by_the_next_heartbeat(
    consumer, monkeypatch, state, report, patch
):
    database = Database(failures=1)
    if patch == "STARTED":
        monkeypatch.setattr(consumers, "STARTED", database.write)
    else:
        monkeypatch.setattr(consumers, "in_db", lambda func: database.write)

    async def three_heartbeats():
        with pytest.raises(ConnectionError):
            await heartbeat(consumer, state, **report)
        await heartbeat(consumer, state, **report)  # taken this time
        await heartbeat(consumer, state, **report)  # already written down: no write

    asyncio.run(three_heartbeats())
    assert len(database.calls) == 2
