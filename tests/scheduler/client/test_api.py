"""The API client sends an `Idempotency-Key` with each submission and re-sends it on its own
retry after a server error."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scheduler.client import api
from scheduler.client.api import ApiError, Client


@pytest.fixture
def portal(monkeypatch):
    """A fake portal that fails the first `failures` POSTs with a 503; yields (url, keys seen,
    failures left) and records each POST's Idempotency-Key."""
    monkeypatch.setattr(api, "RETRY_AFTER_S", (0.01, 0.01))
    seen, failures = [], [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.headers.get("Idempotency-Key"))
            status = 503 if failures[0] > 0 else 201
            failures[0] -= 1
            body = json.dumps({"id": 1} if status == 201 else {"errors": [{"reason": "busy"}]})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", seen, failures
    server.shutdown()


def test_a_keyed_post_is_sent_again_with_the_same_key_after_a_server_error(portal):
    url, seen, failures = portal
    failures[0] = 2
    assert Client(url, "wk_x").post("/api/v1/workloads/", {}, idempotency_key="k1") == {"id": 1}
    assert seen == ["k1", "k1", "k1"]


def test_it_gives_up_after_its_retries(portal):
    url, seen, failures = portal
    failures[0] = 10
    with pytest.raises(ApiError) as error:
        Client(url, "wk_x").post("/api/v1/workloads/", {}, idempotency_key="k1")
    assert error.value.status == 503 and len(seen) == 3


def test_a_post_without_a_key_is_sent_once(portal):
    url, seen, failures = portal
    failures[0] = 1
    with pytest.raises(ApiError):
        Client(url, "wk_x").post("/api/v1/workloads/1/cancel/")
    assert seen == [None]


def test_each_submit_sends_a_fresh_key(portal, monkeypatch, tmp_path):
    from scheduler.client import cli

    url, seen, _ = portal
    job = tmp_path / "job.json"
    job.write_text('{"name": "x"}')
    monkeypatch.setenv("WANKA_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setattr(cli, "_print_json", lambda value: 0)
    for _ in range(2):
        assert cli.main(["submit", str(job), "--url", url, "--token", "wk_x", "--json"]) == 0
    assert len(seen) == 2 and None not in seen and seen[0] != seen[1]
