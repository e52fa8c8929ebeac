"""The commands that run until stopped end on SIGINT and on SIGTERM with status 0, also
when a script started them with `cmd &`: a shell without job control starts background
commands with SIGINT ignored, and they must not need SIGKILL."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from support.cli_processes import RelayCtl

# A script's `cmd &` (sh has no job control here): the child's pid first, then its output.
BACKGROUND = 'exec 2>&1; "$@" & echo $!; wait $!'


class Background:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.shell = subprocess.Popen(["sh", "-c", BACKGROUND, "sh", *argv], env=env, stdout=subprocess.PIPE)
        self.buffer = b""
        self.pid = int(self.line(lambda line: line.isdigit(), 20))

    def line(self, wanted: Callable[[str], bool], timeout: float) -> str:
        """The first line of output that `wanted` accepts (the rest is dropped)."""
        fd = self.shell.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                line, _, self.buffer = self.buffer.partition(b"\n")
                if wanted(line.decode()):
                    return line.decode()
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"no such line within {timeout}s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError("the command ended early")
            self.buffer += chunk

    def stop(self, sig: signal.Signals, timeout: float = 15) -> tuple[int, str]:
        os.kill(self.pid, sig)
        try:
            self.shell.wait(timeout)  # the shell's status is its child's (`wait $!`)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {timeout}s after {sig.name}") from None
        rest = self.buffer + self.shell.stdout.read()
        return self.shell.returncode, rest.decode(errors="replace")

    def close(self) -> None:
        """Whatever happened, nothing started here outlives the test."""
        for pid in (self.pid, self.shell.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, AttributeError):
                pass
        self.shell.communicate()


def _subscribe(relayctl: RelayCtl, proc_env: dict[str, str], request: pytest.FixtureRequest, tmp: Path) -> Background:
    request.getfixturevalue("daemon")
    child = Background([sys.executable, "-m", "relayctl", "subscribe", "inbox", "--for", "inferno"], proc_env)
    deadline = time.monotonic() + 20
    while True:  # subscribed once an event comes through
        relayctl("send", "inferno", "ping", agent="storm")
        try:
            child.line(lambda line: '"subject":"ping"' in line, 0.5)
            return child
        except AssertionError:
            if time.monotonic() > deadline:
                child.close()
                raise


def _read_tail(relayctl: RelayCtl, proc_env: dict[str, str], request: pytest.FixtureRequest, tmp: Path) -> Background:
    relayctl("init", "--preset", "overlord")
    relayctl("send", "inferno", "old news", agent="storm")
    child = Background([sys.executable, "-m", "relayctl", "--agent", "inferno", "read", "--tail", "--last", "1"], proc_env)
    child.line(lambda line: "old news" in line, 20)
    return child


def _ignite_watch(relayctl: RelayCtl, proc_env: dict[str, str], request: pytest.FixtureRequest, tmp: Path) -> Background:
    relayctl("init")
    (tmp / "queue").mkdir()
    child = Background([sys.executable, "-m", "relayctl", "ignite", "watch", str(tmp / "queue")], proc_env)
    child.line(lambda line: line.startswith("serving "), 20)
    return child


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("start", [_subscribe, _read_tail, _ignite_watch], ids=["subscribe", "read-tail", "ignite-watch"])
def test_a_follower_started_by_a_script_stops_on_a_signal(start, sig, relayctl, relay_env, request, short_tmp) -> None:
    child = start(relayctl, relay_env, request, short_tmp)
    try:
        status, rest = child.stop(sig)
    finally:
        child.close()
    assert status == 0, rest
    assert "Traceback" not in rest and "error" not in rest


def test_a_scripts_background_command_does_start_with_sigint_ignored(short_tmp) -> None:
    """What the test above relies on: sh's `cmd &` hands its child SIGINT ignored."""
    child = Background([sys.executable, "-c", "import signal, time; print(int(signal.getsignal(signal.SIGINT) is signal.SIG_IGN), flush=True); time.sleep(30)"], dict(os.environ))
    try:
        assert child.line(lambda line: line in ("0", "1"), 20) == "1"
    finally:
        child.close()
