"""A round trip between the real Claude Code and the real Codex of one team, in real tmux,
with no keystroke from relay: Claude Code's model calls `SendMessage` to the Codex agent
(listed by `ListAgents` through the record relayd publishes for it), relay stores it in
that agent's inbox and queues it into Codex (its own door); Codex's model replies with
`relayctl send`, and relay writes the reply into Claude Code's inbox, where its model reads it.

Both programs (tests/agents: Claude Code 2.1.332, Codex CLI 0.169.0) run against scripted
model servers, with relay's hooks installed and RELAY_AGENT set as `relayctl up` sets them.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from support.agent_programs import claude_signed_in, program
from support.model_anthropic import conversation, messages_responder, text, texts, tool_use
from support.model_openai import codex_config, function_call, message, responses_responder
from support.relayd_proc import Daemon
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.real_program]

API_KEY = "sk-ant-relay-test-00000000000000000000"
CLAUDE, CODEX = "inferno", "coder"
CODEX_READY = "Ask Codex to do anything"


def _claude_texts(body: dict) -> list[str]:
    return [t for m in conversation(body) if m.get("role") == "user" for t in texts(m.get("content"))]


def _claude_tools(body: dict) -> list[str]:
    return [b.get("name") for m in conversation(body) if m.get("role") == "assistant" and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]


def test_claude_codes_send_message_reaches_codexs_model_and_its_reply_reaches_claude_codes_model(relayctl, relay_env, short_tmp: Path) -> None:
    def claude_turn(body: dict) -> list[dict]:
        if not any("ask the coder" in t for t in _claude_texts(body)):
            return [text("Noted.")]
        called = _claude_tools(body)
        if "ListAgents" not in called:
            return [tool_use("ListAgents", {})]
        if "SendMessage" not in called:
            return [tool_use("SendMessage", {"to": CODEX, "message": "which port does the test server use?"})]
        return [text("Asked.")]

    reply = f"{shlex.quote(sys.executable)} -m relayctl send {CLAUDE} 'port 8421, from codex'"

    def codex_turn(body: dict) -> list[dict]:
        asked = "which port does the test server use?" in json.dumps(body)
        done = any(i.get("type") == "function_call_output" for i in body.get("input", []))
        if asked and not done:
            return [function_call("exec_command", {"cmd": reply})]
        return [message("Noted.")]

    relayctl("init")
    root = short_tmp
    run = root / "run"
    run.mkdir(mode=0o700)
    env = {k: v for k, v in relay_env.items() if not k.startswith("TMUX")}
    env.update({"TERM": "xterm-256color", "LANG": "C.UTF-8"})
    # Claude Code, agent CLAUDE
    c_project, c_home = root / "cproject", root / "chome"
    c_project.mkdir()
    claude_signed_in(c_home, API_KEY, trusted=c_project)
    (c_home / ".claude").mkdir(parents=True, exist_ok=True)
    (c_home / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"defaultMode": "acceptEdits", "allow": ["ListAgents", "SendMessage"]}}))
    # Codex, agent CODEX
    x_project, x_home = root / "xproject", root / "xhome"
    x_project.mkdir()
    codex_home = x_home / ".codex"
    codex_home.mkdir(parents=True)
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    c_tmux, x_tmux = Tmux(root, "c"), Tmux(root, "x")
    try:
        with ScriptedModel(messages_responder(claude_turn)) as c_model, ScriptedModel(responses_responder(codex_turn)) as x_model:
            trusted = f'[projects."{x_project}"]\ntrust_level = "trusted"\n'
            (codex_home / "config.toml").write_text('approval_policy = "never"\nsandbox_mode = "danger-full-access"\n' + codex_config(x_model.url) + trusted)
            relayctl("hooks", "install", "--for", "codex", "--agent", CODEX, "--project", str(x_project))
            relayctl("hooks", "install", "--for", "claude", "--agent", CLAUDE, "--project", str(c_project))
            x_tmux.start([str(program("codex"))], x_project, {**env, "HOME": str(x_home), "CODEX_HOME": str(codex_home),
                                                              "SCRIPTED_API_KEY": "sk-scripted", "RELAY_AGENT": CODEX}, size=(150, 45))
            relayctl("register", CODEX, "--program", "codex", "--task", "runs the test server", "--notify", f"tmux:{x_tmux.target()}")
            x_tmux.wait_for("Hooks need review", timeout=90, settle=1)
            x_tmux.keys("Down", "Enter")  # trust relay's hooks, as a person does once
            x_tmux.wait_for(CODEX_READY, timeout=90, settle=1)
            x_tmux.type_line("Carry on.", "Carry on.")
            wait_for("Codex's thread reported", lambda: (Path(relay_env["RELAY_DIR"]) / "agents" / CODEX / "codex-queue").exists(), timeout=90)
            c_tmux.start([str(program("claude"))], c_project, {**env, "HOME": str(c_home), "ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": c_model.url,
                                                              "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                                                              "XDG_RUNTIME_DIR": str(run), "RELAY_AGENT": CLAUDE}, size=(120, 40))
            relayctl("register", CLAUDE, "--program", "claude-code", "--notify", f"tmux:{c_tmux.target()}")
            wait_for("Claude Code's prompt", lambda: c_tmux.cursor_line() == "❯", timeout=90)
            door = Path(relay_env["RELAY_DIR"]) / "agents" / CLAUDE / "claude-inbox"
            wait_for("Claude Code's inbox reported", lambda: door.exists() and json.loads(door.read_text()).get("proc_start"), timeout=90)
            records = c_home / ".claude" / "sessions"
            wait_for("relay's record for the Codex agent", lambda: any(json.loads(p.read_text()).get("name") == CODEX for p in records.glob("*.json")), timeout=30)
            c_tmux.type_line("ask the coder about the port", "ask the coder about the port")
            try:
                asked = wait_for("the question at Codex's model", lambda: next((r for r in x_model.requests if "which port does the test server use?" in r.text), None), timeout=90, every=0.2)
                # (as a peer message in Claude Code's inbox, or in relay's Stop hook's context
                # when it comes before the turn has ended: either way in front of the model)
                answered = wait_for("Codex's reply at Claude Code's model", lambda: next(
                    (r for r in c_model.requests if "port 8421, from codex" in r.text), None), timeout=90, every=0.2)
            except AssertionError as missed:
                raise AssertionError(f"{missed}\n{daemon.log()[-3000:]}\nClaude Code:\n{c_tmux.screen()}\nCodex:\n{x_tmux.screen()}") from None
            inbox = json.loads(relayctl("--json", "read", agent=CODEX).stdout)
            assert [m["from"] for m in inbox] == [CLAUDE] and "via-claude-code" in inbox[0]["tags"]
            assert inbox[0]["body"] == "which port does the test server use?"
            assert "from inferno: which port does the test server use?" in asked.text  # Codex's own queue told its model
            assert f"from {CODEX}" in answered.text
    finally:
        c_tmux.kill()
        x_tmux.kill()
        kill_strays(c_home)
        kill_strays(x_home)
        daemon.kill()
