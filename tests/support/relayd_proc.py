"""A real relayd process, and relay's raw NDJSON client (`support.rawclient`), for tests.

Readiness is detected by polling the socket until the daemon answers hello for the right
store, never by sleeping blindly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from relayd.wire import handshake

from . import rawclient


class RawClient(rawclient.RawClient):
    """The package's bare NDJSON client, closed by `close_all()` after each test."""

    opened: list["RawClient"] = []

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        super().__init__(path, timeout)
        RawClient.opened.append(self)

    @classmethod
    def close_all(cls) -> None:
        while cls.opened:
            cls.opened.pop().close()


class Daemon:
    """`python -m relayd.daemon` with the test's environment."""

    def __init__(self, env: dict[str, str], *args: str, log_path: str | None = None) -> None:
        self.env = dict(env)
        self.args = list(args)
        self.socket_path = self.env["RELAY_SOCKET"]
        self.store_dir = os.path.abspath(self.env["RELAY_DIR"])
        self.log_path = log_path or os.path.join(os.path.dirname(self.socket_path), f"relayd-{time.monotonic_ns()}.log")
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True, **popen: Any) -> "Daemon":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "relayd.daemon", *self.args], env=self.env, stdout=log, stderr=log, **popen)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"relayd exited {self.proc.returncode}: {self.log()}")
            try:
                client = RawClient(self.socket_path, timeout=2)
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.01)
                continue
            try:
                client.send_line({"type": "hello", "version": handshake.VERSION})
                hello = client.line()
            except OSError:  # includes timeouts: not answering yet
                hello = None
            finally:
                client.close()
            if hello and hello.get("store") == self.store_dir:
                return
            time.sleep(0.01)
        raise AssertionError(f"relayd not ready after {timeout}s: {self.log()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"relayd did not stop on signal {sig}: {self.log()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
