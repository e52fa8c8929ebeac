"""The sessions the docs show (`$ command` lines, each followed by what it printed) run as
written, in one bash, and print what the docs say, up to what differs in every run: ids,
times, ages. A store under /tmp/relay-* becomes a scratch directory of this test."""

from __future__ import annotations

import difflib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (file, the heading the session sits under): every session there is run.
SESSIONS = [
    ("README.md", "Quickstart (no daemon needed)"),
    ("README.md", "Messages that must arrive"),
    ("README.md", "Coordinating work: reservations, commands, wake-ups, panes, hooks"),
    ("docs/coordination.md", "Reserving files"),
    ("docs/coordination.md", "Slash commands"),
    ("docs/coordination.md", "Wake"),
    ("docs/coordination.md", "Agent-program hooks"),
    ("docs/coordination.md", "gc"),
    ("docs/ignite.md", "A session, as it ran"),
]

# Blocks of commands no test here runs, each with the reason (keyed by file and first line).
NOT_RUNNABLE = {
    ("README.md", '$ relayctl register inferno --notify "tmux:$TMUX_PANE"'): "typed inside an agent's tmux or zellij pane ($TMUX_PANE, $ZELLIJ_PANE_ID); tests/test_notify.py registers real tmux panes",
}

_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```\n", re.M | re.S)
# Ids that differ in every run: ULIDs, and the microsecond stamps in IGNITE file names.
_ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b|(?<!\d)\d{16}(?!\d)")
_VOLATILE = [
    (_ULID, None),  # numbered in order of appearance
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"), "<timestamp>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)?s ago\b"), "<age> ago"),
]


def sessions(path: str, heading: str) -> list[str]:
    text = (ROOT / path).read_text()
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"{path} has no section {heading!r}"
    found = [block for block in _FENCE.findall(match.group(1)) if block.startswith("$ ") and (path, block.splitlines()[0].split("  ")[0].rstrip()) not in NOT_RUNNABLE]
    assert found, f"{path}, {heading}: no session ($ lines) found"
    return found


def _steps(block: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def _same(expected: list[str], actual: list[str]) -> bool:
    """Line by line, where `...` in what the docs show stands for whatever the run printed there."""
    return len(expected) == len(actual) and all(
        re.fullmatch(".*".join(map(re.escape, shown.split("..."))), printed) for shown, printed in zip(expected, actual)
    )


def _normalize(lines: list[str]) -> list[str]:
    ids: dict[str, str] = {}
    out = []
    for line in lines:
        for pattern, replacement in _VOLATILE:
            if replacement is None:
                line = pattern.sub(lambda m: ids.setdefault(m.group(0), f"<id{len(ids) + 1}>"), line)
            else:
                line = pattern.sub(replacement, line)
        out.append(" ".join(line.split()))  # columns shift with the width of a value
    return out


def run_session(block: str, scratch: Path) -> list[tuple[str, str, list[str], list[str]]]:
    """Each step's command as documented and as run, the output the docs show, and the
    output it printed. Steps run
    one by one in one bash; an id the docs' output showed is replaced in later commands by
    the one this run printed in its place, as a reader would."""
    block = re.sub(r"/tmp/(relay-[a-z0-9-]+)", lambda m: str(scratch / m.group(1)), block)
    home = scratch / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "OVLD_")) and k != "XDG_RUNTIME_DIR"}
    env["HOME"] = str(scratch / "home")
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    os.makedirs(home / "oathkeeper", exist_ok=True)  # the reader's repository, which the docs cd into
    marker = "::step-done::"
    bash = subprocess.Popen(["bash"], cwd=scratch, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
    same: dict[str, str] = {}  # an id the docs show -> the one this run printed
    results = []
    try:
        for documented_command, shown in _steps(block):
            command = documented_command
            for documented, actual in same.items():
                command = command.replace(documented, actual)
            # the marker's echo keeps the step's exit status for the next step's `$?`
            bash.stdin.write(f"{command}\n__status=$?; echo '{marker}'; (exit $__status)\n")
            bash.stdin.flush()
            # the docs' example home is /home/dev; this run's is a scratch directory
            printed = [line.replace(str(home), "/home/dev") for line in _until(bash, marker, 60)]
            for documented, actual in zip(_ULID.findall("\n".join(shown)), _ULID.findall("\n".join(printed))):
                same.setdefault(documented, actual)
            results.append((documented_command, command, shown, printed))
    finally:  # the session's group: bash and what a session left running (relayd ... &)
        os.killpg(bash.pid, signal.SIGKILL)
        bash.communicate()
    return results


def _until(bash: subprocess.Popen, marker: str, timeout: float) -> list[str]:
    """The lines bash prints up to the marker (read at the fd level: select sees every byte)."""
    fd = bash.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    end = (marker + "\n").encode()
    while not (data == end or data.endswith(b"\n" + end)):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise AssertionError(f"a step did not finish within {timeout}s; it printed {data!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"bash ended; it printed {data!r}")
        data += chunk
    return data[: -len(end)].decode().splitlines()


@pytest.mark.parametrize("path, heading", SESSIONS, ids=[f"{p}: {h}" for p, h in SESSIONS])
def test_a_documented_session_prints_what_the_docs_show(path: str, heading: str, short_tmp: Path) -> None:
    for block in sessions(path, heading):
        results = run_session(block, short_tmp)
        expected = _normalize([line for documented, _, shown, _ in results for line in [f"$ {documented}", *shown]])
        actual = _normalize([line for _, command, _, printed in results for line in [f"$ {command}", *printed]])
        assert _same(expected, actual), "\n".join(difflib.unified_diff(expected, actual, "the docs", "this run", lineterm=""))


def test_the_protocol_docs_socat_example_reaches_relayd(relay_env, relayctl) -> None:
    """docs/protocol.md section 7 as written, on a store with no XDG_RUNTIME_DIR and no
    RELAY_SOCKET: finding relayd's socket (then beside the store), one request, its answer."""
    from relayd_proc import Daemon

    text = (ROOT / "docs" / "protocol.md").read_text()
    [block] = re.findall(r"^## 7\. Examples with socat\n.*?^```sh\n(.*?)^```", text, re.M | re.S)
    lines = block.splitlines()
    answer_at = next(i for i, line in enumerate(lines) if line.startswith("# {"))
    script = "\n".join(line for line in lines[:answer_at] if line and not line.startswith("#"))
    relayctl("init")
    env = {k: v for k, v in relay_env.items() if k != "RELAY_SOCKET"}
    daemon = Daemon(dict(env, RELAY_SOCKET=str(Path(env["RELAY_DIR"]) / "relayd.sock"))).start()
    try:
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
        proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    finally:
        daemon.kill()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(lines[answer_at][2:])
