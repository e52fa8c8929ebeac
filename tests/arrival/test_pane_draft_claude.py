"""A pane trigger and a person's unsent prompt in the real Claude Code, in real tmux.

Claude Code 2.1.332 (tests/agents) runs interactively against the scripted model server;
relayd holds the trigger back while the input box holds a draft, and the model gets the
trigger, on its own, once the box is empty.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from support.agent_programs import claude_signed_in, program
from support.model_anthropic import conversation, messages_responder, text, texts
from support.relayd_proc import Daemon
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.real_program]

TRIGGER = "relay-test: new mail, call check_inbox"
DRAFT = "my half-typed draft"
API_KEY = "sk-ant-relay-test-00000000000000000000"


def _user_texts(request) -> list[str]:
    """The text of every user turn in a Messages API request."""
    return [t for m in conversation(request.json() or {}) if m.get("role") == "user" for t in texts(m.get("content"))]


def test_claude_code_draft_is_left_alone_and_the_trigger_arrives_on_its_own(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    claude = program("claude")
    project, home = short_tmp / "project", short_tmp / "home"
    project.mkdir()
    claude_signed_in(home, API_KEY, trusted=project)
    relayctl("init")
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    relayctl("register", "sender")

    tmux = Tmux(short_tmp, "c")

    with ScriptedModel(messages_responder(lambda request: [text("Noted.")])) as model:
        env = {
            "HOME": str(home), "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": API_KEY,
            "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}  # what a pane of a new server gets
        tmux.start([str(claude)], project, inherited | env, size=(120, 40))
        daemon = Daemon(relay_env, "--retry-interval", "1s").start()
        try:
            relayctl("register", "inferno", "--notify", f"tmux:{tmux.target()}")
            wait_for("Claude Code's empty prompt", lambda: tmux.cursor_line() == "❯", timeout=60)

            tmux.literal(DRAFT)  # a person types and does not press Enter
            wait_for("the draft in Claude Code's input box", lambda: tmux.cursor_line() == f"❯ {DRAFT}", timeout=60)
            relayctl("send", "inferno", "SECRET-BODY", agent="sender")
            wait_for("relayd to hold the trigger back", lambda: "unsent text" in daemon.log(), timeout=60)
            time.sleep(3)  # several retry rounds with the draft still there
            assert tmux.cursor_line() == f"❯ {DRAFT}"
            assert not any(DRAFT in t or TRIGGER in t for r in model.requests for t in _user_texts(r))

            tmux.keys("C-u")  # the person clears the box
            turn = wait_for("the trigger at the model", lambda: next((r for r in model.requests if any(TRIGGER in t for t in _user_texts(r))), None), timeout=60)
            assert not any(DRAFT in t for t in _user_texts(turn))
            assert not any("SECRET-BODY" in r.text for r in model.requests)  # the trigger, never the body
        finally:
            daemon.kill()
            tmux.kill()
