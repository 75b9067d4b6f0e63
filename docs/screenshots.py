"""The README's screenshots, taken from a standalone installation in Chromium, in English and
in Chinese: a member's dashboard, queues and job page; the operators' dashboard (what needs
them), cluster map, and a node and a job of it during a recovery (a drill's fault).

    python docs/screenshots.py [--settle 120]

Starts `manage.py standalone` on a fresh data directory, lets the simulated fleet and the demo
jobs run for `--settle` seconds (so that the charts have a history), signs in as bob and as
the operator, injects an XID 79 on the busiest node through the fault drill, and writes
`docs/screenshots/<page>.<language>.jpg`; stops the portal at the end.
Needs Chromium and Chinese fonts (`apt-get install chromium fonts-noto-cjk`) and the dev
install (Playwright).
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
LANGUAGES = ("en", "zh-hans")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(port: int, data_dir: str) -> subprocess.Popen:
    portal = subprocess.Popen(
        [sys.executable, "manage.py", "standalone", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "WANKA_DATA_DIR": data_dir},
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = portal.stdout.readline()
        if not line:
            raise SystemExit("standalone exited before its banner")
        if line.startswith("Press Ctrl-C"):
            return portal
    raise SystemExit("standalone printed no banner in 3 minutes")


def shoot(browser, base: str, username: str, shots: list[tuple[str, str, str | None]]) -> None:
    """Each (name, path, what to click first or None), in each language."""
    for language in LANGUAGES:
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        context.add_cookies([{"name": "django_language", "value": language, "url": base}])
        page = context.new_page()
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", "wanka-demo")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")
        for name, path, click in shots:
            if path == "job":
                page.goto(f"{base}/workloads/?state=running")
                path = page.locator("table.workloads tbody a").first.get_attribute("href")
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            if click:
                page.click(click)
            page.wait_for_timeout(1500)  # charts finish drawing
            target = OUT / f"{name}.{language}.jpg"
            page.screenshot(path=str(target), type="jpeg", quality=70, full_page=False)
            print(f"{target.relative_to(ROOT)}", flush=True)
        context.close()


def drill(browser, base: str) -> tuple[str, str]:
    """Inject an XID 79 (a GPU off the bus) on the busiest node; its page and the page of a
    job it hit, once its recovery shows."""
    page = browser.new_page()
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", "wanka-demo")
    page.click("button[type=submit]")
    page.goto(f"{base}/ops/drill/")
    node = page.locator("select[name=node] option").first.get_attribute("value")
    page.select_option("select[name=code]", "xid-79")
    page.click("#drill-form button[type=submit]")
    page.click("#confirm-dialog button[value=yes]")
    page.goto(f"{base}/ops/nodes/{node}/")
    job = page.locator("#node-workloads tbody a").first.get_attribute("href")
    page.goto(base + job)
    page.locator("#job-recoveries abbr").first.wait_for(timeout=30_000)  # its recovery
    page.close()
    return f"/ops/nodes/{node}/", job


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settle", type=float, default=120, help="seconds of history first")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Chromium: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    port, data_dir = free_port(), tempfile.mkdtemp(prefix="wanka-screens-")
    portal = start(port, data_dir)
    try:
        time.sleep(args.settle)
        base = f"http://127.0.0.1:{port}"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            member = [("dashboard", "/", None), ("queues", "/queues/", None), ("job", "job", None)]
            shoot(browser, base, "bob", member)
            utilization = "[data-metric=util]"
            operator = [("cockpit", "/", None), ("cluster-map", "/ops/cluster/", utilization)]
            shoot(browser, base, "operator", operator)
            node, job = drill(browser, base)
            recoveries = "#job-recoveries h2"  # scrolled to its recoveries
            shoot(browser, base, "operator", [("node", node, None), ("recovery", job, recoveries)])
            browser.close()
    finally:
        portal.send_signal(signal.SIGTERM)
        portal.wait(timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
