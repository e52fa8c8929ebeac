"""Start the web view: bind 127.0.0.1, make the token, print the URL, serve until Ctrl-C."""

from __future__ import annotations

import secrets
import socket
import sys

from relayd.client import Client
from relayd.errors import UsageError

HOST = "127.0.0.1"


def bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc} (try --port 0 for any free port)") from None
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def serve(store_dir: str, socket_path: str | None, human: str, port: int, open_browser: bool) -> None:
    import uvicorn

    from .app import create_app

    with Client(store_dir, socket_path, name="relay-web") as client:
        client.store().require_existing()
        # Registered, so agents can answer the human and broadcasts reach the page too.
        client.call("register", {"name": human, "program": "relay-web"})
    sock = bind(port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    url = f"http://{HOST}:{port}/?token={token}"
    print(url, flush=True)
    print(f"relay web view of {store_dir}, writing as {human!r}; open the URL above (Ctrl-C stops)", file=sys.stderr, flush=True)
    once: set[str] = set()
    if open_browser:
        import webbrowser

        # The browser gets the URL on its command line, visible to other users: a token
        # that works once, for the first page load, and is worthless after.
        launch = secrets.token_urlsafe(32)
        once.add(launch)
        webbrowser.open(f"http://{HOST}:{port}/?token={launch}")
    server: uvicorn.Server | None = None
    config = uvicorn.Config(
        create_app(store_dir, socket_path, human, token, port, once, stopping=lambda: server is not None and server.should_exit),
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=3,
    )
    try:
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn has shut down cleanly and hands Ctrl-C back: a normal way to stop
    finally:
        sock.close()
    print("relay web view stopped", file=sys.stderr)

