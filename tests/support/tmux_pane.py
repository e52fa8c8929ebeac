"""A program in a pane of a private tmux server, and the cleanup an agent program needs.

`Tmux` is how the tests that drive a real agent program interactively (hook_sessions.py,
test_claude_code.py, test_pane_draft_claude.py) start it, read its screen and type into
it; `kill_group` and `kill_strays` end what such a program leaves behind.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path


class Tmux:
    """A real tmux server on its own socket (no user configuration read), running one
    program in one pane, read and typed into the way a person would (tests wait for what
    the screen says, not for time)."""

    def __init__(self, root: Path, session: str = "agent") -> None:
        self.socket = str(root / "tmux.sock")
        self.session = session

    def run(self, *args: str) -> str:
        """A tmux command against this server; its output."""
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=30).stdout

    def start(self, argv: list[str], cwd: Path, env: dict[str, str], size: tuple[int, int] = (160, 45)) -> None:
        """Run argv in the pane with exactly `env` (nothing inherited from the test)."""
        command = "exec env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + shlex.join(argv)
        self.run("-f", "/dev/null", "new-session", "-d", "-s", self.session, "-x", str(size[0]), "-y", str(size[1]), "-c", str(cwd), command)

    def target(self) -> str:
        """The pane as a relay notify target names it: SOCKET:PANE."""
        return self.run("display-message", "-p", "-t", self.session, "#{socket_path}:#{pane_id}").strip()

    def screen(self, history: int = 0) -> str:
        """What the pane shows; with `history`, that many lines above it too, wrapped lines joined."""
        scroll = ["-J", "-S", f"-{history}"] if history else []
        return self.run("capture-pane", "-p", *scroll, "-t", self.session)

    def cursor_line(self) -> str:
        """The line the cursor is on (a TUI's input box), trimmed."""
        row = self.run("display-message", "-p", "-t", self.session, "#{cursor_y}").strip()
        return self.run("capture-pane", "-p", "-t", self.session, "-S", row, "-E", row).replace("\xa0", " ").strip()

    def wait_for(self, text: str, timeout: float = 60, settle: float = 0) -> str:
        """The screen once it shows `text` (and, with `settle`, once the screen from `text`
        down has stopped changing for that long: a dialog drawn before its keyboard handler
        is ready drops keys). Above `text` may change meanwhile: Claude Code blinks the
        bullet of the tool call its permission question is about, so a whole screen that
        stands still for 1 s came only by chance (once after 88 s)."""
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            screen = self.screen()
            shown = screen[screen.rfind(text):] if text in screen else None
            if shown != last:
                last, since = shown, time.monotonic()
            if shown is not None and time.monotonic() - since >= settle:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"the pane never showed {text!r}; it shows:\n{self.screen()}")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def literal(self, text: str) -> None:
        """Type `text` as it is (no key names)."""
        self.run("send-keys", "-t", self.session, "-l", text)

    def type_line(self, text: str, then_shows: str) -> None:
        """Type `text`, wait until the input box shows it and stands still, then press Enter
        on its own, as a person does: a TUI takes text and Enter arriving together as a
        paste, and Gemini CLI takes an Enter within 30 ms of the last key as a newline (an
        Enter sent the moment the text showed stayed in its box, three times under -n 3)."""
        self.literal(text)
        self.wait_for(then_shows, timeout=20, settle=0.2)
        self.keys("Enter")

    def kill(self) -> None:
        """End the pane's program with everything it started, then the server. SIGKILL to
        its process group: Gemini CLI ignores SIGHUP and SIGTERM, so closing the pane alone
        leaves it running."""
        pane = self.run("display-message", "-p", "-t", self.session, "#{pane_pid}").strip()
        if pane.isdigit():
            try:
                os.killpg(int(pane), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.run("kill-server")


def kill_group(proc: subprocess.Popen) -> None:
    """The program and anything it started in its session (MCP servers, hooks, helpers)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def kill_strays(home: Path) -> None:
    """Processes an agent program left running on its own (the interactive `codex` starts a
    background app-server that detaches from the terminal): every process whose
    environment has this test's scratch HOME, which only this test's programs have."""
    marker = b"HOME=" + os.fsencode(str(home)) + b"\0"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = b"\0" + fh.read()
        except OSError:
            continue
        if b"\0" + marker in environ or environ.endswith(b"\0" + marker[:-1]):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
