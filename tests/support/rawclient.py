"""A bare NDJSON client of relayd's socket: JSON lines in and out, nothing else of relay.

What a client in any other language would do, so tests and benchmarks use it to check the
wire protocol as documented (docs/protocol.md) rather than through relay's own client.
Blocking, standard library only. Not part of the product: tests import it as
`support.rawclient`, benchmarks as `tests.support.rawclient` (run from the repository root,
as `python -m benchmarks.run` is).
"""

from __future__ import annotations

import json
import socket
from typing import Any


class RawClient:
    def __init__(self, path: str, timeout: float | None = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self.buffer = b""
        self.next_id = 0

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_line(self, obj: Any) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def raw_lines(self, count: int) -> list[bytes]:
        """The next `count` lines, undecoded; ConnectionError at EOF."""
        out: list[bytes] = []
        while len(out) < count:
            while b"\n" not in self.buffer:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("relayd closed the connection")
                self.buffer += chunk
            parts = self.buffer.split(b"\n")
            self.buffer = parts.pop()
            out.extend(parts)
        return out

    def line(self) -> dict | None:
        """The next line as an object; None at EOF."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        raw, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(raw)

    def request(self, op: str, params: dict | None = None) -> dict:
        """Send one request and return its response (events arriving meanwhile are skipped)."""
        self.next_id += 1
        self.send_line({"type": "request", "id": self.next_id, "op": op, "params": params or {}})
        while True:
            reply = self.line()
            if reply is None:
                raise ConnectionError("relayd closed the connection")
            if reply.get("type") == "response" and reply.get("id") == self.next_id:
                return reply

    def subscribe(self, topics: list[str], **extra: Any) -> dict:
        self.send_line({"type": "subscribe", "topics": topics, **extra})
        ack = self.line()
        if ack is None or ack.get("type") != "subscribed":
            raise ConnectionError(f"relayd answered subscribe with {ack!r}")
        return ack

    def closed(self) -> bool:
        """True when relayd has closed the connection (after any pending lines)."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buffer += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()
