"""The sessions the docs show (`$ command` lines, each followed by what it printed) run as
written, in one bash, and print what the docs say, up to what differs in every run: ids,
times, ages. A store under /tmp/relay-* becomes a scratch directory of this test, and NATS's
port 4222 a free one (docs/bridge.md's session starts a real nats-server). Every
other block of commands in README.md and docs/*.md is run here too, or run by the test
named beside it, or listed with the reason it cannot run on a test machine."""

from __future__ import annotations

import contextlib
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

from support.nats_proc import free_port
from support.paths import ROOT


# (file, the heading the session sits under): every session there is run.
SESSIONS = [
    ("README.md", "A first team in two minutes"),
    ("docs/cli.md", "Messages that must arrive"),
    ("docs/cli.md", "Many messages at once: `send --stdin` and the Python bulk API"),
    ("docs/coordination.md", "The path a team follows"),
    ("docs/coordination.md", "Reserving files"),
    ("docs/coordination.md", "Slash commands"),
    ("docs/coordination.md", "Wake"),
    ("docs/coordination.md", "Agent-program hooks"),
    ("docs/coordination.md", "gc"),
    ("docs/ignite.md", "A session, as it ran"),
    ("docs/bridge.md", "A session"),
]

# Blocks of commands no test here runs, each with the reason (keyed by file and how the
# block's first line begins; the rest of the list is further down).
NOT_RUNNABLE = {
    ("docs/coordination.md", '$ relayctl register inferno --notify "tmux:$TMUX_PANE"            # run inside'): "typed inside an agent's tmux or zellij pane ($TMUX_PANE, $ZELLIJ_PANE_ID); tests/arrival/test_notify.py registers real tmux panes",
}

_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```\n", re.M | re.S)
# Ids that differ in every run: ULIDs, and the microsecond stamps in IGNITE file names.
_ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b|(?<!\d)\d{16}(?!\d)")
_VOLATILE = [
    (_ULID, None),  # numbered in order of appearance
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"), "<timestamp>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)?s ago\b"), "<age> ago"),
    (re.compile(r"\bpid \d+"), "pid <pid>"),
]


def sessions(path: str, heading: str) -> list[str]:
    text = (ROOT / path).read_text()
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"{path} has no section {heading!r}"
    found = [block for block in _FENCE.findall(match.group(1)) if block.startswith("$ ") and not _listed(NOT_RUNNABLE, path, block)]
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
    block = re.sub(r"(?<![0-9A-Za-z])4222(?![0-9A-Za-z])", str(free_port()), block)  # NATS's default port
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


@pytest.mark.slow
@pytest.mark.parametrize("path, heading", SESSIONS, ids=[f"{p}: {h}" for p, h in SESSIONS])
def test_a_documented_session_prints_what_the_docs_show(path: str, heading: str, short_tmp: Path) -> None:
    for block in sessions(path, heading):
        results = run_session(block, short_tmp)
        expected = _normalize([line for documented, _, shown, _ in results for line in [f"$ {documented}", *shown]])
        actual = _normalize([line for _, command, _, printed in results for line in [f"$ {command}", *printed]])
        assert _same(expected, actual), "\n".join(difflib.unified_diff(expected, actual, "the docs", "this run", lineterm=""))


@pytest.mark.slow
def test_the_protocol_docs_socat_example_reaches_relayd(relay_env, relayctl) -> None:
    """docs/protocol.md section 7 as written, on a store with no XDG_RUNTIME_DIR and no
    RELAY_SOCKET: finding relayd's socket (then beside the store), one request, its answer."""
    from support.relayd_proc import Daemon

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


# -- every block of commands in the docs is run, or says here why it cannot be ----------------

DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

# Blocks of plain commands (no output shown) run here in bash -e, after a prelude that is
# the state the docs assume at that point (a store with a team, a repository to cd into).
SCRIPTS = {
    ("docs/mcp.md", 'relayctl --agent overlord send inferno --subject "deploy" "ship the hotfix"'): "relayctl init --preset overlord",
    ("docs/coordination.md", "relayctl register inferno --notify hook"): "relayctl init --preset overlord && mkdir project && cd project",
    ("docs/mcp.md", "printf '%s\\n' \\"): "relayctl init --preset overlord",
    ("docs/coordination.md", 'relayctl handoff coder "src/auth/**" "Auth is yours: login works, logout is half done" --thread auth'): (
        "relayctl init && relayctl register inferno && relayctl register coder && relayctl register reviewer && export RELAY_AGENT=inferno && "
        "relayctl reserve 'src/auth/**' && relayctl reserve 'docs/**'"
    ),
    ("docs/cli.md", "# In runner script, before agent starts:"): (
        "relayctl init && relayctl register athena && mkdir repo && "
        'SESSION_NAME=agent-bd-42 AGENT_TYPE=claude MODEL=opus PROMPT_TRUNCATED="fix auth" BEAD_ID=bd-42 '
        'FILES_FROM_PROMPT="src/auth/**" REPO_PATH=$PWD/repo WATCH_TIMEOUT_SECONDS=3600'
    ),
}

# Blocks other tests run as written.
RUN_ELSEWHERE = {
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install . && relayd"): "test_install.py::test_ci_runs_the_readme_commands_as_written (.ci/run runs it)",
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest -n 4"): "test_install.py::test_ci_runs_the_readme_commands_as_written (.ci/run runs it)",
    ("docs/mcp.md", "pip install .                                   # relayctl, relayd, relay-mcp"): "test_claude_code.py::test_the_claude_code_team_walkthrough",
    ("docs/protocol.md", "S=$(relayctl --json status --commands"): "test_doc_sessions.py::test_the_protocol_docs_socat_example_reaches_relayd",
    ("docs/cli.md", "relayctl budget                         # each agent's interrupt interval and loop breaker in force; what is paused"): (
        "test_coordination_budget.py: test_two_agents_answering_each_other_forever_are_stopped_at_the_set_count runs both on a real pause under relayd"),
    ("docs/coordination.md", "$ relayctl track 01M8SVARHG2BYEGGMDKA361XTA"): "test_held.py: test_track_says_why_mail_to_a_pane_in_copy_mode_waits (a held line, with relayd and a real tmux pane)",

    ("docs/mcp.md", "relayctl up --preset overlord     # writes relay-team.toml"): "test_team.py: test_presets_write_a_team_file_that_up_reads, test_up_starts_one_registered_pane_per_agent_and_down_leaves_no_process and test_a_claude_code_pane_started_by_up_gets_past_its_question_and_its_model_gets_the_mail (six real Claude Code panes at once are test_claude_code.py's README walk-through)",
    ("docs/team.md", "$ relayctl up --preset overlord"): "test_team.py (as above)",
    ("docs/coordination.md", "$ relayctl guard install --repo ~/oathkeeper"): "test_guard.py installs, trips and removes the hook in real git repositories",
}

# Blocks that are not commands: usage lines, output, configuration, protocol frames, diagrams.
NOT_COMMANDS = {
    ("docs/architecture.md", "relayctl ──┐"): "a diagram (test_docs.py::test_the_architecture_map_names_only_what_exists checks its paths)",
    ("docs/bridge.md", 0): "a diagram",
    ("docs/cli.md", "AGENTS (3 alive, 0 stale)"): "output",
    ("docs/coordination.md", "--- from overlord at 4s ago"): "output: what a model is handed (tests/arrival/test_for_models.py checks the format)",
    ("docs/cli.md", "MAIL ARRIVAL (1 failing)"): "output (test_receipts.py checks status prints it so)",
    ("docs/cli.md", "relayctl send TO MESSAGE ["): "usage",
    ("docs/cli.md", "relayctl track ID ["): "usage",
    ("docs/cli.md", "01JMHF3X... from alice: deploy at 14:00"): "output",
    ("docs/cli.md", "relayctl read ["): "usage",
    ("docs/cli.md", "relayctl send TO MESSAGE --ack ["): "usage",
    ("docs/cli.md", "relayctl ["): "usage",
    ("docs/cli.md", "relayctl mime build --from A --to B ["): "usage",
    ("docs/cli.md", "relayctl search ["): "usage",
    ("docs/daemon.md", "relayd ["): "usage",
    ("docs/daemon.md", "relayctl subscribe TOPIC... ["): "usage",
}

# Blocks no test here runs as written, and why (few: each needs what a test machine lacks).
NOT_RUNNABLE = {
    **NOT_RUNNABLE,
    ("README.md", "relayctl down --clean                  # a team started"): "removes what relay installed on this machine; test_team.py runs up --trust then down --clean and compares the repository byte for byte, test_hooks_install.py runs uninstall, test_systemd_install.py systemd uninstall",
    ("docs/daemon.md", "relayctl systemd install --now"): "needs a user systemd manager (systemctl --user); test_systemd_install.py runs it against one",
    ("docs/daemon.md", "mkdir -p ~/.config/systemd/user"): "needs a user systemd manager (systemctl --user); test_systemd_units.py verifies the units",
    ("docs/coordination.md", '$ relayctl wake "bd-42 done"'): "needs an OpenClaw gateway; test_gateway_discovery.py runs wake against a real hook server",
    ("docs/coordination.md", "$ relayctl systemd install --now      # writes relayd.* and relay-wake.* with this installation's paths"): "needs a user systemd manager (systemctl --user)",
    ("docs/coordination.md", "$ cp contrib/systemd/relay-wake.path contrib/systemd/relay-wake.service ~/.config/systemd/user/"): "needs a user systemd manager (systemctl --user)",
    ("docs/coordination.md", '$ relayctl register inferno --notify "tmux:$TMUX_PANE"          # e.g. tmux:%3'): "typed inside the agent's tmux pane; test_notify.py registers real tmux panes",
    ("docs/coordination.md", '$ relayctl register strategist --notify "zellij:$ZELLIJ_PANE_ID"'): "typed inside the agent's zellij pane; test_notify.py covers zellij",
    ("docs/daemon.md", "$ relayctl subscribe inbox --for inferno"): "follows until Ctrl-C while a sender in another terminal writes; test_stopping.py and test_daemon.py run subscribe",
    ("docs/mcp.md", 'claude mcp add-json relay "$(relayctl mcp-config --role inferno --server-only)"'): "changes the user's Claude Code configuration; test_mcp_config_programs.py feeds mcp-config to the real programs",
    ("docs/mcp.md", "relayctl init --preset overlord"): "npx fetches the MCP inspector from npm; test_mcp_shim.py drives relay-mcp with the official MCP client",
    ("docs/cli.md", "from relayd.client.full import Client"): "Python against the reader's own store; tests/client/test_pipeline.py makes the same send_many and pipeline calls against a real relayd and with none",
    ("README.md", "npm install -g @anthropic-ai/claude-code@"): "installs the agent programs globally; the suite installs the same versions into tests/agents (test_install.py checks that they are the same)",
    ("docs/web.md", "pip install 'relay-bus[web]'      # Starlette and uvicorn (from a checkout: pip install '.[web]')"): "installs from PyPI and serves until stopped; test_install.py checks the hint, test_web.py runs relayctl web",
}

_ANY_FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n", re.M | re.S)


def _blocks() -> list[tuple[str, str, str, str]]:
    """(file, heading, language, text) of every fenced block in the docs."""
    found = []
    for path in DOCS:
        heading = ""
        for match in re.finditer(r"^(#+ [^\n]*)\n|^```([a-z]*)\n(.*?)^```\n", (ROOT / path).read_text(), re.M | re.S):
            if match.group(1):
                heading = match.group(1).lstrip("#").strip()
            else:
                found.append((path, heading, match.group(2), match.group(3)))
    return found


def _listed(table: dict, path: str, text: str) -> tuple[str, str] | None:
    """The key of `table` naming this block: its file, and how its first line begins."""
    first = text.splitlines()[0] if text else ""
    return next((key for key in table if key[0] == path and isinstance(key[1], str) and first.startswith(key[1])), None)


def test_every_block_of_commands_in_the_docs_is_run_or_says_why_not() -> None:
    unaccounted, used = [], set()
    for path, heading, lang, text in _blocks():
        if lang in ("json", "toml") or text.startswith(("-> ", "<- ")) or ((path, 0) in NOT_COMMANDS and text.startswith(" ")):
            continue  # configuration, protocol frames, a diagram
        keys = [_listed(table, path, text) for table in (NOT_COMMANDS, SCRIPTS, RUN_ELSEWHERE, NOT_RUNNABLE)]
        used.update(key for key in keys if key)
        if any(keys):
            continue
        if (path, heading) in SESSIONS and text.startswith("$ "):
            continue  # test_a_documented_session_prints_what_the_docs_show
        unaccounted.append(f"{path} ({heading}): {text.splitlines()[0]}")
    assert unaccounted == [], "blocks no test runs (run them, or list them here with the reason):\n" + "\n".join(unaccounted)
    listed = {key for table in (NOT_COMMANDS, SCRIPTS, RUN_ELSEWHERE, NOT_RUNNABLE) for key in table if key[1] != 0}
    assert listed - used == set(), "listed blocks the docs no longer have"


@pytest.mark.slow
@pytest.mark.parametrize("path, first", list(SCRIPTS), ids=[f"{p}: {f[:40]}" for p, f in SCRIPTS])
def test_a_documented_block_of_commands_runs(path: str, first: str, short_tmp: Path) -> None:
    [text] = [text for p, _, _, text in _blocks() if p == path and text.startswith(first)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "OVLD_")) and k != "XDG_RUNTIME_DIR"}
    env.update(HOME=str(short_tmp / "home"), RELAY_DIR=str(short_tmp / "store"), PATH=f"{Path(sys.executable).parent}:{env['PATH']}")
    os.makedirs(env["HOME"])
    script = f"set -e -o pipefail\n{SCRIPTS[path, first]}\n{text}"
    log = short_tmp / "block.log"
    with open(log, "w") as out:
        bash = subprocess.Popen(["bash", "-c", script], cwd=short_tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        status = bash.wait(timeout=60)
    finally:  # and whatever the block left running in the background (a heartbeat loop)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bash.pid, signal.SIGKILL)
    printed = log.read_text()
    assert status == 0 and "error:" not in printed, printed
