"""Commands to agents fit where they are recorded: every action the protocol knows fits the
column that keeps it (PostgreSQL refuses a longer one; SQLite would not say)."""

from portal.cluster.models import NodeCommand
from scheduler.agent.protocol import COMMAND_ACTIONS


def test_every_action_the_protocol_knows_fits_its_column():
    width = NodeCommand._meta.get_field("action").max_length
    assert [a for a in COMMAND_ACTIONS if len(a) > width] == []
