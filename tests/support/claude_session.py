"""A Claude Code session's cross-session inbox made as Claude Code 2.1.332 makes it, for
the protocol-level tests of relay's Claude Code door (tests/arrival): a real Unix socket in
a 0700 directory, the session record and key file beside it. The session's pid is the
test's own process, or one the test runs as the session (`pid`): its start time in /proc
is real either way. Sessions made under one `root` share the user's directories.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

from relayd.arrival import claude_inbox_format as fmt
from relayd.arrival.program_process import started

TOKEN = "0123456789abcdef0123456789abcdef"


class FakeSession:
    """One session's inbox: what Claude Code puts on disk, and the lines its socket received."""

    def __init__(self, root: Path, pid: int | None = None, cwd: Path | None = None) -> None:
        self.config = root / "claude"
        self.sessions = self.config / "sessions"
        self.sessions.mkdir(parents=True, exist_ok=True)
        self.socks = root / "run" / "cc-socks"
        self.socks.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.pid = pid or os.getpid()
        self.socket = str(self.socks / f"{self.pid}.sock")
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(self.socket)
        os.chmod(self.socket, 0o600)
        self.server.listen(4)
        self.received: list[dict] = []
        self.got = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()
        start = started(self.pid)
        self.record = {"pid": self.pid, "sessionId": f"s-{self.pid}", "cwd": str(cwd or root), "procStart": start, "version": fmt.TESTED_VERSION,
                       "peerProtocol": 1, "kind": "interactive", "messagingSocketPath": self.socket, "status": "idle"}
        self.write_record()
        key = self.sessions / fmt.key_name(self.pid, self.socket)
        key.write_text(json.dumps({"peerToken": TOKEN, "procStart": start}))
        key.chmod(0o600)

    def write_record(self, **change) -> None:
        (self.sessions / f"{self.pid}.json").write_text(json.dumps({**self.record, **change}))

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            reader, data = fmt.LineReader(), conn.recv(65536)
            while data:
                with self.got:
                    self.received.extend(reader.feed(data))
                    self.got.notify_all()
                data = conn.recv(65536)
            conn.close()

    def wait_lines(self, n: int) -> list[dict]:
        with self.got:
            assert self.got.wait_for(lambda: len(self.received) >= n, timeout=10), self.received
            return list(self.received)

    def answer(self, message: dict, status: str, **extra) -> None:
        """Claude Code's `peer_message_status` receipt for a peer message this session
        received, written from the session's pid (this process) to its reply address."""
        line = {"type": "control", "action": "peer_message_status", "status": status, "orig_msg_id": message["msg_id"], "from": "uds:/elsewhere", **extra}
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(message["from"].removeprefix("uds:"))
            conn.sendall(json.dumps(line).encode() + b"\n")

    def close(self) -> None:
        self.server.close()
