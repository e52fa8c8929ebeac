"""Codex CLI with relay's hooks, installed by `relayctl hooks install --for codex`: mail reaches the model.

The real program (tests/agents, pinned) runs one-shot against the scripted model; see
hook_sessions.py for the scenario and what is asserted.
"""

from __future__ import annotations

from pathlib import Path

from hook_sessions import PROGRAMS, assert_mail_reached_the_model, run_scenario


def test_mail_reaches_the_model_through_the_hooks_and_the_stop_continues_once(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["codex"], relayctl, short_tmp)
    assert_mail_reached_the_model(session)
