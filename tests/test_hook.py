"""`relayctl hook claude` fed with Claude Code hook events as Claude Code sends them."""

from __future__ import annotations

import json

import pytest

_COMMON = {
    "session_id": "9d5c1b2e-4f1a-4c55-9a57-0c8f1d1f3a10",
    "transcript_path": "/home/dev/.claude/projects/-home-dev-oathkeeper/9d5c1b2e-4f1a-4c55-9a57-0c8f1d1f3a10.jsonl",
    "cwd": "/home/dev/oathkeeper",
    "permission_mode": "default",
}
EVENTS = {
    "SessionStart": {**_COMMON, "hook_event_name": "SessionStart", "source": "startup"},
    "UserPromptSubmit": {**_COMMON, "hook_event_name": "UserPromptSubmit", "prompt": "carry on with the auth refactor"},
    "PostToolUse": {
        **_COMMON,
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "go test ./...", "description": "Run the tests"},
        "tool_response": {"stdout": "ok", "stderr": "", "interrupted": False, "isImage": False},
        "tool_use_id": "toolu_01ABCDEF",
    },
    "Stop": {**_COMMON, "hook_event_name": "Stop", "stop_hook_active": False},
    "PreToolUse": {**_COMMON, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}},
}


@pytest.fixture
def hook(relayctl):
    relayctl("init", "--preset", "overlord")

    def run(event: str, agent: str = "inferno", raw: str | None = None):
        return relayctl("hook", "claude", agent=agent, input=raw if raw is not None else json.dumps(EVENTS[event]), check=False)

    return run


@pytest.mark.parametrize("event", ["SessionStart", "UserPromptSubmit", "PostToolUse"])
def test_unread_mail_becomes_additional_context_once(relayctl, hook, event: str) -> None:
    relayctl("send", "inferno", "Rebasing main, hold commits", "--priority", "urgent", agent="overlord")
    relayctl("send", "inferno", "Review auth.go please", "--thread", "bd-42", agent="strategist")
    first = hook(event)
    assert first.returncode == 0, first.stderr
    answer = json.loads(first.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert "Rebasing main, hold commits" in context and "Review auth.go please" in context
    assert "from overlord" in context and "urgent" in context and "thread bd-42" in context
    # Shown once: now read, and never handed over again.
    again = hook(event)
    assert again.returncode == 0 and again.stdout == ""
    assert json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout) == []
    # New mail later comes alone.
    relayctl("send", "inferno", "One more thing", agent="glacier")
    later = json.loads(hook(event).stdout)["hookSpecificOutput"]["additionalContext"]
    assert "One more thing" in later and "Rebasing main" not in later


def test_stop_hands_mail_over_as_the_reason_to_continue(relayctl, hook) -> None:
    assert hook("Stop").stdout == ""  # nothing unread: Claude may stop
    relayctl("send", "inferno", "Next: API endpoints", agent="overlord")
    answer = json.loads(hook("Stop").stdout)
    assert answer["decision"] == "block" and "Next: API endpoints" in answer["reason"]
    assert hook("Stop").stdout == ""


def test_other_events_leave_mail_unread(relayctl, hook) -> None:
    relayctl("send", "inferno", "still here", agent="overlord")
    proc = hook("PreToolUse")
    assert proc.returncode == 0 and proc.stdout == ""
    assert len(json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)) == 1


def test_long_mail_is_cut_to_the_budget_and_the_rest_follows(relayctl, hook) -> None:
    for n in range(6):
        relayctl("send", "inferno", f"message {n} " + "x" * 2500, agent="overlord")
    seen: list[int] = []
    for _ in range(6):
        proc = hook("UserPromptSubmit")
        if not proc.stdout:
            break
        context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
        assert len(context) <= 10_000
        seen += [n for n in range(6) if f"message {n} " in context]
    assert seen == list(range(6))  # every message exactly once, in order


def test_bad_input_is_one_line_and_non_blocking(hook) -> None:
    for raw in ("{not json", "[1, 2]", ""):
        proc = hook("UserPromptSubmit", raw=raw)
        assert proc.returncode == 1  # non-blocking for Claude Code (2 would block the prompt)
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_missing_identity_is_non_blocking(relayctl) -> None:
    proc = relayctl("hook", "claude", input=json.dumps(EVENTS["Stop"]), check=False)
    assert proc.returncode == 1 and "agent name" in proc.stderr and proc.stdout == ""
