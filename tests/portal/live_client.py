"""A browser's live connection, as the dashboard's live.js opens it: a session cookie, an
Origin header and a WebSocket to /ws/live/, read on a thread."""

import json
import threading

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.portal.processes import wait_until


class LiveClient:
    def __init__(self, port: int, django_client):
        cookie = f"sessionid={django_client.cookies['sessionid'].value}"
        self.socket = connect(
            f"ws://127.0.0.1:{port}/ws/live/",
            origin=f"http://127.0.0.1:{port}",
            additional_headers={"Cookie": cookie},
            open_timeout=10,
        ).__enter__()
        self.events: list[dict] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for raw in self.socket:
                self.events.append(json.loads(raw))
        except ConnectionClosed:
            pass

    def of(self, event: str) -> list[dict]:
        return [e["payload"] for e in self.events if e["event"] == event]

    def wait_for(self, event: str, predicate=lambda payload: True, timeout: float = 30):
        return wait_until(
            lambda: next((p for p in self.of(event) if predicate(p)), None),
            timeout,
            f"a {event} event on the live socket",
        )

    def close(self):
        self.socket.__exit__(None, None, None)
        self.thread.join(timeout=5)
