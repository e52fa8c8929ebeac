"""Codex CLI with relay's hooks, installed by `relayctl hooks install --for codex`: mail reaches the model.

The real program (tests/agents, pinned) runs against the scripted model; see hook_sessions.py
for the scenarios and what is asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.hook_sessions import PROGRAMS, assert_mail_reached_the_model, run_interactive, run_scenario
from support.tmux_pane import Tmux

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop


def test_mail_reaches_the_model_through_the_hooks_and_the_stop_continues_once(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["codex"], relayctl, short_tmp)
    assert_mail_reached_the_model(session)


def test_an_interactive_session_set_up_as_the_docs_say_gets_the_mail(relayctl, short_tmp: Path) -> None:
    """`codex` in tmux: the person accepts the folder trust and "Trust all and continue" for
    the hooks (docs/mcp.md, Codex CLI), then mail sent before the first prompt and mail sent
    after the first answer each reach the model once."""

    def trust_the_folder_and_the_hooks(tmux: Tmux) -> None:
        tmux.wait_for("Trust this folder?", settle=1)
        tmux.keys("Enter")  # 1. Trust and continue
        assert "2. Trust all and continue" in tmux.wait_for("Hooks need review", settle=1)
        tmux.keys("Down", "Enter")

    run_interactive(PROGRAMS["codex"], relayctl, short_tmp, answer_dialogs=trust_the_folder_and_the_hooks, ready="Ask Codex to do anything")
