"""A real `relayctl web` process and a real headless Debian chromium (Playwright's own
driver, pointed at /usr/bin/chromium: no browser is ever downloaded)."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Iterator
from urllib.parse import urlsplit

import pytest
from playwright import sync_api as playwright_api  # the test extra installs it

from .paths import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = os.environ.get("RELAY_TEST_ARTIFACTS") or str(ROOT / "test-artifacts")


class WebView:
    """`python -m relayctl web --port 0`; the URL is the first line it prints (the token
    in its fragment)."""

    def __init__(self, env: dict[str, str], *args: str, **popen) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "relayctl", "web", "--port", "0", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        if not ready:
            self.stop()
            raise AssertionError("relayctl web printed no URL within 30 s")
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            raise AssertionError(f"relayctl web printed {self.url!r}; stderr: {self.stop()}")
        parts = urlsplit(self.url)
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.port = parts.port
        self.token = parts.fragment.removeprefix("token=")

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET", data: bytes | None = None) -> tuple[int, bytes, dict[str, str]]:
        request = urllib.request.Request(self.base + path, headers=headers or {}, method=method, data=data)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=10) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def stop(self) -> str:
        """Ctrl-C, as a person stops it; returns what it wrote to stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("relayctl web did not stop on Ctrl-C within 15 s")
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.stderr = self.proc.stderr.read()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream:
                    stream.close()
        return getattr(self, "stderr", "")  # (again, when a test stopped it before its fixture)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the redirect itself is what is tested
        return None


# The fixtures of the web view's tests (import them by name into a test module).


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    assert os.path.exists(CHROMIUM), "chromium is not installed (.ci/run installs it with apt)"
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.errors = errors
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def team(relayctl) -> object:
    relayctl.setup("init")
    relayctl.setup("register", name="athena", program="claude-code", task="orchestrator")
    relayctl.setup("register", name="agent-bd-42", program="codex", task="auth refactor")
    relayctl.setup("register", name="agent-bd-43", program="gemini", task="API endpoints")
    return relayctl


@pytest.fixture
def web(team, relay_env) -> Iterator[WebView]:
    view = WebView(relay_env)
    try:
        yield view
    finally:
        view.stop()


def open_view(page, web: WebView) -> None:
    page.goto(web.url)
    page.wait_for_selector("#agents tbody tr[data-agent='athena']", timeout=10_000)
