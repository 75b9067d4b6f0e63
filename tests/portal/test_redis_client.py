"""The process's Redis client, shared by a server's threads."""

from portal.core import redis as clients


def test_a_client_dropped_does_not_close_the_connections_taken_from_it(clean_redis):
    """Two threads asking for the first client at once each make one, and one is dropped at
    once: its callers' connections stay open (they failed mid-command when it closed them)."""
    made = clients.client.__wrapped__()
    pool = made.connection_pool
    connection = pool.get_connection()
    connection.send_command("PING")
    del made
    assert connection.read_response() == "PONG"
    pool.release(connection)
