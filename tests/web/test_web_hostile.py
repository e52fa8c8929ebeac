"""The web view against a hostile neighbour on the same machine: another server on
127.0.0.1, a process-list reader, half-sent requests, malformed bodies, event streams that
are never read. Real `relayctl web` processes, real sockets, real headless chromium."""

from __future__ import annotations

import http.server
import json
import os
import resource
import select
import shlex
import signal
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from support.cli_processes import process_state
from support.waiting import wait_for
from support.web_view import WebView, browser, open_view, page, team, web  # noqa: F401  (fixtures)
from support.paths import TESTS

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop


class Neighbour(http.server.ThreadingHTTPServer):
    """Another user's server on another port of 127.0.0.1: records every request's headers."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        neighbour = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                neighbour.seen.append(dict(self.headers))
                body = b"<!doctype html><title>next door</title><p>hello"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_another_port_of_127_0_0_1_receives_nothing_of_the_view(web: WebView, page) -> None:
    neighbour = Neighbour()
    try:
        open_view(page, web)
        for path in ("/", "/favicon.ico", "/api/state"):
            page.goto(f"http://127.0.0.1:{neighbour.server_address[1]}{path}")
        page.goto(web.base + "/")  # back to the view: it still works in this tab
        page.wait_for_selector("#agents tbody tr[data-agent='athena']", timeout=10_000)
    finally:
        neighbour.shutdown()
        neighbour.server_close()
    assert neighbour.seen, "the browser never reached the neighbour"
    for headers in neighbour.seen:
        assert web.token not in json.dumps(headers), headers
        assert not any(k.lower() == "cookie" for k in headers), headers


def foreground_browser(short_tmp: Path, command: str) -> Path:
    """A BROWSER that runs `command "$1"` in the foreground and records its arguments."""
    script = short_tmp / "browser"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$0" "$@" > {short_tmp}/argv\n{command} "$1" > {short_tmp}/shown 2>/dev/null\necho "exit $?" >> {short_tmp}/shown\n')
    script.chmod(0o755)
    return script


def test_open_puts_no_secret_on_any_command_line(team, relay_env, short_tmp: Path) -> None:
    """Another user can read every process's arguments (/proc/PID/cmdline): the browser gets
    a file only this user can read, and a real chromium gets in through it."""
    dump = shlex.join([sys.executable, "-m", "support.browser_dump", '[data-agent="athena"]'])  # a real chromium
    browser_cmd = foreground_browser(short_tmp, f"cd {shlex.quote(str(TESTS))} && timeout 60 {dump}")
    view = WebView({**relay_env, "BROWSER": str(browser_cmd)}, "--open")
    try:
        wait_for("the browser to finish", lambda: "exit" in _read(short_tmp / "shown"), timeout=60)
        argv = (short_tmp / "argv").read_text()
        assert view.token not in argv and "token" not in argv
        [opened] = [a for a in argv.split() if a.startswith("file://")]
        handed = Path(opened.removeprefix("file://"))
        assert stat.S_IMODE(handed.stat().st_mode) == 0o600 and stat.S_IMODE(handed.parent.stat().st_mode) == 0o700
        shown = (short_tmp / "shown").read_text()
        assert 'data-agent="athena"' in shown, "chromium did not get into the view: " + shown[-2000:]
        for pid in filter(str.isdigit, os.listdir("/proc")):
            assert view.token.encode() not in _cmdline(pid)
    finally:
        err = view.stop()
    assert not handed.exists() and not handed.parent.exists(), "the file with the token outlived the view"
    assert "Traceback" not in err


def test_open_with_a_browser_in_the_foreground_does_not_deadlock(team, relay_env, short_tmp: Path) -> None:
    """w3m (like lynx) runs in the foreground and waits for the page it was given."""
    browser_cmd = foreground_browser(short_tmp, "timeout 60 w3m -dump")
    view = WebView({**relay_env, "BROWSER": str(browser_cmd)}, "--open")
    try:
        assert view.get("/api/state", {"X-Relay-Token": view.token})[0] == 200
        wait_for("w3m to finish", lambda: "exit" in _read(short_tmp / "shown"), timeout=60)
        assert "Open the relay web view" in _read(short_tmp / "shown") and "exit 0" in _read(short_tmp / "shown")
    finally:
        view.stop()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))  # the common default


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_half_sent_requests_cannot_lock_out_the_owner(team, relay_env, many_descriptors, page) -> None:
    view = WebView(relay_env, preexec_fn=_limit_descriptors)
    strangers: list[socket.socket] = []
    try:
        for _ in range(1100):  # more than the view's 1024 descriptors
            s = socket.create_connection(("127.0.0.1", view.port), timeout=10)
            s.sendall(f"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:{view.port}\r\nX-Relay-To".encode())
            strangers.append(s)
        # Strangers are pushed out as new ones come: the descriptors in use fall back (all
        # 1,100 would exhaust them, and accept() would fail in a loop).
        _wait_for_shedding(view)
        open_view(page, view)  # the owner gets in, in a real browser
        assert view.get("/api/state", {"X-Relay-Token": view.token})[0] == 200
    finally:
        for s in strangers:
            s.close()
        err = view.stop()
    assert len(err) < 2000 and "Traceback" not in err, err[:2000]  # no log flood


def _wait_for_shedding(view: WebView) -> None:
    """Until the view holds fewer than 200 descriptors again; failing, it says what the view
    was doing (a stalled view, in CI, showed only as the Ctrl-C timeout that followed)."""
    try:
        wait_for("the view to shed the half-sent requests", lambda: _fds(view.proc.pid) < 200, timeout=20)
    except AssertionError as exc:
        detail = f"{exc}: {_fds(view.proc.pid)} descriptors open; {process_state(view.proc)}"
        view.proc.kill()
        view.proc.wait()
        raise AssertionError(f"{detail}; its stderr: {view.stop()[-2000:]}") from None


def test_a_queue_of_half_sent_requests_while_the_view_is_busy_cannot_exhaust_it(team, relay_env, many_descriptors) -> None:
    """On a loaded machine the view can be slower than the neighbour: the connections wait in
    the kernel's queue until it accepts them. Stopped with SIGSTOP, the view is as busy as it
    can be; the neighbour opens 1,100 connections and starts a request on each one that gets
    through."""
    view = WebView(relay_env, preexec_fn=_limit_descriptors)
    strangers: list[socket.socket] = []
    try:
        assert view.get("/api/state", {"X-Relay-Token": view.token})[0] == 200  # serving (the URL comes first)
        os.kill(view.proc.pid, signal.SIGSTOP)
        try:
            for _ in range(1100):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", view.port))  # (loopback: the handshake is done or refused by its return)
                strangers.append(s)
            poll = select.poll()
            for s in strangers:
                poll.register(s, select.POLLOUT)
            writable = {fd for fd, events in poll.poll(0) if events == select.POLLOUT}
            through = [s for s in strangers if s.fileno() in writable]
            for s in through:
                s.send(f"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:{view.port}\r\nX-Relay-To".encode())
        finally:
            os.kill(view.proc.pid, signal.SIGCONT)
        # The ones the queue had no room for are still retrying their handshake: given up.
        for s in strangers:
            if s.fileno() not in writable:
                s.close()
        _wait_for_shedding(view)
        assert view.get("/api/state", {"X-Relay-Token": view.token})[0] == 200
    finally:
        for s in strangers:
            s.close()
        err = view.stop()
    # Accepting the whole queue at once ran out of descriptors and logged each failed accept,
    # enough to fill a stderr pipe and stall the view.
    assert "out of system resource" not in err and len(err) < 2000, err[:2000]


BAD_BODIES = [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"to": ["athena"], "body": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b"{not json",
    b"\xff\xfe",
    b"",
    b"[1, 2]",
    b'"text"',
    b'{"to": 5, "body": "x"}',
    b'{"to": ["athena"], "body": {"a": 1}}',
    b'{"to": ["athena"], "body": "x", "priority": []}',
]


def test_malformed_bodies_are_400_not_500(web: WebView, relayctl) -> None:
    headers = {"X-Relay-Token": web.token, "Content-Type": "application/json"}
    for path in ("/api/send", "/api/dlq/retry", "/api/dlq/drop"):
        for body in BAD_BODIES + [b'{"id": 5}', b'{"id": "01J00000000000000000000000", "to": []}']:
            status, answer, _ = web.get(path, headers, "POST", body)
            assert status == 400 or (status == 404 and path != "/api/send"), (path, body[:60], status, answer)
            assert "error" in json.loads(answer)
    assert web.get("/api/send", headers, "POST", b"x" * (600 * 1024))[0] == 413
    assert json.loads(relayctl("read", "--json", "--last", "0", agent="athena").stdout) == []
    assert web.get("/api/state", {"X-Relay-Token": web.token})[0] == 200
    err = web.stop()
    assert "Traceback" not in err and "Exception" not in err, err


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def test_event_stream_readers_that_never_read_are_dropped(team, relay_env, relayctl, many_descriptors) -> None:
    for n in range(100):  # a state of ~400 KB: the newest 100 messages, 4,000 characters each
        relayctl.setup("send", agent="agent-bd-42", to=["athena"], body=f"{n} " + "x" * 3990)
    view = WebView(relay_env)
    readers: list[socket.socket] = []
    try:
        assert view.get("/api/state", {"X-Relay-Token": view.token})[0] == 200
        before = _rss_kib(view.proc.pid)
        for _ in range(500):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", view.port))
            s.sendall(f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{view.port}\r\nX-Relay-Token: {view.token}\r\n\r\n".encode())
            readers.append(s)  # and never read
        # New states for every stream. The cap on streams from one address (16) closes the
        # oldest as each new one arrives; under load the view may still be taking the last
        # connections after the fifth state, so it gets up to 15 more (looking reads what is
        # waiting, which does not matter to the cap).
        for n in range(20):
            relayctl.setup("heartbeat", agent="athena", task=f"round {n}")
            time.sleep(0.3)
            if n >= 4 and (open_streams := sum(1 for s in readers if _still_open(s))) <= 16:
                break
        grown_mib = (_rss_kib(view.proc.pid) - before) / 1024
        # A reader that does read still gets the state.
        fresh = socket.create_connection(("127.0.0.1", view.port), timeout=10)
        fresh.sendall(f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{view.port}\r\nX-Relay-Token: {view.token}\r\n\r\n".encode())
        got = b""
        while b"event: state" not in got:
            got += fresh.recv(65536)
        fresh.close()
    finally:
        for s in readers:
            s.close()
        view.stop()
    assert open_streams <= 16, f"{open_streams} streams that never read are still served"
    assert grown_mib < 64, f"the view grew by {grown_mib:.0f} MiB holding states for readers that never read"


def _still_open(s: socket.socket) -> bool:
    """Not closed by the server: no EOF or reset waiting behind the unread data."""
    s.setblocking(False)
    try:
        while True:
            data = s.recv(1 << 20)
            if not data:
                return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)
