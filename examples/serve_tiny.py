"""A tiny stand-in for a model server, to run as an inference service's replica:

    wanka serve examples/service.yaml     # its command: python examples/serve_tiny.py

It serves HTTP on $PORT: `POST /v1/completions` with `{"prompt_tokens": n, "output_tokens": m}`
answers after m / 40 seconds (a 70B model's decode rate, about), as if it generated them;
`GET /health` answers 200. Every second it writes its load, the requests in flight and those
finished per second, to $WANKA_LOAD_FILE, where the agent reads it for the autoscaler (a real
server's sidecar would do the same from the server's own metrics).
"""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DECODE_TOKENS_PER_S = 40.0
lock = threading.Lock()
load = {"in_flight": 0, "finished": 0}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self._answer(200, {"ok": True} if self.path == "/health" else {"reason": "not here"})

    def do_POST(self):
        if self.path != "/v1/completions":
            return self._answer(404, {"reason": f"no POST {self.path} here"})
        try:
            asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            seconds = int(asked["output_tokens"]) / DECODE_TOKENS_PER_S
        except (ValueError, KeyError, TypeError) as error:
            return self._answer(400, {"reason": f"expected output_tokens: {error}"})
        with lock:
            load["in_flight"] += 1
        try:
            time.sleep(seconds)
        finally:
            with lock:
                load["in_flight"] -= 1
                load["finished"] += 1
        self._answer(200, {"served_s": seconds})

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass  # one line per request would drown the job's output


def report(path):
    """Write the load every second, atomically (the agent may read it at any moment)."""
    before = 0
    while True:
        time.sleep(1)
        with lock:
            in_flight, finished = load["in_flight"], load["finished"]
        with open(f"{path}.tmp", "w") as f:
            json.dump({"in_flight": in_flight, "requests_per_s": finished - before}, f)
        os.replace(f"{path}.tmp", path)
        before = finished


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8000"))
    if os.environ.get("WANKA_LOAD_FILE"):
        threading.Thread(target=report, args=(os.environ["WANKA_LOAD_FILE"],), daemon=True).start()
    print(f"serving on port {port}", flush=True)
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
