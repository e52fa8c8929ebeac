"""Claude Code with relay's hooks, installed by `relayctl hooks install --for claude`: mail reaches the model.

The real program (tests/agents, pinned) runs one-shot against the scripted model; see
hook_sessions.py for the scenario and what is asserted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import agent_programs
import model_anthropic
from hook_sessions import AGENT, PROGRAMS, SENDER, SUBJECTS, Tmux, assert_mail_reached_the_model, kill_strays, run_scenario
from scripted_model import ScriptedModel


def test_mail_reaches_the_model_through_the_hooks_and_the_stop_continues_once(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["claude"], relayctl, short_tmp)
    assert_mail_reached_the_model(session)


def test_an_interactive_session_set_up_as_the_docs_say_gets_the_mail(relayctl, short_tmp: Path) -> None:
    """`claude` in tmux: the person answers the folder trust dialog (which names the hooks in
    .claude/settings.json) with "Yes, I trust this folder", then mail sent before the first
    prompt and mail sent after the first answer each reach the model once."""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    # What a person's first login leaves in ~/.claude.json: onboarding done and this API key
    # accepted (Claude Code keeps the key's last 20 characters).
    (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "theme": "dark",
                                                   "customApiKeyResponses": {"approved": ["sk-scripted"], "rejected": []}}))
    relayctl("init", "--preset", "overlord")
    relayctl("register", AGENT, "--notify", "hook")
    relayctl("hooks", "install", "--for", "claude", "--agent", AGENT, "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    program = PROGRAMS["claude"]
    tmux = Tmux(short_tmp)
    with ScriptedModel(model_anthropic.messages_responder()) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", **program.prepare(home, project, model.url)}
        tmux.start([str(agent_programs.program("claude"))], project, env)
        try:
            dialog = tmux.wait_for("Yes, I trust this folder", settle=1)
            assert ".claude/settings.json" in dialog and "❯ No, exit" in dialog
            tmux.keys("Down", "Enter")
            tmux.wait_for("shift+tab to cycle", settle=1)
            tmux.type_line("Carry on with the release work.", "Carry on with the release work.")
            first = model.wait_for(lambda r: program.is_turn(r) and "Carry on with the release work." in r.text, timeout=60)
            assert SUBJECTS[0] in first.text
            tmux.wait_for("shift+tab to cycle", settle=1)
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
