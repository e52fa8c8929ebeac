"""Two real Claude Code sessions in one project, each a relay agent's, through a relayd
restart and a session restarted in its pane: each model gets its own agent's mail only,
each message once, and the ended session's inbox nothing.

Claude Code 2.1.332 (tests/agents) runs interactively in two panes against a scripted model
server each (so that what reached which model shows), for the same user (one HOME, one
runtime directory: one sessions directory, one socket directory), with relay's hooks
installed in the project as `relayctl hooks install` writes them and RELAY_AGENT set as
`relayctl up` sets it. The protocol-level version is test_claude_inbox_sessions.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from support.agent_programs import claude_signed_in, program
from support.model_anthropic import conversation, messages_responder, text, texts
from support.relayd_proc import Daemon
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.real_program]

API_KEY = "sk-ant-relay-test-00000000000000000000"
PEER_NOTICE = "Another Claude session sent a message"  # how Claude Code 2.1.332 opens a peer message


def _peer_texts(model: ScriptedModel) -> list[str]:
    """The peer messages each request brought as its newest user text (a later request
    repeats the conversation: only its last turn is new)."""
    found = []
    for request in model.requests:
        users = [t for m in conversation(request.json() or {}) if m.get("role") == "user" for t in texts(m.get("content"))]
        found += [t for t in users[-1:] if t.startswith(PEER_NOTICE)]
    return found


def _subjects(model: ScriptedModel) -> list[str]:
    return [line.removeprefix("subject: ") for t in _peer_texts(model) for line in t.splitlines() if line.startswith("subject: ")]


class Pane:
    """One agent's Claude Code in a pane of its own, against a scripted model of its own."""

    def __init__(self, root: Path, agent: str, relay_env: dict[str, str]) -> None:
        self.agent, self.project = agent, root / "project"
        (root / agent).mkdir()
        self.tmux = Tmux(root / agent, agent)
        self.model = ScriptedModel(messages_responder(lambda body: [text("Noted.")]))
        self.model.__enter__()
        self.env = {k: v for k, v in relay_env.items() if not k.startswith("TMUX")}
        self.env.update({"HOME": str(root / "home"), "ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": self.model.url,
                         "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                         "XDG_RUNTIME_DIR": str(root / "run"), "RELAY_AGENT": agent, "TERM": "xterm-256color", "LANG": "C.UTF-8"})
        self.door_file = Path(relay_env["RELAY_DIR"]) / "agents" / agent / "claude-inbox"

    def start(self, relayctl) -> None:
        # The agent exists before its program starts, as `up` makes it: a SessionStart hook
        # that ran before the register would report for an agent relay does not know.
        relayctl("register", self.agent)
        self.tmux.start([str(program("claude"))], self.project, self.env, size=(120, 40))
        self.tmux.run("set-option", "-t", self.agent, "remain-on-exit", "on")  # the pane stays when its program is killed
        relayctl("register", self.agent, "--notify", f"tmux:{self.tmux.target()}")
        self._ready()

    def _ready(self) -> dict:
        try:
            wait_for(f"{self.agent}'s Claude Code at its empty prompt", lambda: self.tmux.cursor_line() == "❯", timeout=90)
        except AssertionError as missed:
            raise AssertionError(f"{missed}; the screen:\n{self.tmux.screen()}") from None
        pid = int(self.tmux.run("display-message", "-p", "-t", self.agent, "#{pane_pid}"))
        door = wait_for(f"{self.agent}'s inbox reported by relay's hook", lambda: (d := self.door()) and d.get("pid") == pid and d.get("proc_start") and d, timeout=90)
        assert door.get("unusable") is None, door
        return door

    def door(self) -> dict | None:
        return json.loads(self.door_file.read_text()) if self.door_file.exists() else None

    def restart(self) -> dict:
        """Kill the session (its socket and session record stay behind, as after a crash) and
        start Claude Code again in the same pane and directory; the old door."""
        old = self.door()
        os.killpg(int(self.tmux.run("display-message", "-p", "-t", self.agent, "#{pane_pid}")), signal.SIGKILL)
        wait_for("the pane's program gone", lambda: self.tmux.run("display-message", "-p", "-t", self.agent, "#{pane_dead}").strip() == "1")
        self.tmux.run("respawn-pane", "-t", self.agent)
        new = self._ready()
        assert new["socket"] != old["socket"] and os.path.lexists(old["socket"])  # (the old one is there to be written to, wrongly)
        return old

    def close(self) -> None:
        self.tmux.kill()
        self.model.__exit__(None, None, None)


@pytest.fixture
def panes(relayctl, relay_env, short_tmp: Path, store_dir: Path):
    relayctl("init")
    relayctl("register", "sender")
    # Each message announced as it comes (no interrupt interval, relayd.arrival.budget).
    (store_dir / "config.json").write_text(json.dumps({"coordination": {"interrupt_interval": "0s"}}))
    (short_tmp / "project").mkdir()
    (short_tmp / "run").mkdir(mode=0o700)
    claude_signed_in(short_tmp / "home", API_KEY, trusted=short_tmp / "project")
    relayctl("hooks", "install", "--for", "claude", "--project", str(short_tmp / "project"))
    made: dict[str, Pane] = {}
    try:
        for name in ("alpha", "beta"):
            made[name] = Pane(short_tmp, name, relay_env)
        yield made
    finally:
        for pane in made.values():
            pane.close()
        kill_strays(short_tmp / "home")


def _explain(relayctl, pane: Pane, message_id: str, daemon: Daemon) -> str:
    """What relay recorded of a message that did not reach its model, and what its pane shows."""
    return "\n".join([relayctl("track", message_id, agent="sender").stdout, f"door: {pane.door()}",
                      f"peer texts: {_peer_texts(pane.model)}", pane.tmux.screen(), daemon.log()[-4000:]])


def test_two_real_sessions_in_one_project_get_only_their_own_agents_mail_through_restarts(panes, relayctl, relay_env) -> None:
    alpha, beta = panes["alpha"], panes["beta"]

    def both(subject: str) -> None:
        sent = {pane.agent: json.loads(relayctl("--json", "send", pane.agent, f"{subject} for {pane.agent}", agent="sender").stdout)["id"]
                for pane in (alpha, beta)}
        for pane in (alpha, beta):
            wait_for(f"{subject} at {pane.agent}'s model", lambda: f"{subject} for {pane.agent}" in _subjects(pane.model), timeout=90,
                     explain=lambda: _explain(relayctl, pane, sent[pane.agent], daemon))

    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    try:
        for pane in (alpha, beta):
            pane.start(relayctl)
        both("first")
        daemon.stop()
        daemon = Daemon(relay_env, "--retry-interval", "1s").start()  # relayd restarted between sends
        both("second")
        old = alpha.restart()  # a new Claude Code in alpha's pane; the killed one's socket file stays
        both("third")
    finally:
        daemon.kill()
    assert _subjects(alpha.model) == ["first for alpha", "second for alpha", "third for alpha"], _peer_texts(alpha.model)
    assert _subjects(beta.model) == ["first for beta", "second for beta", "third for beta"], _peer_texts(beta.model)
    assert old["pid"] != alpha.door()["pid"] and all(f"relay mail for {pane.agent} " in t for pane in (alpha, beta) for t in _peer_texts(pane.model))
