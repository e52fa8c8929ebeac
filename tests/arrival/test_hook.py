"""`relayctl hook claude|codex|gemini` fed with hook events as each program sends them
(Claude Code 2.1.332, Codex CLI 0.169.0, Gemini CLI 0.61.0; the real programs run the
hooks in test_claude_hooks.py, test_codex_hooks.py and test_gemini_hooks.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.hook_sessions import program_state

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
    "SubagentStop": {**_COMMON, "hook_event_name": "SubagentStop", "stop_hook_active": False, "agent_id": "a1", "agent_type": "Explore"},
}
_CODEX = {"session_id": "01a20ae4-fdaa-7a91-ba4d-48568d14bb2f", "turn_id": "01a20ae4-fdd5-7b03-90d2-d9874ce5c508",
          "transcript_path": None, "cwd": "/home/dev/oathkeeper", "model": "gpt-5.5", "permission_mode": "default"}
CODEX_EVENTS = {
    "SessionStart": {**_CODEX, "hook_event_name": "SessionStart", "source": "startup"},
    "UserPromptSubmit": {**_CODEX, "hook_event_name": "UserPromptSubmit", "prompt": "carry on"},
    "PostToolUse": {**_CODEX, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "go test ./..."},
                    "tool_response": "ok", "tool_use_id": "call_000001"},
    "Stop": {**_CODEX, "hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "done"},
}
_GEMINI = {"session_id": "7c1f0d5e-2b1a-4e5c-8d3f-5a6b7c8d9e0f", "transcript_path": "/home/dev/.gemini/tmp/chats/session.json",
           "cwd": "/home/dev/oathkeeper", "timestamp": "2026-11-24T00:14:10.689Z"}
GEMINI_EVENTS = {
    "SessionStart": {**_GEMINI, "hook_event_name": "SessionStart", "source": "startup"},
    "BeforeAgent": {**_GEMINI, "hook_event_name": "BeforeAgent", "prompt": "carry on"},
    "AfterTool": {**_GEMINI, "hook_event_name": "AfterTool", "tool_name": "read_file", "tool_input": {"file_path": "a.go"},
                  "tool_response": {"llmContent": "package a", "returnDisplay": ""}},
    "AfterAgent": {**_GEMINI, "hook_event_name": "AfterAgent", "prompt": "carry on", "prompt_response": "done", "stop_hook_active": False},
    "BeforeTool": {**_GEMINI, "hook_event_name": "BeforeTool", "tool_name": "read_file", "tool_input": {"file_path": "a.go"}},
}
BY_PROGRAM = {"claude": EVENTS, "codex": CODEX_EVENTS, "gemini": GEMINI_EVENTS}


@pytest.fixture
def hook(relayctl, store_dir):
    relayctl.setup("init", preset="overlord")
    # These tests are about the hand-over itself, one event after another: no interrupt
    # interval between them (test_interrupt_interval_holds_mail_at_a_tools_end_until_the_turns_end holds one).
    (store_dir / "config.json").write_text(json.dumps({"coordination": {"interrupt_interval": "0s"}}))

    def run(event: str, agent: str = "inferno", raw: str | None = None, program: str = "claude", **fields):
        if raw is None:
            raw = json.dumps({**BY_PROGRAM[program][event], **fields})
        return relayctl("hook", program, agent=agent, input=raw, check=False)

    return run


@pytest.mark.slow
@pytest.mark.parametrize("event", ["UserPromptSubmit", "PostToolUse"])
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


@pytest.mark.slow
def test_interrupt_interval_holds_mail_at_a_tools_end_until_the_turns_end(relayctl, hook, store_dir) -> None:
    (store_dir / "config.json").write_text(json.dumps({"coordination": {"interrupt_interval": "1h"}}))
    relayctl("send", "inferno", "first finding", agent="strategist")
    assert "first finding" in json.loads(hook("PostToolUse").stdout)["hookSpecificOutput"]["additionalContext"]
    relayctl("send", "inferno", "second finding", agent="strategist")
    assert hook("PostToolUse").stdout == ""  # inside the interval, in the middle of the turn: it waits
    assert "interrupt interval (1h)" in json.loads((store_dir / "agents" / "inferno" / "held").read_text())["why"]  # what track and status say
    relayctl("send", "inferno", "prod is down", "--priority", "urgent", agent="overlord")
    urgent = json.loads(hook("PostToolUse").stdout)["hookSpecificOutput"]["additionalContext"]
    assert "second finding" in urgent and "prod is down" in urgent  # urgent mail goes at once, with what waited
    relayctl("send", "inferno", "third finding", agent="strategist")
    assert hook("PostToolUse").stdout == ""
    assert "third finding" in json.loads(hook("Stop").stdout)["reason"]  # the turn's end interrupts nothing


@pytest.mark.slow
def test_stop_hands_mail_over_as_the_reason_to_continue(relayctl, hook) -> None:
    assert hook("Stop").stdout == ""  # nothing unread: Claude may stop
    relayctl("send", "inferno", "Next: API endpoints", agent="overlord")
    answer = json.loads(hook("Stop").stdout)
    assert answer["decision"] == "block" and "Next: API endpoints" in answer["reason"]
    assert hook("Stop").stdout == ""


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_prompt_that_is_relays_peer_message_is_marked_read_and_not_handed_over_again(relayctl, hook) -> None:
    """Claude Code's inbox: the prompt is the peer message relay wrote, with the mail's whole
    text; its prompt hook marks that mail read and names it, and hands over only the rest
    (a message cut in the peer message, mail the prompt does not carry)."""
    from relayd.arrival.claude_inbox_format import PREVIEW, mail_text

    relayctl("send", "inferno", "Review auth.go\n\nthe token check", agent="strategist")
    relayctl("send", "inferno", "the long log\n\n" + "y" * (PREVIEW + 100), agent="strategist")
    relayctl("send", "inferno", "not in the prompt", agent="overlord")
    unread = json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)
    whole, cut, _ = unread
    prompt = mail_text("inferno", whole) + "\n\n" + mail_text("inferno", cut)
    context = json.loads(hook("UserPromptSubmit", prompt=prompt).stdout)["hookSpecificOutput"]["additionalContext"]
    assert f"the mail in this prompt ({whole['id']}) is now marked read" in context
    assert "the token check" not in context  # the prompt has it: not a second time
    assert "y" * (PREVIEW + 100) in context and "not in the prompt" in context  # the cut one whole, the other one
    assert json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout) == []


@pytest.mark.slow
def test_a_person_quoting_a_peer_head_in_their_prompt_hides_no_mail(relayctl, hook) -> None:
    relayctl("send", "inferno", "the real one", agent="strategist")
    [m] = json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)
    forged = f"relay mail for inferno from overlord (id {m['id']})\nsubject: something else"  # another sender's name on its id
    context = json.loads(hook("UserPromptSubmit", prompt=forged).stdout)["hookSpecificOutput"]["additionalContext"]
    assert "the real one" in context and "marked read in relay: no need" not in context


def test_bad_input_is_one_line_and_non_blocking(hook) -> None:
    for raw in ("{not json", "[1, 2]", ""):
        proc = hook("UserPromptSubmit", raw=raw)
        assert proc.returncode == 1  # non-blocking for Claude Code (2 would block the prompt)
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_a_session_without_a_relay_identity_runs_the_hook_as_a_silent_no_op(relayctl, hook) -> None:
    # A session relay did not start, in a repository with relay's hooks: nothing handed over, no error.
    relayctl("send", "inferno", "still here", agent="overlord")
    for event in ("Stop", "UserPromptSubmit"):
        proc = relayctl("hook", "claude", input=json.dumps(EVENTS[event]), check=False)
        assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert _unread(relayctl) == ["still here"]


@pytest.mark.parametrize("program", ["claude", "codex", "gemini"])
def test_a_session_without_a_relay_identity_is_told_once_at_its_start_how_to_be_an_agent(relayctl, hook, program: str) -> None:
    """The one line the program shows the person (systemMessage) comes at the session's
    start only: not at a clear or a compaction, not at any later event, and no mail goes."""
    relayctl("send", "inferno", "still here", agent="overlord")
    events = BY_PROGRAM[program]
    start = relayctl("hook", program, input=json.dumps(events["SessionStart"]), check=False)
    assert start.returncode == 0 and start.stderr == ""
    told = json.loads(start.stdout)
    assert list(told) == ["systemMessage"] and f"RELAY_AGENT=NAME {program}" in told["systemMessage"] and "relayctl up" in told["systemMessage"]
    for event in [name for name in events if name != "SessionStart"]:
        proc = relayctl("hook", program, input=json.dumps(events[event]), check=False)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    compacted = relayctl("hook", program, input=json.dumps({**events["SessionStart"], "source": "compact"}), check=False)
    assert (compacted.returncode, compacted.stdout) == (0, "")
    assert _unread(relayctl) == ["still here"]


def test_copilot_and_opencode_sessions_without_a_relay_identity_are_told_their_own_way(relayctl, hook) -> None:
    """Copilot shows the person no hook's text: its model gets the line, to pass on; relay's
    OpenCode plugin shows the `notice` as a toast. Once, at the session's start; no mail goes."""
    relayctl("send", "inferno", "still here", agent="overlord")
    copilot = json.loads(relayctl("hook", "copilot", "sessionStart", input=json.dumps({"sessionId": "s1", "timestamp": 1, "source": "new"})).stdout)
    assert list(copilot) == ["additionalContext"] and "tell the person" in copilot["additionalContext"]
    assert "RELAY_AGENT=NAME copilot" in copilot["additionalContext"]
    later = relayctl("hook", "copilot", "userPromptSubmitted", input=json.dumps({"sessionId": "s1", "timestamp": 2, "prompt": "hi"}))
    assert later.stdout == ""
    opencode = json.loads(relayctl("hook", "opencode", input=json.dumps({"hook_event_name": "session.created", "session_id": "ses_1"})).stdout)
    assert list(opencode) == ["notice"] and "RELAY_AGENT=NAME opencode" in opencode["notice"]
    assert relayctl("hook", "opencode", input=json.dumps({"hook_event_name": "chat.message", "session_id": "ses_1"})).stdout == ""
    assert _unread(relayctl) == ["still here"]


def _unread(relayctl) -> list[str]:
    return [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)]


@pytest.mark.parametrize(("program", "event"), [
    ("codex", "UserPromptSubmit"), ("codex", "PostToolUse"),
    ("gemini", "BeforeAgent"), ("gemini", "AfterTool"),
])
def test_codex_and_gemini_events_get_the_mail_as_context(relayctl, hook, program: str, event: str) -> None:
    relayctl("send", "inferno", "Review auth.go please", agent="strategist")
    answer = json.loads(hook(event, program=program).stdout)
    assert answer == {"hookSpecificOutput": {"hookEventName": event, "additionalContext": answer["hookSpecificOutput"]["additionalContext"]}}
    assert "Review auth.go please" in answer["hookSpecificOutput"]["additionalContext"]
    assert _unread(relayctl) == []


@pytest.mark.slow
@pytest.mark.parametrize(("program", "event"), [("claude", "Stop"), ("codex", "Stop"), ("gemini", "AfterAgent")])
def test_the_stop_continues_once_and_never_again_in_the_continuation(relayctl, hook, program: str, event: str) -> None:
    relayctl("send", "inferno", "Next: API endpoints", agent="overlord")
    answer = json.loads(hook(event, program=program).stdout)
    assert answer["decision"] == "block" and "Next: API endpoints" in answer["reason"]
    # Mail that comes while the continued turn runs is not a reason to continue again:
    # the program says so with stop_hook_active, and the mail waits for the next prompt.
    relayctl("send", "inferno", "And the docs", agent="overlord")
    again = hook(event, program=program, stop_hook_active=True)
    assert again.returncode == 0 and again.stdout == ""
    assert _unread(relayctl) == ["And the docs"]


@pytest.mark.slow
@pytest.mark.parametrize(("program", "event"), [("claude", "PreToolUse"), ("claude", "SubagentStop"), ("gemini", "BeforeTool")])
def test_events_that_cannot_carry_mail_leave_it_unread(relayctl, hook, program: str, event: str) -> None:
    relayctl("send", "inferno", "still here", agent="overlord")
    proc = hook(event, program=program)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert _unread(relayctl) == ["still here"]


def test_another_programs_event_is_a_one_line_error_naming_the_right_hook(relayctl, hook) -> None:
    relayctl("send", "inferno", "still here", agent="overlord")
    proc = hook("BeforeAgent", raw=json.dumps(GEMINI_EVENTS["BeforeAgent"]), program="claude")
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "relayctl hook gemini" in proc.stderr
    unknown = hook("Stop", raw=json.dumps({**EVENTS["Stop"], "hook_event_name": "Stopp"}), program="codex")
    assert unknown.returncode == 1 and "Stopp" in unknown.stderr and unknown.stderr.count("\n") == 1
    assert _unread(relayctl) == ["still here"]


def _state(store_dir: Path) -> str | None:
    return program_state(store_dir / "agents" / "inferno")


@pytest.mark.slow
@pytest.mark.parametrize("program", ["claude", "codex", "gemini"])
def test_session_start_reports_the_prompt_and_leaves_the_mail_for_the_trigger(relayctl, hook, store_dir: Path, program: str) -> None:
    # Context at session start would reach the model only with the person's first prompt,
    # while counting as read: the mail stays unread, and the idle state lets its trigger go.
    relayctl("send", "inferno", "still here", agent="overlord")
    proc = hook("SessionStart", program=program)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert _unread(relayctl) == ["still here"]
    assert _state(store_dir) == "idle"


# What each program's events say about its session, in the order a turn runs them.
TURNS = {
    "claude": [("SessionStart", {}, "idle"), ("UserPromptSubmit", {}, "working"),
               ("PermissionRequest", {"tool_name": "Bash", "tool_input": {"command": "touch x"}}, "asking"),
               ("PostToolUse", {}, "working"), ("Notification", {"message": "Claude needs your permission to use Bash", "notification_type": "permission_prompt"}, "asking"),
               ("Stop", {}, "idle"), ("Notification", {"message": "Claude is waiting for your input", "notification_type": "idle_prompt"}, "idle"),
               ("SessionEnd", {"reason": "exit"}, "ended")],
    "codex": [("SessionStart", {}, "idle"), ("UserPromptSubmit", {}, "working"),
              ("PermissionRequest", {"tool_name": "exec_command", "tool_input": {}}, "asking"), ("PostToolUse", {}, "working"),
              ("Stop", {}, "idle")],
    "gemini": [("SessionStart", {}, "idle"), ("BeforeAgent", {}, "working"),
               ("Notification", {"message": "Allow execution of [Shell]?", "notification_type": "ToolPermission", "details": {}}, "asking"),
               ("AfterTool", {}, "working"), ("AfterAgent", {}, "idle"), ("SessionEnd", {"reason": "exit"}, "ended")],
}


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(TURNS))
def test_each_lifecycle_event_records_the_sessions_state(relayctl, hook, store_dir: Path, program: str) -> None:
    events = BY_PROGRAM[program]
    for name, fields, expected in TURNS[program]:
        raw = json.dumps({**events.get(name, events["Stop" if program != "gemini" else "AfterAgent"]), "hook_event_name": name, **fields})
        proc = hook(name, raw=raw, program=program)
        assert proc.returncode == 0 and proc.stdout == "", (name, proc.stderr)
        assert _state(store_dir) == expected, name


@pytest.mark.slow
def test_a_stop_continued_with_mail_stays_working_and_the_continuations_stop_goes_idle(relayctl, hook, store_dir: Path) -> None:
    relayctl("send", "inferno", "Next: API endpoints", agent="overlord")
    assert json.loads(hook("Stop").stdout)["decision"] == "block"
    assert _state(store_dir) == "working"  # the session goes on with the mail: no trigger now
    relayctl("send", "inferno", "And the docs", agent="overlord")
    assert hook("Stop", stop_hook_active=True).stdout == ""
    assert _state(store_dir) == "idle"  # at its prompt with mail waiting: the trigger's turn
    assert _unread(relayctl) == ["And the docs"]


# GitHub Copilot CLI 1.0.102 running a repository's .claude/settings.json: Claude Code's
# event names, its own fields (a timestamp, no transcript_path), COPILOT_CLI=1 in the
# environment (what tests/programs/test_copilot_hooks.py saw the real program send).
_COPILOT_AS_CLAUDE = {"session_id": "a4d3e7d6-15cc-414e-ad74-97c026f99ea8", "timestamp": "2026-11-26T21:27:38.571Z",
                      "cwd": "/home/dev/oathkeeper"}


@pytest.mark.slow
@pytest.mark.parametrize("event", ["UserPromptSubmit", "PostToolUse"])
def test_copilot_running_the_claude_hooks_gets_the_mail_in_its_own_shape(relayctl, store_dir: Path, event: str) -> None:
    relayctl("init", "--preset", "overlord")
    (store_dir / "config.json").write_text(json.dumps({"coordination": {"interrupt_interval": "0s"}}))  # two hand-overs in a row
    relayctl("send", "inferno", "Rebasing main, hold commits", agent="overlord")
    relayctl.env["COPILOT_CLI"] = "1"
    try:
        raw = json.dumps({**_COPILOT_AS_CLAUDE, "hook_event_name": event, "prompt": "carry on"})
        answer = json.loads(relayctl("hook", "claude", agent="inferno", input=raw).stdout)
        assert "hookSpecificOutput" not in answer and "Rebasing main, hold commits" in answer["additionalContext"]
        # Claude Code started from a Copilot shell inherits COPILOT_CLI but sends its own events.
        relayctl("send", "inferno", "Second note", agent="overlord")
        claude = json.loads(relayctl("hook", "claude", agent="inferno", input=json.dumps(EVENTS[event])).stdout)
        assert "Second note" in claude["hookSpecificOutput"]["additionalContext"]
    finally:
        del relayctl.env["COPILOT_CLI"]


@pytest.mark.slow
def test_copilot_running_the_claude_permission_hook_in_its_own_shape_is_not_refused(relayctl, store_dir: Path) -> None:
    """Copilot 1.0.102 runs a .claude/settings.json PermissionRequest hook with its own event
    (as the real program sent it): a failing hook is "deny" to Copilot, so relay's tools
    (even allowed with --allow-tool) were refused in a repository with relay's Claude Code hooks."""
    relayctl("init", "--preset", "overlord")
    relayctl("send", "inferno", "Rebasing main, hold commits", agent="overlord")
    relayctl.env["COPILOT_CLI"] = "1"
    try:
        raw = json.dumps({"hookName": "permissionRequest", "sessionId": "119678f7-392c-4e7e-af58-1e1ee7b17cce", "timestamp": 1795738471867,
                          "cwd": "/home/dev/oathkeeper", "toolName": "relay-send_message", "toolInput": {"to": "overlord"}, "permissionSuggestions": []})
        done = relayctl("hook", "claude", agent="inferno", input=raw, check=False)
    finally:
        del relayctl.env["COPILOT_CLI"]
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")  # no decision: Copilot's own rules decide
    assert _state(store_dir) == "asking"
    assert _unread(relayctl) == ["Rebasing main, hold commits"]  # a permission question carries no mail


@pytest.mark.slow
def test_where_relays_copilot_hooks_run_too_the_claude_hooks_leave_copilots_mail_to_them(relayctl, store_dir: Path, short_tmp: Path) -> None:
    """A repository with relay's Claude Code hooks and its Copilot hooks (a team of both):
    Copilot runs both sets at once and shows its model one hook's context, so mail taken by
    the other was lost. The Claude hooks, run by Copilot there, take nothing."""
    relayctl("init", "--preset", "overlord")
    project = short_tmp / "project"
    (project / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    for program in ("claude", "copilot"):
        relayctl("hooks", "install", "--for", program, "--project", str(project))
    relayctl("send", "inferno", "Rebasing main, hold commits", agent="overlord")
    relayctl.env["COPILOT_CLI"] = "1"
    try:
        for event in ("UserPromptSubmit", "PostToolUse", "Stop"):
            raw = json.dumps({**_COPILOT_AS_CLAUDE, "cwd": str(project / "src"), "hook_event_name": event, "prompt": "carry on"})
            assert relayctl("hook", "claude", agent="inferno", input=raw).stdout == ""
    finally:
        del relayctl.env["COPILOT_CLI"]
    assert _unread(relayctl) == ["Rebasing main, hold commits"]
    own = relayctl("hook", "copilot", "userPromptSubmitted", agent="inferno", input=json.dumps({"sessionId": "s1", "timestamp": 1, "cwd": str(project)}))
    assert "Rebasing main, hold commits" in json.loads(own.stdout)["additionalContext"]
    # Claude Code itself, in the same repository, still gets its mail from them.
    relayctl("send", "inferno", "Second note", agent="overlord")
    claude = json.loads(relayctl("hook", "claude", agent="inferno", input=json.dumps({**EVENTS["UserPromptSubmit"], "cwd": str(project)})).stdout)
    assert "Second note" in claude["hookSpecificOutput"]["additionalContext"]


def test_copilots_session_start_beside_its_first_prompt_does_not_say_idle(relayctl, store_dir: Path) -> None:
    """Copilot 1.0.102 starts its session with the first prompt, running sessionStart (and a
    .claude/settings.json SessionStart) at the same time as the prompt's hook: the one that
    ends last must not leave the session "idle" while its first turn starts (a second
    trigger typed then lost the first prompt's mail in a five-program team)."""
    relayctl("init", "--preset", "overlord")
    event = {"sessionId": "s1", "timestamp": 1795728509791}
    relayctl("hook", "copilot", "userPromptSubmitted", agent="inferno", input=json.dumps(event))
    assert _state(store_dir) == "working"
    relayctl("hook", "copilot", "sessionStart", agent="inferno", input=json.dumps(event))
    relayctl.env["COPILOT_CLI"] = "1"
    try:
        relayctl("hook", "claude", agent="inferno", input=json.dumps({**_COPILOT_AS_CLAUDE, "hook_event_name": "SessionStart", "source": "new"}))
    finally:
        del relayctl.env["COPILOT_CLI"]
    assert _state(store_dir) == "working"
    relayctl("hook", "claude", agent="inferno", input=json.dumps(EVENTS["SessionStart"]))  # Claude Code's own: at its prompt
    assert _state(store_dir) == "idle"


@pytest.mark.slow
@pytest.mark.parametrize(("program", "event", "key"), [("copilot", "userPromptSubmitted", "additionalContext"),
                                                       ("copilot", "postToolUse", "additionalContext"),
                                                       ("copilot", "agentStop", "reason"),
                                                       ("opencode", "chat.message", "additionalContext"),
                                                       ("opencode", "session.idle", "reason")])
def test_copilot_and_opencode_take_the_mail_at_the_top_level(relayctl, program: str, event: str, key: str) -> None:
    relayctl("init", "--preset", "overlord")
    relayctl("send", "inferno", "Rebasing main, hold commits", agent="overlord")
    if program == "copilot":  # its own hooks name no event: the entry passes it
        proc = relayctl("hook", "copilot", event, agent="inferno", input=json.dumps({"sessionId": "s1", "timestamp": 1795728509791}))
    else:
        proc = relayctl("hook", "opencode", agent="inferno", input=json.dumps({"hook_event_name": event, "session_id": "ses_1"}))
    answer = json.loads(proc.stdout)
    assert "Rebasing main, hold commits" in answer[key]
    if program == "opencode":
        # read only once the model's request carried it: the plugin passes the ids back at the first streamed step
        assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)] == ["Rebasing main, hold commits"]
        relayctl("hook", "opencode", agent="inferno", input=json.dumps({"hook_event_name": "message.part.updated", "session_id": "ses_1",
                                                                        "handed": answer["handed"]}))
    assert json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout) == []


@pytest.mark.slow
def test_opencode_marks_read_only_what_its_hooks_handed_over_and_is_still_unread(relayctl) -> None:
    """At the model's first step the mail chat.message handed over is read; mail that came
    after the hand-over stays unread, and a second report of the same step reads nothing more."""
    relayctl("init", "--preset", "overlord")
    relayctl("send", "inferno", "first", agent="overlord")
    handed = json.loads(relayctl("hook", "opencode", agent="inferno", input=json.dumps({"hook_event_name": "chat.message", "session_id": "s"})).stdout)["handed"]
    relayctl("send", "inferno", "second", agent="overlord")
    relayctl("hook", "opencode", agent="inferno", input=json.dumps({"hook_event_name": "message.part.updated", "session_id": "s", "handed": handed}))
    assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)] == ["second"]
    relayctl("hook", "opencode", agent="inferno", input=json.dumps({"hook_event_name": "message.part.updated", "session_id": "s", "handed": handed}))
    assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)] == ["second"]
