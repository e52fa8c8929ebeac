"""Which state an agent program is in after each of its hook events: the table of
relayd.arrival.program_state, kept apart from the store code so that `relayctl hook`, which runs at
every event of every session, loads only this (relayctl.fast).
"""

from __future__ import annotations

STATES: tuple[str, ...] = ("idle", "working", "asking", "ended", "stopped")

# (program, hook event) -> state; None: the event says nothing about the state.
_BY_EVENT: dict[tuple[str, str], str] = {
    **{(p, "SessionStart"): "idle" for p in ("claude", "codex", "gemini")},
    **{(p, e): "working" for p in ("claude", "codex") for e in ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure")},
    **{(p, "PermissionRequest"): "asking" for p in ("claude", "codex")},
    **{(p, "Stop"): "idle" for p in ("claude", "codex")},
    ("claude", "StopFailure"): "idle",
    ("codex", "Interrupt"): "idle",
    **{(p, "SessionEnd"): "ended" for p in ("claude", "codex", "gemini")},
    ("gemini", "BeforeAgent"): "working",
    ("gemini", "BeforeTool"): "working",
    ("gemini", "AfterTool"): "working",
    ("gemini", "AfterAgent"): "idle",
    # GitHub Copilot CLI's own hooks (.github/hooks); under .claude/settings.json it sends
    # Claude Code's names, which the "claude" rows read the same way.
    # No row for sessionStart: Copilot (1.0.102) starts its session only with the first
    # prompt and runs sessionStart beside userPromptSubmitted, so "idle" from it could land
    # after "working" and let a second trigger in while the first turn starts.
    **{("copilot", e): "working" for e in ("userPromptSubmitted", "preToolUse", "postToolUse", "postToolUseFailure")},
    ("copilot", "permissionRequest"): "asking",
    ("copilot", "agentStop"): "idle",
    ("copilot", "sessionEnd"): "ended",
    # OpenCode, as relay's plugin for it reports its events.
    ("opencode", "session.created"): "idle",
    **{("opencode", e): "working" for e in ("chat.message", "tool.execute.after", "permission.replied", "question.replied",
                                            "question.rejected")},
    **{("opencode", e): "asking" for e in ("permission.asked", "question.asked")},
    ("opencode", "session.idle"): "idle",
    ("opencode", "session.deleted"): "ended",
}
# Events that end a turn in failure (the model call refused: "Not logged in", a lost
# connection): mail the hook handed into that turn is unread again (relayd.arrival.program_state).
TURN_FAILED: frozenset[tuple[str, str]] = frozenset({("claude", "StopFailure")})
# Notification events: what each kind of notification says.
_BY_NOTIFICATION: dict[tuple[str, str], str] = {
    ("claude", "permission_prompt"): "asking",
    ("claude", "elicitation_dialog"): "asking",
    ("claude", "idle_prompt"): "idle",
    ("gemini", "ToolPermission"): "asking",
}


def state_after(program: str, event: dict, continued: bool = False) -> str | None:
    """The state a program is in once it has run its hook for `event` (the hook's JSON on
    stdin); `continued`: the hook's answer to a turn's end keeps the session working."""
    name = event.get("hook_event_name")
    if not isinstance(name, str):
        return None
    if name == "Notification":
        kind = event.get("notification_type")
        return _BY_NOTIFICATION.get((program, kind)) if isinstance(kind, str) else None
    state = _BY_EVENT.get((program, name))
    if state == "idle" and continued and name in ("Stop", "AfterAgent", "agentStop", "session.idle"):
        return "working"
    return state
