"""What the installed `relayctl` script loads on its way to a reply from relayd.

An agent runs send/read/heartbeat/status all day, so their start-up is most of what they
cost, and pip installs relayctl as users get it. The script pip installs and the modules
it reaches are checked here by name (python -X importtime), never by the clock: with
relayd up, none of `re` (which pip's own entry-point wrapper imports), `json` (which
imports re), click or msgspec. The interpreter runs with -S so this venv's editable
install, whose path finder imports re at every start, does not hide what relayctl loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relayd import jsonline
from support.paths import ROOT

SCRIPT = Path(sys.executable).parent / "relayctl"  # as pip installed it from pyproject.toml
HEAVY = ("re", "json", "click", "msgspec", "anyio", "structlog", "relayd.store", "hashlib", "_hashlib")  # (_hashlib: OpenSSL, ~4 ms)


def imported(argv: list[str], env: dict[str, str], script: Path = SCRIPT, stdin: str | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the script without site (relay and its dependencies on PYTHONPATH); the process
    and the names of every module it imported."""
    env = dict(env, PYTHONPATH=os.pathsep.join([str(ROOT), sysconfig.get_path("purelib")]))
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", str(script), *argv], env=env, input=stdin, capture_output=True, text=True, timeout=60)
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:") and "|" in line}
    return proc, names


def test_the_probe_sees_what_pips_entry_point_wrapper_imports(relay_env: dict[str, str]) -> None:
    """The same probe on a wrapper of the form pip writes for [project.scripts] entries sees
    its `re`: relayctl is installed as a script of its own (scripts/relayctl) for that."""
    wrapper = Path(relay_env["RELAY_DIR"]).parent / "wrapper"
    wrapper.write_text("import re\nimport sys\nfrom relayctl.fast import main\nif __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n")
    proc, names = imported(["--version"], relay_env, wrapper)
    assert proc.stdout.startswith("relayctl ") and "re" in names


def test_the_installed_relayctl_is_the_projects_own_script() -> None:
    """(pip rewrites the first line, `#!python`, to name the installing interpreter.)"""
    assert SCRIPT.read_text().split("\n", 1)[1] == (ROOT / "scripts" / "relayctl").read_text().split("\n", 1)[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, expect",
    [
        (["--agent", "storm", "send", "inferno", "hello"], "sent "),
        (["--agent", "inferno", "read", "--unread"], "hello"),
        (["--agent", "storm", "heartbeat"], ""),
        (["status"], "relayd: running"),
    ],
    ids=["send", "read", "heartbeat", "status"],
)
def test_with_relayd_up_the_installed_script_loads_no_re_json_click_or_msgspec(daemon, relayctl, relay_env: dict[str, str], argv: list[str], expect: str) -> None:
    relayctl("--agent", "storm", "send", "inferno", "hello")  # read has a message to show, with its time
    relayctl("--agent", "storm", "heartbeat")  # status has an agent seen some time ago
    proc, names = imported(argv, relay_env)
    assert proc.returncode == 0 and expect in proc.stdout, proc.stderr[-2000:]
    assert "relayctl.fast" in names and "relayd.client.full" not in names  # the fast path talked to relayd
    assert sorted(names & set(HEAVY)) == []


@pytest.mark.slow
def test_a_store_of_its_own_beside_a_runtime_directory_finds_its_socket_without_openssl(relayctl, relay_env: dict[str, str], short_tmp: Path) -> None:
    """A store other than ~/.relay with XDG_RUNTIME_DIR set (a team's store, as `up` gives
    its panes) has its socket named by a SHA-256 of its path: computed by the fast path
    without hashlib, whose OpenSSL would cost every command more than the rest of its
    imports, and the same name relay has always given it (clients and a relayd of another
    version still meet)."""
    import hashlib

    from support.relayd_proc import Daemon

    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    store = os.path.abspath(relay_env["RELAY_DIR"])
    socket = runtime / "relay" / f"relayd-{hashlib.sha256(store.encode()).hexdigest()[:12]}.sock"
    relayctl.setup("init", preset="overlord")
    daemon = Daemon({**relay_env, "RELAY_SOCKET": str(socket), "XDG_RUNTIME_DIR": str(runtime)}, log_path=str(short_tmp / "relayd.log")).start()
    try:
        client_env = {k: v for k, v in relay_env.items() if k != "RELAY_SOCKET"} | {"XDG_RUNTIME_DIR": str(runtime)}
        proc, names = imported(["--agent", "storm", "send", "inferno", "hello"], client_env)
    finally:
        daemon.kill()
    assert proc.returncode == 0 and "sent " in proc.stdout, proc.stderr[-2000:]
    assert "relayctl.fast" in names and "relayd.client.full" not in names  # it found relayd at that socket
    assert sorted(names & set(HEAVY)) == []


@pytest.mark.slow
@pytest.mark.parametrize("program, event", [("claude", "UserPromptSubmit"), ("gemini", "AfterAgent"), ("copilot", None)])
def test_with_relayd_up_an_agent_programs_hook_loads_no_re_json_click_msgspec_or_store(daemon, relayctl, relay_env: dict[str, str], program: str, event: str | None) -> None:
    """A program runs `relayctl hook` at every event of every session, and the mail it
    hands over waits for it: it takes the fast path too, and still hands the mail over."""
    relayctl("--agent", "storm", "send", "inferno", "hello")
    argv = ["--agent", "inferno", "hook", program] + (["userPromptSubmitted"] if event is None else [])
    stdin = json.dumps({"hook_event_name": event, "prompt": "hi"} if event else {"prompt": "hi", "timestamp": 1})
    proc, names = imported(argv, relay_env, stdin=stdin)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if program == "gemini":
        assert json.loads(proc.stdout)["decision"] == "block" and "hello" in json.loads(proc.stdout)["reason"]
    else:
        assert "hello" in proc.stdout
    assert "relayctl.fast" in names and "relayd.client.full" not in names and "relayctl.cmd_hook" not in names
    assert sorted(names & set(HEAVY)) == []


# With relayd down, each command runs its operation on the store: msgspec and the store's
# modules are needed, but not what only a rarer path uses: relayd's wire protocol (nobody to
# talk to), what a send --ack owes, the bridge's agents of other hosts, and the pane or
# command triggers with their receipts (the recipient here is told by relay-mcp's channel).
RARE = ("click", "relayd.protocol", "relayd.wire.handshake", "relayd.delivery.owed", "relayd.remote", "relayd.delivery.receipts", "shlex", "subprocess")


@pytest.mark.parametrize(
    "argv, expect, needed",
    [
        (["--agent", "storm", "send", "inferno", "hello"], "sent ", ()),
        (["--agent", "inferno", "read", "--unread"], "hello", ()),
        (["--agent", "storm", "heartbeat"], "", ()),
        (["status"], "relayd: not running", ("relayd.delivery.owed", "relayd.delivery.receipts", "relayd.remote")),  # owed counts, announcements, bridge
    ],
    ids=["send", "read", "heartbeat", "status"],
)
def test_with_relayd_down_the_installed_script_loads_only_what_the_command_needs(relayctl, relay_env: dict[str, str], argv: list[str], expect: str, needed: tuple[str, ...]) -> None:
    relayctl("init", "--preset", "overlord")
    relayctl("--agent", "storm", "send", "inferno", "hello")
    proc, names = imported(argv, relay_env)
    assert proc.returncode == 0 and expect in proc.stdout, proc.stderr[-2000:]
    assert "relayd.client.full" in names and "msgspec" in names  # direct mode: the operation ran here
    assert "inspect" not in names  # (msgspec's typing_extensions loads it, 10-14 ms: relayd.load_msgspec)
    assert sorted(names & set(RARE)) == sorted(needed)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.slow
@given(JSON_VALUES)
def test_the_fast_paths_json_reads_and_writes_what_json_does(value) -> None:
    line = jsonline.dumps(value)
    assert line.isascii() and "\n" not in line  # one protocol line
    assert json.loads(line) == value and jsonline.loads(line.encode() + b"\n") == value
    assert jsonline.loads(json.dumps(value, ensure_ascii=False, indent=1)) == value


@pytest.mark.parametrize("text", [b"", b"{", b'{"a": 1} {}', b"\xff", b"[1,]", b"nul"])
def test_the_fast_paths_json_refuses_what_is_not_one_json_value(text: bytes) -> None:
    with pytest.raises(ValueError):
        jsonline.loads(text)
