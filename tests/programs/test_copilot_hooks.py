"""GitHub Copilot CLI with relay's hooks: mail reaches the model, or stays unread.

The real program (tests/agents, pinned) runs one-shot against the scripted model; see
hook_sessions.py for the scenario and what is asserted. Copilot runs the hooks of a
repository's .claude/settings.json as well as its own .github/hooks/*.json, so both are
tried: relay's Claude Code hooks must not mark mail read that Copilot's model never sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.hook_sessions import PROGRAMS, assert_mail_reached_the_model, run_scenario

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop


def test_in_a_repository_with_relays_claude_code_hooks_copilots_model_gets_the_mail(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["copilot"], relayctl, short_tmp, hooks_for="claude")
    assert_mail_reached_the_model(session)


def test_copilots_own_hooks_from_hooks_install_hand_the_mail_over_and_the_stop_continues_once(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["copilot"], relayctl, short_tmp)
    assert_mail_reached_the_model(session)
    assert (short_tmp / "project" / ".github" / "hooks" / "relay.json").exists()
