"""Smoke test of standalone mode: start it on a fresh data directory, sign in, fetch the
dashboard and the API schema, wait for the simulated fleet, the demo jobs and the demo
service's replicas serving the load generator's requests, stop it."""

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main():
    port, data_dir = free_port(), tempfile.mkdtemp(prefix="wanka-smoke-")
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    portal = subprocess.Popen(
        [sys.executable, "manage.py", "standalone", "--port", str(port)],
        env={**os.environ, "WANKA_DATA_DIR": data_dir},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = wait_for_banner(portal)
        assert "alice" in banner and base in banner, banner
        web = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        sign_in(web, base, "alice", "wanka-demo")
        page = web.open(f"{base}/").read().decode()
        assert "Cluster utilization" in page and "llama-8b-pretrain" in page
        schema = web.open(f"{base}/api/schema/").read().decode()
        assert "/api/v1/workloads/" in schema
        summary = wait_for_jobs(web, base)
        globex = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        sign_in(globex, base, "charlie", "wanka-demo")
        served = wait_for_service(globex, base)
        print(
            f"standalone smoke test passed in {time.monotonic() - started:.0f} s: "
            f"{summary['ready_nodes']}/{summary['nodes']} nodes ready, "
            f"{summary['allocated']} of {summary['gpus']} GPUs allocated, "
            f"the chat service on {served['ready']} replica(s) with {served['in_flight']} "
            "requests in flight"
        )
    finally:
        portal.send_signal(signal.SIGTERM)
        portal.wait(timeout=30)
    leftovers = subprocess.run(["pgrep", "-f", data_dir], capture_output=True, text=True)
    assert not leftovers.stdout.strip(), f"processes left running: {leftovers.stdout}"


def wait_for_banner(portal, timeout=120):
    deadline, lines = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = portal.stdout.readline()
        if not line:
            raise SystemExit("standalone exited:\n" + "".join(lines))
        lines.append(line)
        if line.startswith("Press Ctrl-C"):
            return "".join(lines)
    raise SystemExit("no banner in time:\n" + "".join(lines))


def sign_in(web, base, username, password):
    form = web.open(f"{base}/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    data = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    ).encode()
    request = urllib.request.Request(
        f"{base}/login/", data=data, headers={"Referer": f"{base}/login/"}
    )
    assert web.open(request).url == f"{base}/", "sign-in failed"


def wait_for_jobs(web, base, timeout=90):
    """The fleet connects and the demo jobs are placed: live data, not a still picture."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        total = json.load(web.open(f"{base}/api/v1/nodes/summary/"))["total"]
        if total["ready_nodes"] == total["nodes"] and total["allocated"] > 0 and total["busy"]:
            return total
        time.sleep(1)
    raise SystemExit(f"fleet or jobs not up in {timeout} s: {total}")


def wait_for_service(web, base, timeout=120):
    """The demo's service has a replica serving and the load generator's requests reach it."""
    (service,) = json.load(web.open(f"{base}/api/v1/services/?name=chat"))["results"]
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        samples = json.load(web.open(f"{base}/api/v1/services/{service['id']}/samples/"))
        last = samples[-1] if samples else None
        if last and last["ready"] >= 1 and last["in_flight"] > 0:
            return last
        time.sleep(1)
    raise SystemExit(f"the chat service served nothing in {timeout} s: {last}")


if __name__ == "__main__":
    main()
