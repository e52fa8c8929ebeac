"""Bad input through the real CLI: one `error:` line, exit 1 or 2, and nothing written.

Every case runs `relayctl` as a process against a store with three agents and some mail,
and compares a snapshot of the whole store tree (and of any symlink target planted
outside it) before and after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from relayd import ops
from relayd.store import Store

Snapshot = dict[str, tuple]


def snapshot(root: Path) -> Snapshot:
    """Every entry under root with its type, mode and content; symlinks are not followed."""
    seen: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[rel] = ("dir", st.st_mode)
            else:
                seen[rel] = ("file", st.st_mode, path.read_bytes())
    return seen


@pytest.fixture
def team(relayctl, store_dir: Path):
    """alice, bob and carol, one message each way between alice and bob, read once.

    Set up in-process (the same store functions the CLI calls) to keep the suite quick."""
    with Store(str(store_dir)) as store:
        ops.call(store, "init", {})
        for name in ("alice", "bob", "carol"):
            ops.call(store, "register", {"name": name})
        ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "hello bob"})
        ops.call(store, "send", {"agent": "bob", "to": ["alice"], "body": "hello alice"})
        for name in ("alice", "bob", "carol"):
            ops.call(store, "read", {"agent": name, "unread": True, "mark_read": True})
    return relayctl


def assert_refused(proc, statuses=(1, 2)) -> str:
    assert proc.returncode in statuses, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


LONG = "a" * 65

BAD_COMMANDS = {
    "register ../x": (["register", "../x"], None, 1),
    "register A B": (["register", "A B"], None, 1),
    "register empty": (["register", ""], None, 1),
    "register 65 chars": (["register", LONG], None, 1),
    "register x/y": (["register", "x/y"], None, 1),
    "register .hidden": (["register", ".hidden"], None, 1),
    "send to ../x": (["send", "../x", "hi"], "alice", 1),
    "send to A B": (["send", "A B", "hi"], "alice", 1),
    "send to 65 chars": (["send", LONG, "hi"], "alice", 1),
    "send from ../x": (["send", "bob", "hi"], "../x", 1),
    "send to unknown": (["send", "zed", "hi"], "alice", 1),
    "send to one known one unknown": (["send", "bob,zed", "hi"], "alice", 1),
    "send empty message": (["send", "bob", "   "], "alice", 2),
    "send non-UTF-8 message": (["send", "bob", os.fsdecode(b"bad \xff byte")], "alice", 2),
    "send non-UTF-8 subject": (["send", "bob", "hi", "--subject", os.fsdecode(b"\xfe")], "alice", 2),
    "register non-UTF-8 name": (["register", os.fsdecode(b"\xff")], None, 2),
    "send without recipient": (["send"], "alice", 2),
    "send without identity": (["send", "bob", "hi"], None, 2),
    "send bad priority": (["send", "bob", "hi", "--priority", "bad"], "alice", 2),
    "send empty priority": (["send", "bob", "hi", "--priority", ""], "alice", 2),
    "send numeric priority": (["send", "bob", "hi", "--priority", "5"], "alice", 2),
    "broadcast with recipient": (["send", "--broadcast", "bob", "hi"], "alice", 2),
    "read negative last": (["read", "--last", "-1"], "bob", 2),
    "read bad since": (["read", "--since", "yesterday-ish"], "bob", 2),
    "read from ../x": (["read", "--from", "../x"], "bob", 1),
    "read as unknown": (["read"], "zed", 1),
    "heartbeat unknown": (["heartbeat"], "zed", 1),
    "set-status unknown": (["set-status", "busy"], "zed", 1),
    "status bad stale": (["status", "--stale", "soon"], None, 2),
    "register bad notify": (["register", "dave", "--notify", "pigeon:1"], None, 2),
    "init unknown preset": (["init", "--preset", "nope"], None, 2),
    "unknown command": (["sendd", "bob", "hi"], "alice", 2),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_COMMANDS), ids=list(BAD_COMMANDS))
def test_bad_input_is_one_error_line_and_writes_nothing(team, store_dir: Path, case: str) -> None:
    args, agent, status = BAD_COMMANDS[case]
    before = snapshot(store_dir)
    proc = team(*args, agent=agent, check=False)
    assert_refused(proc, (status,))
    assert snapshot(store_dir) == before


def test_non_utf8_message_on_stdin_is_refused(team, relay_env: dict[str, str], store_dir: Path) -> None:
    before = snapshot(store_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "relayctl", "--agent", "alice", "send", "bob", "-"],
        env=relay_env,
        input=b"caf\xe9 latin-1",
        capture_output=True,
        timeout=60,
    )
    line = assert_refused(subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()), (2,))
    assert "UTF-8" in line
    assert snapshot(store_dir) == before


def test_unknown_recipient_error_lists_the_known_agents(team) -> None:
    line = assert_refused(team("send", "zed", "hi", agent="alice", check=False), (1,))
    assert "zed" in line
    for name in ("alice", "bob", "carol"):
        assert name in line


def _plant(path: Path, target: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)


def _outside_file(short_tmp: Path) -> Path:
    target = short_tmp / "outside.txt"
    target.write_bytes(b"precious, not relay's\n")
    return target


def _outside_agent_dir(short_tmp: Path) -> Path:
    """A directory that looks like an agent, so only refusing the symlink protects it."""
    target = short_tmp / "outside-agent"
    target.mkdir()
    (target / "meta.json").write_text('{"name":"bob","registered_at":"2026-01-01T00:00:00.000Z"}\n')
    (target / "inbox.jsonl").write_bytes(b"")
    (target / "inbox.lock").write_bytes(b"")
    (target / "cursor").write_text('{"offset":0}\n')
    return target


SYMLINK_CASES: dict[str, tuple[str, Callable[[Path], Path], list[str], str | None]] = {
    # name: (entry replaced by a symlink, make the target, command, --agent)
    "inbox symlink, send": ("agents/bob/inbox.jsonl", _outside_file, ["send", "bob", "hi"], "alice"),
    "inbox symlink, read": ("agents/bob/inbox.jsonl", _outside_file, ["read", "--unread", "--mark-read"], "bob"),
    "inbox symlink, broadcast": ("agents/bob/inbox.jsonl", _outside_file, ["send", "--broadcast", "hi"], "carol"),
    "agent dir symlink, send": ("agents/bob", _outside_agent_dir, ["send", "bob", "hi"], "alice"),
    "agent dir symlink, register": ("agents/bob", _outside_agent_dir, ["register", "bob", "--task", "x"], None),
    "agent dir symlink, read": ("agents/bob", _outside_agent_dir, ["read", "--mark-read"], "bob"),
    "agent dir symlink, heartbeat": ("agents/bob", _outside_agent_dir, ["heartbeat"], "bob"),
    "meta symlink, register": ("agents/bob/meta.json", _outside_file, ["register", "bob", "--task", "x"], None),
    "meta symlink, set-status": ("agents/bob/meta.json", _outside_file, ["set-status", "busy"], "bob"),
    "cursor symlink, read": ("agents/bob/cursor", _outside_file, ["read", "--unread", "--mark-read"], "bob"),
    "lock symlink, send": ("agents/bob/inbox.lock", _outside_file, ["send", "bob", "hi"], "alice"),
    "agents dir symlink, send": ("agents", _outside_agent_dir, ["send", "bob", "hi"], "alice"),
    "event log symlink, send": ("events.jsonl", _outside_file, ["send", "bob", "hi"], "alice"),
    "event log symlink, register": ("events.jsonl", _outside_file, ["register", "dave"], None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SYMLINK_CASES), ids=list(SYMLINK_CASES))
def test_symlink_planted_in_store_is_refused_not_followed(team, store_dir: Path, short_tmp: Path, case: str) -> None:
    entry, make_target, args, agent = SYMLINK_CASES[case]
    target = make_target(short_tmp)
    _plant(store_dir / entry, target)
    before, target_before = snapshot(store_dir), snapshot(short_tmp / "outside-agent") if target.is_dir() else target.read_bytes()
    proc = team(*args, agent=agent, check=False)
    assert_refused(proc, (1,))
    assert snapshot(store_dir) == before
    assert (snapshot(target) if target.is_dir() else target.read_bytes()) == target_before
    assert (store_dir / entry).is_symlink()


@pytest.fixture
def read_only_store(team, store_dir: Path):
    """The store on a read-only bind mount (needs root; a non-root run uses file modes)."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", str(store_dir), str(store_dir)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(store_dir)], check=True)
        try:
            yield store_dir
        finally:
            subprocess.run(["umount", str(store_dir)], check=True)
    else:
        modes = {p: p.stat().st_mode for p in [store_dir, *store_dir.rglob("*")] if p.is_dir()}
        for path in modes:
            path.chmod(0o500)
        try:
            yield store_dir
        finally:
            for path, mode in modes.items():
                path.chmod(mode)


@pytest.mark.slow
def test_reset_on_a_read_only_store_is_one_error_and_removes_nothing(read_only_store: Path, relayctl) -> None:
    before = snapshot(read_only_store)
    proc = relayctl("reset", "--yes", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "Read-only" in proc.stderr or "denied" in proc.stderr
    assert snapshot(read_only_store) == before


def test_mcp_config_out_dir_that_cannot_be_made_is_a_usage_error(relayctl, short_tmp: Path) -> None:
    blocker = short_tmp / "a-file"
    blocker.write_text("")
    proc = relayctl("mcp-config", "--preset", "overlord", "--out-dir", str(blocker / "configs"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot write to --out-dir") and proc.stderr.count("\n") == 1


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["status"], ["read"], ["reservations"], ["cmd", "list"]])
def test_looking_at_a_store_that_does_not_exist_does_not_create_it(relayctl, store_dir: Path, argv: list[str]) -> None:
    assert not store_dir.exists()
    proc = relayctl(*argv, agent="alice", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: no relay store at") and proc.stderr.count("\n") == 1
    assert not store_dir.exists()
