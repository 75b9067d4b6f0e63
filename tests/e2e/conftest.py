import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Playwright's sync API runs an event loop in the test's thread; the test's own database calls
# are still plain synchronous ones.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright (no browser download). Module-scoped: Playwright's
    sync API holds an event loop in this thread until it stops, which other tests' asyncio.run()
    must not find."""
    if CHROMIUM is None:
        pytest.skip("needs Chromium: apt-get install chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh page; the test fails if anything it loaded broke the Content-Security-Policy."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    refused = []
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    yield page
    context.close()
    assert not refused, refused
