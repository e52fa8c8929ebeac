"""GitHub Copilot CLI with relay's hooks: mail reaches the model, or stays unread.

The real program (tests/agents, pinned) runs one-shot against the scripted model; see
hook_sessions.py for the scenario and what is asserted. Copilot runs the hooks of a
repository's .claude/settings.json as well as its own .github/hooks/*.json, so both are
tried: relay's Claude Code hooks must not mark mail read that Copilot's model never sees.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.hook_sessions import AGENT, PROGRAMS, SENDER, SUBJECTS, assert_mail_reached_the_model, run_scenario
from support.scripted_model import ScriptedModel

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop


def test_in_a_repository_with_relays_claude_code_hooks_copilots_model_gets_the_mail(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["copilot"], relayctl, short_tmp, hooks_for="claude")
    assert_mail_reached_the_model(session)


def test_copilots_own_hooks_from_hooks_install_hand_the_mail_over_and_the_stop_continues_once(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["copilot"], relayctl, short_tmp)
    assert_mail_reached_the_model(session)
    assert (short_tmp / "project" / ".github" / "hooks" / "relay.json").exists()


def test_a_session_without_an_agent_name_gets_relays_line_through_its_model_once_and_the_mail_stays_unread(relayctl, short_tmp: Path) -> None:
    """Copilot shows the person no hook's text: relay's sessionStart hook gives its model the
    line on how to start the session as an agent, to pass on, once; nothing is handed over."""
    program = PROGRAMS["copilot"]
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    relayctl.setup("init", preset="overlord")
    relayctl("hooks", "install", "--for", "copilot", "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    with ScriptedModel(program.responder(lambda body: [program.reply("ok")])) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "RELAY_DIR": relayctl.env["RELAY_DIR"], **program.prepare(home, project, model.url)}
        done = subprocess.run(program.argv("Carry on."), cwd=project, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        turns = [r.text for r in model.requests if program.is_turn(r)]
    assert turns and "has no agent name" in turns[0] and "RELAY_AGENT=NAME copilot" in turns[0] and "tell the person" in turns[0]
    assert SUBJECTS[0] not in " ".join(turns)
    assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECTS[0]]
