"""OpenCode with relay's plugin, installed by `relayctl hooks install --for opencode`: mail reaches the model.

The real program (tests/agents, pinned) runs against the scripted model; see hook_sessions.py
for the scenarios. `opencode run` ends at its session's first idle, so the one-shot run has
no continuation: the mail waiting then must stay unread rather than count as read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support import agent_programs, model_openai
from support.hook_sessions import AGENT, PROGRAMS, SENDER, SUBJECTS, program_state, run_scenario
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.real_program]  # real agent programs in tmux: not in the quick loop


def test_one_shot_mail_reaches_the_model_at_the_prompt_and_after_the_tool_and_the_rest_stays_unread(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["opencode"], relayctl, short_tmp)
    assert session.returncode == 0, session.stderr[-2000:]
    texts = [r.text for r in session.turns]
    assert len(texts) == 2, session.stderr[-2000:]
    first, after_tool = texts
    assert SUBJECTS[0] in first  # chat.message: with the prompt
    assert SUBJECTS[1] not in first and SUBJECTS[1] in after_tool  # tool.execute.after: with the tool's output
    assert after_tool.count(SUBJECTS[0]) == first.count(SUBJECTS[0])  # handed over once
    assert session.unread == [SUBJECTS[2]]  # came during the last request: `opencode run` exits at idle, so it waits


def test_mail_to_an_idle_interactive_session_starts_a_turn_that_carries_it(relayctl, daemon, store_dir: Path, short_tmp: Path) -> None:
    """`opencode` in tmux with relayd running: the first prompt carries the mail sent before
    it; once the session sits idle (the plugin recorded it so), mail sent then starts a new
    turn by itself, within 10 s, with nothing typed into the pane, and is read once."""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl("register", AGENT, "--notify", "hook")
    relayctl("hooks", "install", "--for", "opencode", "--agent", AGENT, "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    agent = store_dir / "agents" / AGENT
    tmux = Tmux(short_tmp)
    with ScriptedModel(model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))) as model:
        agent_programs.opencode_config(project, model.url)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT, **agent_programs.opencode_env(project, home)}
        tmux.start([str(agent_programs.program("opencode"))], project, env)
        try:
            tmux.wait_for("Ask anything", settle=1)
            tmux.type_line("Carry on with the release work.", "Carry on with the release work.")
            first = model.wait_for(lambda r: PROGRAMS["opencode"].is_turn(r) and "Carry on with the release work." in r.text, timeout=60)
            assert SUBJECTS[0] in first.text
            wait_for("the session at rest", lambda: program_state(agent) == "idle", timeout=60)
            screen = tmux.screen()
            relayctl("send", AGENT, SUBJECTS[1], agent=SENDER)
            second = model.wait_for(lambda r: PROGRAMS["opencode"].is_turn(r) and SUBJECTS[1] in r.text, timeout=10)
            assert second.text.count(SUBJECTS[1]) == 1
            assert "Carry on with the release work." in screen and tmux.cursor_line().count("Carry on") == 0  # nothing typed
        finally:
            tmux.kill()
            kill_strays(home)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []


def test_mail_while_a_permission_question_is_open_starts_no_turn_and_comes_with_the_tools_output(relayctl, daemon, store_dir: Path, short_tmp: Path) -> None:
    """The model asks to run a command OpenCode must ask the person about (`permission`
    bash = "ask"); mail arrives while the question is open. For 10 s no turn starts and the
    question stays; once the person allows it, the mail comes with the command's output."""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl("register", AGENT, "--notify", "hook")
    relayctl("hooks", "install", "--for", "opencode", "--agent", AGENT, "--project", str(project))
    agent = store_dir / "agents" / AGENT
    is_turn = PROGRAMS["opencode"].is_turn

    def turn(body: dict) -> dict:
        if any(m.get("role") == "tool" for m in body.get("messages", [])):
            return model_openai.chat_text("ran it")
        return model_openai.chat_tool_call("bash", {"command": "echo release-check", "description": "Check the release"})

    tmux = Tmux(short_tmp)
    with ScriptedModel(model_openai.chat_responder(turn)) as model:
        agent_programs.opencode_config(project, model.url, {"permission": {"bash": "ask"}})
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT, **agent_programs.opencode_env(project, home)}
        tmux.start([str(agent_programs.program("opencode"))], project, env)
        try:
            tmux.wait_for("Ask anything", settle=1)
            tmux.type_line("Check the release.", "Check the release.")
            tmux.wait_for("Allow once")
            wait_for("the question recorded", lambda: program_state(agent) == "asking", timeout=20)
            turns = len([r for r in model.requests if is_turn(r)])
            relayctl("send", AGENT, SUBJECTS[1], agent=SENDER)
            with pytest.raises(AssertionError, match="no request to the scripted model matched"):
                model.wait_for(lambda r: is_turn(r) and SUBJECTS[1] in r.text, timeout=10)  # the hold: 10 s
            assert "Allow once" in tmux.screen() and len([r for r in model.requests if is_turn(r)]) == turns
            tmux.keys("Enter")  # "Allow once", preselected
            after = model.wait_for(lambda r: is_turn(r) and SUBJECTS[1] in r.text, timeout=60)
            assert "release-check" in after.text and after.text.count(SUBJECTS[1]) == 1
        finally:
            tmux.kill()
            kill_strays(home)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []
