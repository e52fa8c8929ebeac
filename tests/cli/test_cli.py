"""What people and scripts rely on from `relayctl` in direct mode, through the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from relayctl.cli import COMMANDS

MESSAGE_FIELDS = {"id", "ts", "from", "to", "subject", "body", "thread", "priority", "tags", "type", "ack", "attempt"}


@pytest.fixture
def trio(relayctl):
    relayctl.setup("init")
    relayctl.setup("register", name="alice", program="claude-code", task="parser")
    relayctl.setup("register", name="bob", task="auth refactor")
    relayctl.setup("register", name="carol")
    return relayctl


def inbox_lines(store_dir: Path, name: str) -> list[dict]:
    raw = (store_dir / "agents" / name / "inbox.jsonl").read_text()
    return [json.loads(line) for line in raw.splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_every_help_has_an_examples_block(relayctl, command: str | None) -> None:
    proc = relayctl(*([command] if command else []), "--help")
    assert "Traceback" not in proc.stderr
    assert re.search(r"^\s*Examples:\n( {4,}\S.*\n)+", proc.stdout, re.M), proc.stdout


@pytest.mark.slow
def test_send_json_prints_the_stored_message(trio, store_dir: Path) -> None:
    proc = trio("--json", "send", "bob", "Bead bd-42 complete.", "--thread", "bd-42", "--priority", "high", "--tag", "done", "--tag", "bd-42", agent="alice")
    sent = json.loads(proc.stdout)
    assert set(sent) == MESSAGE_FIELDS
    assert sent["from"] == "alice" and sent["to"] == "bob" and sent["thread"] == "bd-42"
    assert sent["priority"] == "high" and sent["tags"] == ["done", "bd-42"]
    assert re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", sent["id"])
    assert inbox_lines(store_dir, "bob") == [sent]


@pytest.mark.slow
def test_read_json_is_an_array_of_messages_with_store_field_names(trio, store_dir: Path) -> None:
    trio("send", "bob", "one", agent="alice")
    trio("send", "bob", "two", "--type", "task_assignment", "--priority", "critical", agent="carol")
    messages = json.loads(trio("--json", "read", agent="bob").stdout)
    assert isinstance(messages, list) and len(messages) == 2
    assert all(set(m) == MESSAGE_FIELDS for m in messages)
    assert messages == inbox_lines(store_dir, "bob")
    assert messages[1]["type"] == "task_assignment" and messages[1]["priority"] == "urgent"


@pytest.mark.slow
def test_json_and_quiet_also_work_after_the_subcommand(trio, store_dir: Path) -> None:
    trio("send", "bob", "one", agent="alice")
    assert json.loads(trio("read", "--json", agent="bob").stdout) == json.loads(trio("--json", "read", agent="bob").stdout)
    assert json.loads(trio("cmd", "list", "--json").stdout) == []
    assert trio("send", "bob", "two", "--quiet", agent="alice").stdout == ""


@pytest.mark.slow
def test_subject_defaults_to_the_first_80_characters(trio) -> None:
    body = "".join(chr(ord("a") + n % 26) for n in range(200))
    sent = json.loads(trio("--json", "send", "bob", body, agent="alice").stdout)
    assert sent["subject"] == body[:79] + "…" and sent["body"] == body  # one long word: cut in it
    words = "Deploy  window\nopens at 14:00; " + "please finish the migration of the auth tables before then " * 3
    sent = json.loads(trio("--json", "send", "bob", words, agent="alice").stdout)
    assert sent["subject"] == "Deploy window opens at 14:00; please finish the migration of the auth tables…"
    assert len(sent["subject"]) <= 80 and sent["body"] == words
    short = json.loads(trio("--json", "send", "bob", "all done", agent="alice").stdout)
    assert short["subject"] == "all done"
    chosen = json.loads(trio("--json", "send", "bob", body, "--subject", "short", agent="alice").stdout)
    assert chosen["subject"] == "short"


@pytest.mark.slow
def test_message_from_stdin(trio) -> None:
    sent = json.loads(trio("--json", "send", "bob", "-", "--subject", "diff", agent="alice", input="line 1\nline 2\n").stdout)
    assert sent["body"] == "line 1\nline 2\n" and sent["subject"] == "diff"


@pytest.mark.slow
def test_broadcast_reaches_everyone_but_the_sender(trio, store_dir: Path) -> None:
    proc = trio("--json", "send", "--broadcast", "rebasing main", "--priority", "urgent", agent="carol")
    sent = json.loads(proc.stdout)
    assert sorted(m["to"] for m in sent) == ["alice", "bob"]
    assert inbox_lines(store_dir, "carol") == []
    for name in ("alice", "bob"):
        (line,) = inbox_lines(store_dir, name)
        assert line["body"] == "rebasing main" and line["priority"] == "urgent" and line["from"] == "carol"


@pytest.mark.slow
def test_unread_mark_read_then_nothing_unread(trio) -> None:
    for n in range(3):
        trio("send", "bob", f"note {n}", agent="alice")
    first = trio("read", "--unread", "--mark-read", agent="bob").stdout
    assert all(f"note {n}" in first for n in range(3))
    assert trio("read", "--unread", agent="bob").stdout.strip() == "no unread messages"
    assert json.loads(trio("--json", "read", "--unread", agent="bob").stdout) == []
    trio("send", "bob", "note 3", agent="carol")
    again = json.loads(trio("--json", "read", "--unread", "--mark-read", agent="bob").stdout)
    assert [m["body"] for m in again] == ["note 3"]
    # Reading never deletes: the whole history is still there.
    assert [m["body"] for m in json.loads(trio("--json", "read", agent="bob").stdout)] == [f"note {n}" for n in range(4)]


@pytest.mark.slow
def test_unread_with_last_leaves_the_rest_unread(trio) -> None:
    for n in range(5):
        trio("send", "bob", f"m{n}", agent="alice")
    shown = json.loads(trio("--json", "read", "--unread", "--last", "2", "--mark-read", agent="bob").stdout)
    assert [m["body"] for m in shown] == ["m0", "m1"]
    rest = json.loads(trio("--json", "read", "--unread", "--mark-read", agent="bob").stdout)
    assert [m["body"] for m in rest] == ["m2", "m3", "m4"]


@pytest.mark.slow
def test_last_shows_the_newest_in_order(trio) -> None:
    for n in range(5):
        trio("send", "bob", f"m{n}", agent="alice")
    shown = json.loads(trio("--json", "read", "--last", "2", agent="bob").stdout)
    assert [m["body"] for m in shown] == ["m3", "m4"]
    everything = json.loads(trio("--json", "read", "--last", "0", agent="bob").stdout)
    assert len(everything) == 5


@pytest.mark.slow
def test_filters_from_and_thread(trio) -> None:
    trio("send", "bob", "a1", "--thread", "bd-1", agent="alice")
    trio("send", "bob", "c1", "--thread", "bd-1", agent="carol")
    trio("send", "bob", "a2", "--thread", "bd-2", agent="alice")
    assert [m["body"] for m in json.loads(trio("--json", "read", "--from", "alice", agent="bob").stdout)] == ["a1", "a2"]
    assert [m["body"] for m in json.loads(trio("--json", "read", "--thread", "bd-1", agent="bob").stdout)] == ["a1", "c1"]


@pytest.mark.slow
def test_since_takes_a_duration_or_a_date(trio, store_dir: Path) -> None:
    # Mail from long ago, written as a store line (the format is the interface).
    old = {
        "id": "01HQ0000000000000000000000",
        "ts": "2024-02-16T06:08:00.000Z",
        "from": "alice",
        "to": "bob",
        "subject": "old news",
        "body": "old news",
        "thread": None,
        "priority": "normal",
        "tags": [],
        "type": None,
        "ack": False,
    }
    with open(store_dir / "agents" / "bob" / "inbox.jsonl", "a") as fh:
        fh.write(json.dumps(old) + "\n")
    trio("send", "bob", "fresh", agent="alice")
    assert [m["body"] for m in json.loads(trio("--json", "read", "--since", "1h", agent="bob").stdout)] == ["fresh"]
    assert [m["body"] for m in json.loads(trio("--json", "read", "--since", "2024-01-01", agent="bob").stdout)] == ["old news", "fresh"]
    assert [m["body"] for m in json.loads(trio("--json", "read", "--since", "2024-03-01", agent="bob").stdout)] == ["fresh"]
    # A time with an offset is the same moment in UTC: 08:00+02:00 is 06:00Z, just before 06:08Z.
    assert [m["body"] for m in json.loads(trio("--json", "read", "--since", "2024-02-16T08:00:00+02:00", agent="bob").stdout)] == ["old news", "fresh"]
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%d")
    assert json.loads(trio("--json", "read", "--since", tomorrow, agent="bob").stdout) == []


@pytest.mark.slow
def test_human_read_output(trio) -> None:
    trio("send", "bob", "Need review", "--thread", "bd-42", "--priority", "high", agent="alice")
    out = trio("read", agent="bob").stdout
    assert re.match(r"^[0-9A-Z]{26}  \d{4}-\d\d-\d\d \d\d:\d\d UTC  alice → bob  \[high\] Need review  \(thread bd-42\)$", out.splitlines()[0])


@pytest.mark.slow
def test_status_reads_like_the_seed_example(trio, store_dir: Path) -> None:
    # carol went quiet 47 minutes ago
    stale = (datetime.now(timezone.utc) - timedelta(minutes=47)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    (store_dir / "agents" / "carol" / "heartbeat").write_text(stale + "\n")
    out = trio("status").stdout
    lines = out.splitlines()
    assert "AGENTS (2 alive, 1 stale)" in lines
    assert re.search(r"^  alice +alive +last heartbeat: \d+s ago +task: parser$", out, re.M), out
    assert re.search(r"^  bob +alive +last heartbeat: \d+s ago +task: auth refactor$", out, re.M), out
    assert re.search(r"^  carol +STALE +last heartbeat: 47m ago +task: \(unknown\)$", out, re.M), out
    assert any(line.startswith("RESERVATIONS (") for line in lines)
    assert any(line.startswith("PENDING COMMANDS (") for line in lines)
    assert "AGENTS (3 alive, 0 stale)" in trio("status", "--agents", "--stale", "1h").stdout

    data = json.loads(trio("--json", "status").stdout)
    states = {a["name"]: a for a in data["agents"]}
    assert states["carol"]["alive"] is False and states["alice"]["alive"] is True
    assert states["bob"]["task"] == "auth refactor"


@pytest.mark.slow
def test_heartbeat_and_set_status_show_in_status(trio) -> None:
    trio("heartbeat", "--task", "writing tests", agent="carol")
    trio("set-status", "blocked", "--task", "waiting for review", agent="bob")
    states = {a["name"]: a for a in json.loads(trio("--json", "status").stdout)["agents"]}
    assert states["carol"]["task"] == "writing tests"
    assert states["bob"]["status"] == "blocked" and states["bob"]["task"] == "waiting for review"


@pytest.mark.slow
def test_identity_and_store_from_the_environment(relayctl, relay_env: dict[str, str], short_tmp: Path) -> None:
    other = short_tmp / "other-store"
    env = {k: v for k, v in relay_env.items() if k != "RELAY_DIR"}
    env["OVLD_RELAY_DIR"] = str(other)
    env["OVLD_ROLE"] = "inferno"
    run = lambda *a: subprocess.run([sys.executable, "-m", "relayctl", *a], env=env, capture_output=True, text=True, timeout=60)  # noqa: E731
    assert run("init", "--preset", "overlord").returncode == 0
    assert sorted(p.name for p in (other / "agents").iterdir()) == sorted(["overlord", "strategist", "inferno", "glacier", "shadow", "storm"])
    proc = run("--json", "send", "glacier", "from the environment")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["from"] == "inferno"
    env["RELAY_AGENT"] = "storm"  # the pane's OVLD_ROLE wins over a shell-wide RELAY_AGENT
    assert json.loads(run("--json", "send", "glacier", "again").stdout)["from"] == "inferno"


@pytest.mark.slow
@pytest.mark.parametrize("present", [("OVLD_ROLE", "RELAY_AGENT", "BBS_AGENT_ROLE"), ("RELAY_AGENT", "BBS_AGENT_ROLE"), ("BBS_AGENT_ROLE",)])
def test_relayctl_and_relay_mcp_take_the_same_agent_from_the_environment(relayctl, relay_env: dict[str, str], present: tuple[str, ...]) -> None:
    """One pane, one agent: relayctl's fast path, its full CLI and relay-mcp read the
    identity variables in one order (relayd.layout.AGENT_VARIABLES)."""
    from mcp_shim.identity import from_env

    relayctl("init", "--preset", "overlord")
    names = {"OVLD_ROLE": "inferno", "RELAY_AGENT": "storm", "BBS_AGENT_ROLE": "shadow"}
    env = dict(relay_env, **{key: names[key] for key in present})
    expected = names[present[0]]
    run = lambda *a: subprocess.run([sys.executable, "-m", "relayctl", *a], env=env, capture_output=True, text=True, timeout=60)  # noqa: E731
    sent = run("--json", "send", "glacier", "who am I?")  # the fast path
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["from"] == expected
    status = run("--json", "set-status", "checking")  # the full click CLI
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["name"] == expected
    assert from_env(env).role == expected


def test_init_ignite_preset(relayctl, store_dir: Path) -> None:
    data = json.loads(relayctl("--json", "init", "--preset", "ignite").stdout)
    assert {"leader", "strategist", "architect", "evaluator", "coordinator", "innovator"} <= set(data["agents"])


@pytest.mark.slow
def test_store_permissions_hold_even_with_a_permissive_umask(relay_env: dict[str, str], store_dir: Path) -> None:
    def run(*args: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "relayctl", *args], env=relay_env, preexec_fn=lambda: os.umask(0), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr

    run("init")
    for name in ("alice", "bob"):
        run("register", name)
    run("--agent", "alice", "send", "bob", "hi")
    run("--agent", "bob", "read", "--unread", "--mark-read")
    run("--agent", "bob", "heartbeat")
    assert store_dir.stat().st_mode & 0o777 == 0o700
    for path in store_dir.rglob("*"):
        if path.is_symlink():
            continue
        expected = 0o700 if path.is_dir() else 0o600
        assert path.stat().st_mode & 0o777 == expected, path


@pytest.mark.slow
def test_reset_refuses_without_yes_when_stdin_is_not_a_terminal(trio, relay_env: dict[str, str], store_dir: Path) -> None:
    trio("send", "bob", "keep me", agent="alice")
    proc = subprocess.run([sys.executable, "-m", "relayctl", "reset"], env=relay_env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1
    assert inbox_lines(store_dir, "bob")[0]["body"] == "keep me"
    trio("reset", "--yes")
    assert json.loads(trio("--json", "status").stdout)["agents"] == []
    assert (store_dir / "agents").is_dir()


def test_version(relayctl) -> None:
    data = json.loads(relayctl("--json", "version").stdout)
    assert data["store_format"] == 1 and data["version"]
    assert relayctl("--version").stdout.startswith("relayctl ")


LEAN_PROBE = """
import sys
from relayctl.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("anyio", "structlog"))
print("HEAVY:" + ",".join(heavy), file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--agent", "alice", "send", "bob", "hi"],
        ["--agent", "bob", "read", "--unread", "--mark-read"],
        ["status"],
        ["--agent", "alice", "heartbeat"],
        ["register", "dave"],
    ],
    ids=["help", "send", "read", "status", "heartbeat", "register"],
)
def test_relayctl_never_imports_anyio_or_structlog(trio, relay_env: dict[str, str], argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", LEAN_PROBE, *argv], env=relay_env, capture_output=True, text=True, timeout=60)
    heavy = [line for line in proc.stderr.splitlines() if line.startswith("HEAVY:")]
    assert heavy == ["HEAVY:"], proc.stderr


@pytest.mark.slow
def test_a_corrupt_line_is_skipped_and_reported_and_later_mail_still_arrives(trio, store_dir: Path) -> None:
    trio("send", "bob", "before", agent="alice")
    inbox = store_dir / "agents" / "bob" / "inbox.jsonl"
    offset = inbox.stat().st_size
    with open(inbox, "ab") as fh:
        fh.write(b'{"id": "garbage", "this is not a message\n')
    trio("send", "bob", "after", agent="carol")
    proc = trio("--json", "read", "--unread", "--mark-read", agent="bob")
    assert [m["body"] for m in json.loads(proc.stdout)] == ["before", "after"]
    assert proc.stderr.strip() == f"warning: skipped a corrupt line in inbox.jsonl at byte {offset}"
    assert json.loads(trio("--json", "read", "--unread", agent="bob").stdout) == []


@pytest.mark.parametrize("typed, meant", [("sned", "'send'"), ("stauts", "'status'"), ("hooks unistall", "'uninstall'")])
def test_a_typo_for_a_command_is_answered_with_the_command_meant(relayctl, typed: str, meant: str) -> None:
    proc = relayctl(*typed.split(), check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: No such command '{typed.split()[-1]}'.") and "Did you mean" in proc.stderr and meant in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("argv", [["--json", "sned", "bob"], ["--json"], ["--json", "hooks", "unistall"], ["send", "bob", "hi", "--jsn", "--json"], ["--json", "--agnet", "x", "status"]])
def test_under_json_every_usage_error_is_one_json_document(relayctl, argv: list[str]) -> None:
    """docs/cli.md: with --json, stdout gets the refusal as JSON, whatever the error was;
    also when click refuses the command line before any command has run."""
    proc = relayctl(*argv, check=False)
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid_argument" and f"error: {error['message']}\n" == proc.stderr


def test_json_after_a_double_dash_is_text_not_the_flag(relayctl) -> None:
    proc = relayctl("--agnet", "x", "send", "--", "--json", check=False)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.startswith("error: No such option '--agnet'")
