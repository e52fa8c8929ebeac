"""A real nats-server with JetStream on 127.0.0.1, started, killed and paused by tests.

With `config`, the server also reads that file (the authorization `relayctl bridge setup`
writes); the command line's address, port and store directory win over the file's.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

NATS_SERVER = shutil.which("nats-server") or ("/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class NatsServer:
    def __init__(self, workdir: str, port: int | None = None, config: str | None = None) -> None:
        assert NATS_SERVER is not None
        self.config = config
        self.port = port or free_port()
        self.store_dir = os.path.join(workdir, "jetstream")
        self.log_path = os.path.join(workdir, "nats-server.log")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> "NatsServer":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [NATS_SERVER, *(["-c", self.config] if self.config else []), "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.store_dir],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"nats-server exited {self.proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                    if conn.recv(4).startswith(b"INFO"):
                        return self
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"nats-server not accepting after 20s: {self.log()}")

    def kill(self) -> None:
        """kill -9: no shutdown, no flush."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def pause(self) -> None:
        """A partition as the clients see it: connections stay open, nothing answers."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return fh.read()[-4000:]
        except FileNotFoundError:
            return ""
