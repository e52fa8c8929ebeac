"""Gemini CLI with relay's hooks, installed by `relayctl hooks install --for gemini`: mail reaches the model.

The real program (tests/agents, pinned) runs against the scripted model; see hook_sessions.py
for the scenarios and what is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.hook_sessions import PROGRAMS, assert_mail_reached_the_model, run_interactive, run_scenario, run_without_an_agent
from support.tmux_pane import Tmux

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop


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

    def fixed_model(home: Path) -> None:
        settings = home / ".gemini" / "settings.json"
        settings.write_text(json.dumps({**json.loads(settings.read_text()), "model": {"name": "gemini-2.5-flash"}}))

    def see_the_hooks_warning(tmux: Tmux) -> None:
        tmux.wait_for("project-level hooks have been detected")  # relay's, named "relay"

    run_interactive(PROGRAMS["gemini"], relayctl, short_tmp, configure=fixed_model, answer_dialogs=see_the_hooks_warning, ready="Type your message")


def test_a_session_started_without_relay_agent_tells_the_person_once_how_to_start_it_as_one(relayctl, short_tmp: Path) -> None:
    """In a trusted folder with relay's hooks, a `gemini` started by hand without
    RELAY_AGENT shows relay's one line on how to start it as an agent (its SessionStart
    hook's systemMessage), and no mail is handed over."""
    run_without_an_agent(PROGRAMS["gemini"], relayctl, short_tmp)
