"""A channel event is "announced" only on evidence that the client took it (mcp_shim.channel_log,
mcp_shim.follow): for Claude Code, its own log of the server, in the folders and format of the
installed package (2.1.332); a refused channel is a failed announcement that says why, and the
agent falls back to its tmux pane. The follower runs in this process against a real store; the
log lines are written as Claude Code writes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mcp_shim import follow
from mcp_shim.channel_log import ChannelLog, folder_name, utf16_length
from relayd import ops
from relayd.store import Store
from relayd.timefmt import now_iso
from support.waiting import wait_for

SESSION = "5b0c5a3e-7f0e-4a47-9c64-3a9a1d3f0c11"


class ClaudeCodeLog:
    """What Claude Code writes for relay-mcp: its session registry entry and its log of the server."""

    def __init__(self, home: Path, parent: int) -> None:
        self.folder = home / ".cache" / "claude-cli-nodejs" / folder_name(os.readlink(f"/proc/{parent}/cwd")) / "mcp-logs-relay"
        self.folder.mkdir(parents=True)
        sessions = home / ".claude" / "sessions"
        sessions.mkdir(parents=True)
        (sessions / f"{parent}.json").write_text(json.dumps({"pid": parent, "sessionId": SESSION, "cwd": os.getcwd()}))
        self.file = self.folder / (now_iso().replace(":", "-").replace(".", "-") + ".jsonl")

    def write(self, text: str, session: str = SESSION) -> None:
        with open(self.file, "a") as fh:
            fh.write(json.dumps({"debug": text, "timestamp": now_iso(), "sessionId": session, "cwd": os.getcwd()}) + "\n")


@pytest.fixture
def home(short_tmp: Path) -> Path:
    (short_tmp / "home").mkdir()
    return short_tmp / "home"


def test_the_log_says_what_claude_code_decided_and_took_for_this_session_only(home: Path) -> None:
    written = ClaudeCodeLog(home, os.getpid())
    log = ChannelLog({"HOME": str(home)}, parent=os.getpid())
    start = now_iso()
    assert log.verdict(start) is None and log.took(10, start) == 0
    written.write("Channel notifications skipped: channels feature is not currently available", session="another-session")
    written.write("Channel notifications registered")
    written.write("notifications/claude/channel (10 chars)", session="another-session")  # a sibling pane's event
    assert log.verdict(start) == ("registered", None) and log.took(10, start) == 0
    written.write("notifications/claude/channel (10 chars)")
    assert log.took(10, start) == 1 and log.took(11, start) == 0
    assert utf16_length("mail — 📬") == 9  # JavaScript's length: the emoji is two units


def test_a_long_folder_name_is_cut_and_hashed_as_claude_code_does() -> None:
    """The package's own naming function (2.1.332), run by node, names the folder the same."""
    js = ("function Nle(n){let t=0;for(let r=0;r<n.length;r++)t=(t<<5)-t+n.charCodeAt(r)|0;return t}"
          "function l(r){let e=r.replace(/[^a-zA-Z0-9]/g,'-');if(e.length<=200)return e;return`${e.slice(0,200)}-${Math.abs(Nle(r)).toString(36)}`}"
          "for (const p of JSON.parse(process.argv[1])) console.log(l(p))")
    paths = ["/" + "x" * 300, "/home/me/project é 📬/" + "deep/" * 50, "/tmp/rl-abc/project"]
    named = subprocess.run(["node", "-e", js, json.dumps(paths)], capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
    assert [folder_name(p) for p in paths] == named


@pytest.fixture
def agent_store(relayctl, store_dir: Path):
    relayctl.setup("init")
    relayctl.setup("register", name="alice")
    relayctl.setup("register", name="inferno", notify="channel")
    with Store(str(store_dir), fsync=False) as store:
        yield store


def start_follower(store_dir: Path, relay_env: dict[str, str], evidence: ChannelLog) -> tuple[follow.Follower, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    follower = follow.Follower(str(store_dir), relay_env["RELAY_SOCKET"], "inferno", sent.append, evidence)
    follower.start()
    return follower, sent


def announcements(store: Store) -> list[dict]:
    from relayd.delivery.log import newest_first

    return [{"how": r.how, "ok": r.ok, "error": r.error} for r in newest_first(store, "") if r.step == "announced" and r.to == "inferno"]


@pytest.mark.slow
def test_an_event_claude_code_took_is_announced_and_one_it_never_logged_is_not(agent_store: Store, store_dir: Path, relay_env, home: Path, monkeypatch) -> None:
    monkeypatch.setattr(follow, "EVIDENCE_SECONDS", 1.0)
    written = ClaudeCodeLog(home, os.getpid())
    written.write("Channel notifications registered")
    follower, sent = start_follower(store_dir, relay_env, ChannelLog({"HOME": str(home)}, parent=os.getpid()))
    try:
        ops.call(agent_store, "send", {"agent": "alice", "to": ["inferno"], "body": "first"})
        wait_for("the channel event", lambda: sent)
        time.sleep(1.5)  # past the evidence window: Claude Code logged nothing
        assert announcements(agent_store) == []
        ops.call(agent_store, "send", {"agent": "alice", "to": ["inferno"], "body": "second"})
        wait_for("the second channel event", lambda: len(sent) == 2)
        written.write(f"notifications/claude/channel ({utf16_length(sent[1]['content'])} chars)")
        assert wait_for("the announcement", lambda: announcements(agent_store)) == [{"how": "channel", "ok": True, "error": None}]
    finally:
        follower.stop()
        follower.join(5)


@pytest.mark.slow
def test_a_refused_channel_is_a_failed_announcement_and_the_pane_takes_over(agent_store: Store, store_dir: Path, relay_env, home: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMUX", "/tmp/tmux-1000/default,4242,0")
    monkeypatch.setenv("TMUX_PANE", "%7")
    written = ClaudeCodeLog(home, os.getpid())
    follower, sent = start_follower(store_dir, relay_env, ChannelLog({"HOME": str(home)}, parent=os.getpid()))
    try:
        written.write("Channel notifications skipped: channels feature is not currently available")
        [refused] = wait_for("the refusal recorded", lambda: announcements(agent_store))
        assert refused["ok"] is False and "Claude Code refused relay's channel (channels feature is not currently available)" in refused["error"]
        wait_for("the pane's trigger to take over", lambda: ops.call(agent_store, "agents", {"name": "inferno"})[0]["notify"] == "tmux:/tmp/tmux-1000/default:%7")

        message = ops.call(agent_store, "send", {"agent": "alice", "to": ["inferno"], "body": "are you there?"})["messages"][0]
        assert sent == []  # the follower pushes no more: the pane's trigger is the mechanism now
        # what the sender's track says once the mail waits (held_after 0: at once)
        (store_dir / "config.json").write_text(json.dumps({"delivery": {"held_after": "0s"}}))
        [way] = ops.call(agent_store, "track", {"id": message["id"]})["recipients"]
        assert "announced" not in way or way["announced"]["how"] != "channel"
        assert way["held"]["why"].startswith("inferno: Claude Code refused relay's channel") or "tmux" in way["held"]["why"]
    finally:
        follower.stop()
        follower.join(5)
