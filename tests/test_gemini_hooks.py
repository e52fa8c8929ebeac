"""Gemini CLI with relay's hooks, installed by `relayctl hooks install --for gemini`: mail reaches the model.

The real program (tests/agents, pinned) runs one-shot against the scripted model; see
hook_sessions.py for the scenario and what is asserted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import agent_programs
import model_gemini
from hook_sessions import AGENT, PROGRAMS, SENDER, SUBJECTS, Tmux, assert_mail_reached_the_model, kill_strays, run_scenario
from scripted_model import ScriptedModel


def test_mail_reaches_the_model_through_the_hooks_and_the_stop_continues_once(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["gemini"], relayctl, short_tmp)
    assert_mail_reached_the_model(session)


def test_an_interactive_session_set_up_as_the_docs_say_gets_the_mail(relayctl, short_tmp: Path) -> None:
    """`gemini` in tmux in a trusted folder (its entry in ~/.gemini/trustedFolders.json, as
    the trust dialog writes it; docs/mcp.md, Gemini CLI): Gemini warns once about the
    project's hooks, and mail sent before the first prompt and mail sent after the first
    answer each reach the model once. (The dialog itself is not driven
    here: after "Trust folder" Gemini 0.61.0 relaunches itself, and on this machine the
    relaunched process sometimes came up still reporting the folder untrusted.)"""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl("init", "--preset", "overlord")
    relayctl("register", AGENT, "--notify", "hook")
    relayctl("hooks", "install", "--for", "gemini", "--agent", AGENT, "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    program = PROGRAMS["gemini"]
    tmux = Tmux(short_tmp)
    with ScriptedModel(model_gemini.gemini_responder()) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", **program.prepare(home, project, model.url)}
        settings = home / ".gemini" / "settings.json"
        settings.write_text(json.dumps({**json.loads(settings.read_text()), "model": {"name": "gemini-2.5-flash"}}))
        tmux.start([str(agent_programs.program("gemini"))], project, env)
        try:
            tmux.wait_for("project-level hooks have been detected")  # relay's, named "relay"
            tmux.wait_for("Type your message", settle=1)
            tmux.type_line("Carry on with the release work.", "Carry on with the release work.")
            first = model.wait_for(lambda r: program.is_turn(r) and "Carry on with the release work." in r.text, timeout=60)
            assert SUBJECTS[0] in first.text
            tmux.wait_for("Type your message")
            # Mail after the answer: the end-of-turn hook may still catch it (and continue
            # once), or the next prompt's hook does; either way the model gets it once.
            relayctl("send", AGENT, SUBJECTS[1], agent=SENDER)
            tmux.type_line("Any news", "Any news")
            second = model.wait_for(lambda r: program.is_turn(r) and "Any news" in r.text, timeout=60)
            assert second.text.count(SUBJECTS[1]) == 1 and second.text.count(SUBJECTS[0]) == first.text.count(SUBJECTS[0])
        finally:
            tmux.kill()
            kill_strays(home)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []
