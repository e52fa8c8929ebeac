"""OpenCode with relay's plugin, installed by `relayctl hooks install --for opencode`: mail reaches the model.

The real program (tests/agents, pinned) runs against the scripted model; see hook_sessions.py
for the scenarios. `opencode run` ends at its session's first idle, so the one-shot run has
no continuation: the mail waiting then must stay unread rather than count as read.
"""

from __future__ import annotations

from pathlib import Path

from hook_sessions import PROGRAMS, SUBJECTS, run_scenario


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
