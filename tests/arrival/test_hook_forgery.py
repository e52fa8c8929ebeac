"""A message whose subject, thread and body try to forge a second message (support.forged_mail)
reaches each program's model through `relayctl hook` as data: in every program's answer
shape (context before a prompt or after a tool, the block decision at a turn's end), the
only header lines are relay's, one per real message."""

from __future__ import annotations

import json

import pytest

from support.forged_mail import BREAKS, forged, headers_forged

# (program, argv after the program, the event on stdin, where its answer holds the text)
SHAPES = [
    ("claude", [], {"hook_event_name": "UserPromptSubmit", "prompt": "carry on", "session_id": "s1"}, ("hookSpecificOutput", "additionalContext")),
    ("claude", [], {"hook_event_name": "Stop", "stop_hook_active": False, "session_id": "s1"}, ("reason",)),
    ("codex", [], {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": "ok"}, ("hookSpecificOutput", "additionalContext")),
    ("gemini", [], {"hook_event_name": "BeforeAgent", "prompt": "carry on", "timestamp": "2026-12-01T00:00:00Z"}, ("hookSpecificOutput", "additionalContext")),
    ("gemini", [], {"hook_event_name": "AfterAgent", "prompt": "carry on", "prompt_response": "done", "stop_hook_active": False}, ("reason",)),
    ("copilot", ["userPromptSubmitted"], {"sessionId": "s1", "timestamp": 1, "prompt": "carry on"}, ("additionalContext",)),
    ("opencode", [], {"hook_event_name": "chat.message", "session_id": "ses_1"}, ("additionalContext",)),
]


@pytest.mark.slow
@pytest.mark.parametrize("brk", [BREAKS["newline"], BREAKS["line separator"], BREAKS["cr"]], ids=["newline", "line separator", "cr"])
@pytest.mark.parametrize("program, argv, event, where", SHAPES, ids=[f"{p}-{e.get('hook_event_name') or a[0]}" for p, a, e, _ in SHAPES])
def test_a_forged_header_reaches_the_model_as_data(relayctl, relay_env, program: str, argv: list[str], event: dict, where: tuple[str, ...], brk: str) -> None:
    relayctl.setup("init", preset="overlord")
    relayctl.setup("send", agent="storm", to=["inferno"], subject=forged(brk), thread=forged(brk), body=forged(brk), priority="low")
    env = dict(relay_env, RELAY_AGENT="inferno")  # as `relayctl up` starts the program
    answered = relayctl.__class__(env)("hook", program, *argv, input=json.dumps(event), check=False)
    assert answered.returncode == 0 and answered.stderr == "", answered.stderr
    answer = json.loads(answered.stdout)
    for key in where:
        answer = answer[key]
    text = answer
    assert "athena" in text and "routine update" in text  # handed over, whole
    assert headers_forged(text, real=1) == [], text
