"""Each agent program's table of evidence -> session state (relayd.programs), in memory:
the hook events of sessions as the real programs send them (the shapes of
tests/arrival/test_hook.py and the recorded sessions of tests/programs), replayed through
relayd.arrival.program_events.state_after, which `relayctl hook` records after each event.
No tmux, no relayd: the table alone decides whether a trigger may be typed."""

from __future__ import annotations

import json

import pytest

from relayd.arrival.program_events import STATES, state_after, turn_failed
from relayd.programs.registry import PROGRAMS
from support.paths import ROOT


def replay(program: str, events: list[dict], continued: tuple[int, ...] = ()) -> list[str | None]:
    """The state after each event; `continued`: the turn ends whose hook handed mail over."""
    return [state_after(program, event, i in continued) for i, event in enumerate(events)]


def named(*names: str, **fields) -> list[dict]:
    return [{"hook_event_name": name, **fields} for name in names]


def test_claude_code_a_turn_with_a_question_the_person_answers() -> None:
    session = [
        {"hook_event_name": "SessionStart", "source": "startup"},
        {"hook_event_name": "UserPromptSubmit", "prompt": "carry on"},
        {"hook_event_name": "PreToolUse", "tool_name": "Bash"},
        {"hook_event_name": "PermissionRequest", "tool_name": "Bash"},
        {"hook_event_name": "Notification", "notification_type": "permission_prompt", "message": "Claude needs your permission to use Bash"},
        {"hook_event_name": "PostToolUse", "tool_name": "Bash"},
        {"hook_event_name": "Stop", "stop_hook_active": False},
        {"hook_event_name": "Notification", "notification_type": "idle_prompt", "message": "Claude is waiting for your input"},
        {"hook_event_name": "SessionEnd", "reason": "prompt_input_exit"},
    ]
    assert replay("claude", session) == ["idle", "working", "working", "asking", "asking", "working", "idle", "idle", "ended"]


def test_claude_code_a_turn_continued_with_mail_and_one_that_failed() -> None:
    session = named("UserPromptSubmit", "Stop") + [{"hook_event_name": "Stop", "stop_hook_active": True}] + named("UserPromptSubmit", "StopFailure")
    # the first Stop handed mail over (block decision): the session works on; the continuation's stop is idle
    assert replay("claude", session, continued=(1,)) == ["working", "working", "idle", "working", "idle"]
    assert state_after("claude", {"hook_event_name": "Notification", "notification_type": "elicitation_dialog"}) == "asking"
    assert state_after("claude", {"hook_event_name": "Notification", "notification_type": "auth_success"}) is None


def test_codex_a_turn_with_a_question_and_one_interrupted() -> None:
    session = named("SessionStart", "UserPromptSubmit", "PermissionRequest", "PostToolUse", "Stop", "UserPromptSubmit", "Interrupt")
    assert replay("codex", session) == ["idle", "working", "asking", "working", "idle", "working", "idle"]


def test_gemini_a_turn_with_a_tool_permission() -> None:
    session = [
        {"hook_event_name": "SessionStart", "source": "startup"},
        {"hook_event_name": "BeforeAgent", "prompt": "carry on"},
        {"hook_event_name": "BeforeTool", "tool_name": "run_shell_command"},
        {"hook_event_name": "Notification", "notification_type": "ToolPermission", "message": "Tool run_shell_command requires confirmation"},
        {"hook_event_name": "AfterTool", "tool_name": "run_shell_command"},
        {"hook_event_name": "AfterAgent", "stop_hook_active": False},
        {"hook_event_name": "SessionEnd", "reason": "exit"},
    ]
    assert replay("gemini", session) == ["idle", "working", "working", "asking", "working", "idle", "ended"]
    assert replay("gemini", named("BeforeAgent", "AfterAgent"), continued=(1,)) == ["working", "working"]


def test_copilot_its_session_start_says_nothing_and_its_question_asks() -> None:
    # Copilot runs sessionStart beside the first userPromptSubmitted: "idle" from it could land after "working"
    session = named("sessionStart", "userPromptSubmitted", "preToolUse", "permissionRequest", "postToolUse", "agentStop", "sessionEnd")
    assert replay("copilot", session) == [None, "working", "working", "asking", "working", "idle", "ended"]
    assert state_after("copilot", {"hook_event_name": "notification"}) is None


def test_opencode_as_relays_plugin_reports_it() -> None:
    session = named("session.created", "chat.message", "permission.asked", "permission.replied", "tool.execute.after", "question.asked",
                    "question.rejected", "session.idle", "session.deleted")
    assert replay("opencode", session) == ["idle", "working", "asking", "working", "working", "asking", "working", "idle", "ended"]
    assert replay("opencode", named("chat.message", "session.idle"), continued=(1,)) == ["working", "working"]


def test_which_events_say_a_turns_model_call_failed() -> None:
    """The evidence that mail handed into a turn never reached a model that answered: each
    program's own (relayd.programs; the shapes its real sessions sent against a model that
    refused the call). Codex CLI has none."""
    assert turn_failed("claude", {"hook_event_name": "StopFailure"}) and not turn_failed("claude", {"hook_event_name": "Stop"})
    # Gemini CLI: the turn's end, with no response text
    assert turn_failed("gemini", {"hook_event_name": "AfterAgent", "prompt": "hi", "prompt_response": "[no response text]", "stop_hook_active": False})
    assert not turn_failed("gemini", {"hook_event_name": "AfterAgent", "prompt": "hi", "prompt_response": "Done.", "stop_hook_active": False})
    assert state_after("gemini", {"hook_event_name": "AfterAgent", "prompt_response": "[no response text]"}) == "idle"
    # Copilot CLI: an error in a model call, not in a tool
    assert turn_failed("copilot", {"hook_event_name": "errorOccurred", "errorContext": "model_call", "recoverable": True, "error": {"message": "400"}})
    assert not turn_failed("copilot", {"hook_event_name": "errorOccurred", "errorContext": "tool_execution", "recoverable": True})
    assert state_after("copilot", {"hook_event_name": "errorOccurred", "errorContext": "model_call"}) == "working"  # it may retry
    # OpenCode: relay's plugin passes session.error on
    assert turn_failed("opencode", {"hook_event_name": "session.error"}) and state_after("opencode", {"hook_event_name": "session.error"}) == "idle"
    assert not any(turn_failed("codex", {"hook_event_name": name}) for name in PROGRAMS["codex"].hooks.installed)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_state_a_table_gives_is_a_state_and_every_state_event_is_installed(program: str) -> None:
    """What `hooks install` puts in the settings is what the table reads: an event relay
    installs only for its state must say something, or its entry would be a no-op."""
    hooks = PROGRAMS[program].hooks
    assert set(hooks.states.values()) | set(hooks.notifications.values()) <= set(STATES)
    silent = [e for e in hooks.state if e not in hooks.states and not (e == "Notification" and hooks.notifications)]
    assert silent == (["sessionStart"] if program == "copilot" else [])  # relayd.programs.copilot says why
    assert hooks.states[hooks.stop] == "idle"  # a turn's end is the prompt again


def test_an_unknown_program_or_event_says_nothing() -> None:
    assert state_after("vim", {"hook_event_name": "Stop"}) is None
    assert state_after("claude", {"hook_event_name": "BeforeAgent"}) is None  # Gemini's name
    assert state_after("claude", {"prompt": "no name"}) is None


def test_each_program_names_the_version_the_tests_run_and_its_npm_package() -> None:
    pinned = json.loads((ROOT / "tests" / "agents" / "package.json").read_text())["dependencies"]
    assert {p.package: p.tested for p in PROGRAMS.values()} == pinned
