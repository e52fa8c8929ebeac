"""A private tmux server whose one pane records every line it receives, for tests of the
pane trigger: what relay typed into a pane, read back in order without sleeping and guessing;
the fixture `tmux` (import it by name into a test module)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

TRIGGER = "relay-test: new mail, call check_inbox"

# A prompt program: shows "> ", reads a line from the terminal (the terminal's own line
# editing: typed text stays on the line until Enter), appends it to the file in argv[1].
PROMPT_PROGRAM = """
import sys
with open(sys.argv[1], "a", buffering=1) as received:
    while True:
        try:
            received.write(input("> ") + "\\n")
        except EOFError:
            break
"""


class Tmux:
    """A private tmux server (-L) whose one pane appends every line it receives to a file:
    `cat` by default, or with prompt=True a program that shows a prompt and reads lines."""

    def __init__(self, base: Path, prompt: bool = False) -> None:
        self.name = f"relay-test-{uuid.uuid4().hex[:10]}"
        self.received = base / "pane.txt"
        self.received.touch()
        self.seen = 0  # lines already returned by lines_after_sentinel
        if prompt:
            program = base / "prompt.py"
            program.write_text(PROMPT_PROGRAM)
            command = f"exec {sys.executable} {program} {self.received}"
        else:
            command = f"exec cat >> {self.received}"
        self("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "160", "-y", "40", command)
        self.socket = self("display-message", "-p", "#{socket_path}").strip()
        self.pane = self("display-message", "-p", "-t", "t", "#{pane_id}").strip()

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.name, *args], check=True, capture_output=True, text=True, timeout=30).stdout

    def lines_after_sentinel(self) -> list[str]:
        """What the pane received since the last call, once a sentinel typed now arrived behind it.

        tmux handles commands for a pane in order, so any trigger sent before the sentinel
        is in the file before it: no sleeping and guessing.
        """
        sentinel = f"sentinel-{uuid.uuid4().hex[:8]}"
        self("send-keys", "-t", self.pane, "-l", sentinel)
        self("send-keys", "-t", self.pane, "Enter")
        for _ in range(3000):
            lines = self.received.read_text().splitlines()
            if sentinel in lines:
                end = lines.index(sentinel)
                new, self.seen = lines[self.seen : end], end + 1
                return new
            time.sleep(0.01)
        raise AssertionError(f"the pane never received {sentinel}: {self.received.read_text()!r}")

    def capture(self) -> str:
        return self("capture-pane", "-p", "-t", self.pane)

    def input_row(self) -> str:
        """The text of the row the cursor is on (tmux drops trailing blanks)."""
        row = self("display-message", "-p", "-t", self.pane, "#{cursor_y}").strip()
        return self("capture-pane", "-p", "-t", self.pane, "-S", row, "-E", row).rstrip("\n")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.name, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux(short_tmp: Path):
    server = Tmux(short_tmp)
    try:
        yield server
    finally:
        server.close()
