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
from urllib.parse import urlsplit

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = os.environ.get("RELAY_TEST_ARTIFACTS") or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test-artifacts")


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
