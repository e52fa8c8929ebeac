"""A Unix socket server on a thread, for tests that put something of their own where relayd
listens (a relayd of another version, a proxy that records requests).

Each accepted connection goes to `serve(conn)` on the accepting thread: a short exchange is
served right there, a long one starts threads of its own with `spawn`. `close()` stops
accepting, shuts every connection down (waking whatever blocks on one), joins the threads
and closes the sockets -- none is left to the garbage collector, which would warn.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable


class UnixServer:
    def __init__(self, path: str, serve: Callable[[socket.socket], None]) -> None:
        self.serve = serve
        self.connections: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen()
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.connections.append(conn)
            try:
                self.serve(conn)
            except OSError:
                pass  # the peer went away, or close() shut the connection down

    def keep(self, sock: socket.socket) -> socket.socket:
        """Close `sock` (one the server opened itself, e.g. to relayd) with the connections."""
        self.connections.append(sock)
        return sock

    def spawn(self, target: Callable[..., Any], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the acceptor
        self.listener.close()
        self._shut_down()  # (the acceptor may be serving one)
        self.acceptor.join(timeout=10)
        self._shut_down()  # (one it accepted meanwhile)
        for thread in self.threads:
            thread.join(timeout=10)
        for conn in self.connections:
            conn.close()

    def _shut_down(self) -> None:
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed, or never connected
