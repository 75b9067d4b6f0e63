"""What the project's WebSocket consumers share."""

from channels.consumer import get_handler_name


class DirectDispatch:
    """Dispatch each message straight to its handler.

    Channels' own dispatch first closes old database connections on the one shared
    sync thread, for every message of every connection: with thousands of agents heartbeating,
    every message queued behind every other on that thread. These consumers make their
    database calls through `DatabaseSyncToAsync`, which closes its own thread's old connections
    before and after each call, so the hop buys nothing.
    """

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
