"""Start the web view: bind 127.0.0.1, make the token, print the URL, serve until Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import sys
import threading
import resource
import html
import tempfile

from uvicorn.protocols.http.h11_impl import H11Protocol
import uvicorn

from relayd.client.full import Client
from relayd.agents import presence
from relayd.errors import RelayError, UsageError
from relayd.store import Store

from .gate import TOTAL, Gate
from .app import create_app

HOST = "127.0.0.1"
# The kernel's queue of connections not yet accepted, and so also how many asyncio accepts in
# one turn of the loop (it passes the same number to both). The gate sees a connection a few
# turns after its accept, so a few batches are open before it closes any: 128 keeps that well
# inside 1,024 descriptors. uvicorn's default, 2,048 at once, let a queue of half-sent requests
# (a view slower than its neighbour, on a loaded machine) exhaust the descriptors before the
# gate saw any; asyncio then logged "out of system resource" once per remaining accept, enough
# to fill a stderr pipe and stall the view.
BACKLOG = 128


def bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc} (try --port 0 for any free port)") from None
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def serve(store_dir: str, socket_path: str | None, human: str, port: int, open_browser: bool) -> None:
    with Client(store_dir, socket_path, name="relay-web") as client:
        client.store().require_existing()
        # Registered, so agents can answer the human and broadcasts reach the page too (while
        # it runs: stopping archives the identity, and broadcasts then leave it out).
        client.call("register", {"name": human, "program": presence.WEB_VIEW})
    sock = bind(port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    # In the fragment: a browser never sends it to a server (nor, then, to a proxy or a log).
    url = f"http://{HOST}:{port}/#token={token}"
    print(url, flush=True)
    print(f"relay web view of {store_dir}, writing as {human!r}; open the URL above (Ctrl-C stops)", file=sys.stderr, flush=True)
    gate: Gate[GatedH11] = Gate(total=_connection_cap())
    server: uvicorn.Server | None = None
    config = uvicorn.Config(
        create_app(store_dir, socket_path, human, token, port, gate, stopping=lambda: server is not None and server.should_exit),
        http=type("GatedH11", (GatedH11,), {"gate": gate}),
        backlog=BACKLOG,
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=3,
        timeout_keep_alive=5,
    )
    opener = Opener(url) if open_browser else None
    try:
        server = uvicorn.Server(config)
        if opener is not None:
            opener.start()  # the socket listens already: the browser's request waits for the server
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn has shut down cleanly and hands Ctrl-C back: a normal way to stop
    finally:
        sock.close()
        if opener is not None:
            opener.remove()
        _leave(store_dir, human)
    print("relay web view stopped", file=sys.stderr)


def _leave(store_dir: str, human: str) -> None:
    """The page is gone: its identity shows as archived (not alive) and broadcasts skip it
    until a web view writes as it again. Mail sent to it by name still arrives."""
    try:
        with Store(store_dir) as store, store.agent_dir(human) as agent:
            presence.archive(agent)
    except (RelayError, OSError):
        pass  # removed or unreadable meanwhile: nothing to mark


def _connection_cap() -> int:
    """Connections in all: well below the descriptors this process may open, so accept()
    never fails for want of one (it would spin, logging each failure)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return TOTAL
    return max(16, min(TOTAL, soft // 2 - 64))


class Opener:
    """`--open` without a secret on any command line (other users can read every process's
    arguments): the URL goes into a file only this user can read, in a fresh private
    directory, and the browser is given that file. The file is removed OPEN_FILE_SECONDS
    later, or when the view stops. The browser runs in a thread: one that stays in the
    foreground (w3m, lynx) must not keep the server from answering it."""

    def __init__(self, url: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="relay-web-")  # 0700
        self.path = os.path.join(self.folder, "open.html")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(OPEN_PAGE.format(url=html.escape(url, quote=True)))
        self._timer = threading.Timer(OPEN_FILE_SECONDS, self.remove)
        self._timer.daemon = True

    def start(self) -> None:
        threading.Thread(target=self._open, name="relay-web-open", daemon=True).start()
        self._timer.start()

    def _open(self) -> None:
        # deferred imports: webbrowser (which loads shlex and subprocess) only in the thread that
        # opens the page
        import webbrowser

        try:
            opened = webbrowser.open("file://" + self.path)
        except Exception as exc:  # a browser command that fails to start: say so, keep serving
            print(f"relay web: could not start a browser ({exc}); open the URL above", file=sys.stderr, flush=True)
            return
        if not opened:
            print("relay web: no browser found (set BROWSER); open the URL above", file=sys.stderr, flush=True)

    def remove(self) -> None:
        self._timer.cancel()
        for remove, path in ((os.unlink, self.path), (os.rmdir, self.folder)):
            try:
                remove(path)
            except FileNotFoundError:
                pass


OPEN_FILE_SECONDS = 60.0
OPEN_PAGE = """<!doctype html>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0; url={url}">
<title>relay web view</title>
<p><a href="{url}">Open the relay web view</a></p>
"""


class GatedH11(H11Protocol):
    """uvicorn's HTTP/1.1 connection, admitted, timed and dropped by `gate` (gate.Gate)."""

    gate: Gate[GatedH11]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        keep, pushed_out = self.gate.opened(self.client, self)
        for other in pushed_out:
            other.drop()
        if not keep:
            self.drop()
            return
        self.loop.call_later(self.gate.deadline, self._deadline)

    def _deadline(self) -> None:
        if self.gate.overdue(self.client):
            self.gate.drop(self.client)
            self.drop()

    def drop(self) -> None:
        """Close at once: nothing more is sent or read (a stranger, a stalled reader)."""
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.closed(self.client, self)
        super().connection_lost(exc)
