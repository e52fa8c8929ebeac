"""Claude Code with relay's hooks, installed by `relayctl hooks install --for claude`: mail reaches the model.

The real program (tests/agents, pinned) runs against the scripted model; see hook_sessions.py
for the scenarios and what is asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.agent_programs import claude_signed_in
from support.hook_sessions import PROGRAMS, assert_mail_reached_the_model, run_interactive, run_scenario, run_without_an_agent
from support.tmux_pane import Tmux

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop


def test_mail_reaches_the_model_through_the_hooks_and_the_stop_continues_once(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["claude"], relayctl, short_tmp)
    assert_mail_reached_the_model(session)


def test_an_interactive_session_set_up_as_the_docs_say_gets_the_mail(relayctl, short_tmp: Path) -> None:
    """`claude` in tmux: the person answers the folder trust dialog (which names the hooks in
    .claude/settings.json) with "Yes, I trust this folder", then mail sent before the first
    prompt and mail sent after the first answer each reach the model once."""

    def signed_in(home: Path) -> None:
        claude_signed_in(home, "sk-scripted")  # the folder is not trusted yet: the dialog asks

    def trust_the_folder(tmux: Tmux) -> None:
        dialog = tmux.wait_for("Yes, I trust this folder", settle=1)
        assert ".claude/settings.json" in dialog and "❯ No, exit" in dialog
        tmux.keys("Down", "Enter")

    run_interactive(PROGRAMS["claude"], relayctl, short_tmp, configure=signed_in, answer_dialogs=trust_the_folder,
                    ready="shift+tab to cycle", settle_after_answer=1)



def test_a_session_started_without_relay_agent_tells_the_person_once_how_to_start_it_as_one(relayctl, short_tmp: Path) -> None:
    """The project has relay's hooks, but this `claude` was started by hand without
    RELAY_AGENT: its SessionStart hook shows one line in the session saying how to start it
    as an agent, and no mail is handed over."""
    run_without_an_agent(PROGRAMS["claude"], relayctl, short_tmp, lambda home, project: claude_signed_in(home, "sk-scripted", trusted=project))
