"""Claude Code (npm @anthropic-ai/claude-code, tested 2.1.332): what relay knows about it.

Hooks: `.claude/settings.json`, `{"hooks": {EVENT: [{"matcher"?, "hooks": [{"type": "command",
"command"}]}]}}`; the context answer is `hookSpecificOutput.additionalContext`, a stop is kept
going by `{"decision": "block", "reason"}`. Its Notification event says by its
`notification_type` whether the person is asked (permission_prompt, elicitation_dialog) or
the session is idle (idle_prompt). StopFailure ends a turn whose model call failed: idle.

relay's MCP tools are allowed in the same file (`permissions.allow: ["mcp__relay"]`): in
the default "auto" mode each relay tool call would otherwise first wait for its safety
check, an extra model request (relay's tools read and write only relay's own store).

Channels: with `--dangerously-load-development-channels server:relay` relay-mcp pushes mail
into the session; Claude Code then asks at every start whether the channel is for local
development (no setting skips it; Enter takes the preselected answer). It refuses channels
under a cloud provider's API (CLAUDE_CODE_USE_BEDROCK, _VERTEX, ...) and where the account's
channels switch is off (`cachedGrowthBookFeatures.tengu_harbor` in ~/.claude.json).

First start in a folder: the folder trust question ("Quick safety check"), the person's,
which is also its review of the project's hooks (it lists them; there is no second one);
2.1.332 may also ask "Make auto mode your default permission mode?" with Yes preselected,
which is the person's too (relay works in either mode).

GitHub Copilot CLI also runs this file's hooks (relayd.programs.copilot, its `Guest`).
"""

from __future__ import annotations

import os

from .program import SERVER_NAME, Channel, Door, Hooks, Launch, Mcp, Program, Question, Screen, Settings, Trust, json_servers

# Claude Code's switches for a cloud provider's API, where it offers no channels.
_CLOUD_PROVIDERS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CODE_USE_ANTHROPIC_AWS",
                    "CLAUDE_CODE_USE_ANTHROPIC_GOOGLE_CLOUD", "CLAUDE_CODE_USE_MANTLE")


def _channel_available(env: dict[str, str]) -> bool:
    """On Anthropic's API (no cloud provider switched on) from an account whose channels
    switch is on (docs/mcp.md)."""
    # deferred import: json loads re, and `relayctl hook` loads this module at every event
    import json

    if any((env.get(k) or os.environ.get(k, "")) not in ("", "0", "false") for k in _CLOUD_PROVIDERS):
        return False
    home = env.get("HOME") or os.environ.get("HOME") or ""
    try:
        with open(os.path.join(home, ".claude.json"), encoding="utf-8") as fh:
            features = json.load(fh).get("cachedGrowthBookFeatures") or {}
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(features, dict) and features.get("tengu_harbor") is True


def _trust_file(env: dict[str, str]) -> str:
    folder = env.get("CLAUDE_CONFIG_DIR")
    return os.path.join(folder, ".claude.json") if folder else os.path.join(env.get("HOME") or os.path.expanduser("~"), ".claude.json")


def _argv(mcp: str | None, channels: tuple[str, ...], model: list[str], args: list[str]) -> list[str]:
    return ["claude", "--mcp-config", mcp or "", *channels, *model, *args]


def _inbox(environ, event: dict) -> dict:
    """Its cross-session inbox, as the session names it to its children (relay's hooks among
    them): the socket, and where its session records are (relayd.arrival.claude_inbox)."""
    sock = environ.get("CLAUDE_CODE_MESSAGING_SOCKET") or ""
    config = environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    params = {"socket": sock, "sessions_dir": os.path.join(config, "sessions")}
    if not sock:
        off = environ.get("CLAUDE_CODE_HARBOR_KITE") == "0"
        params["missing"] = ("CLAUDE_CODE_HARBOR_KITE=0 turns its inbox off" if off else
                             "its session names no inbox (a Claude Code before 2.1.224, or cross-session messaging off)")
    return params


PROGRAM = Program(
    name="claude",
    title="Claude Code",
    package="@anthropic-ai/claude-code",
    tested="2.1.332",
    hooks=Hooks(
        context=("UserPromptSubmit", "PostToolUse"),
        stop="Stop",
        state=("SessionStart", "PermissionRequest", "Notification", "SessionEnd", "StopFailure"),
        other=("SubagentStop", "PreToolUse", "PostToolUseFailure", "PostToolBatch", "UserPromptExpansion",
               "SubagentStart", "PreCompact", "PostCompact", "PreModelSwitch", "PostModelSwitch",
               "PermissionDenied", "Setup", "TeammateIdle", "TaskCreated", "TaskCompleted", "Elicitation",
               "ElicitationResult", "ConfigChange", "WorktreeCreate", "WorktreeRemove", "InstructionsLoaded", "CwdChanged",
               "FileChanged", "DirectoryAdded", "MessageDisplay"),
        states={"SessionStart": "idle", "UserPromptSubmit": "working", "PreToolUse": "working", "PostToolUse": "working",
                "PostToolUseFailure": "working", "PermissionRequest": "asking", "Stop": "idle", "StopFailure": "idle",
                "SessionEnd": "ended"},
        notifications={"permission_prompt": "asking", "elicitation_dialog": "asking", "idle_prompt": "idle"},
        matcher={"PostToolUse": "*", "PermissionRequest": "*"},
        start="SessionStart",
        shown="systemMessage",  # shown in the session, above the prompt
        failed=("StopFailure",),
        help="UserPromptSubmit, PostToolUse and Stop hand mail over; SessionStart, PermissionRequest, Notification and "
             "SessionEnd report the session's state; StopFailure (a failed turn) makes the mail it was handed unread again",
    ),
    settings=Settings(
        hooks_file=os.path.join(".claude", "settings.json"),
        layout="groups",
        allow=(f"mcp__{SERVER_NAME}",),
        note="Claude Code runs them from the next session in {project}; an interactive `claude` first asks whether you trust "
             "the folder: answer \"Yes, I trust this folder\"",
    ),
    mcp=Mcp(
        build=json_servers("mcpServers", lambda command, args, env: {"type": "stdio", "command": command, "args": args, "env": env}),
        suffix=".json",
        given="file",
        help="the JSON file `claude --mcp-config FILE` (or a project's .mcp.json) takes;\n"
             "--server-only: the inner object `claude mcp add-json relay JSON` takes",
    ),
    launch=Launch(
        reads=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "CLAUDE_CODE_OAUTH_TOKEN",
                  "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "AWS_REGION", "AWS_PROFILE", "ANTHROPIC_VERTEX_PROJECT_ID",
                  "CLOUD_ML_REGION"),
        
        argv=_argv,
        channel=Channel(
            flags=("--dangerously-load-development-channels", f"server:{SERVER_NAME}"),
            available=_channel_available,
            question=Question("I am using this for local development", ["Enter"]),
        ),
    ),
    trust=Trust(file=_trust_file, format="projects-flag"),
    door=Door(operation="claude_inbox", events=("SessionStart", "UserPromptSubmit"), report=_inbox, prompt="prompt"),
    screen=Screen(
        signed_out=("Not logged in",),
        ready=("? for shortcuts", "shift+tab to cycle"),
        prompt="❯",
        questions=("Do you want to proceed?", "Do you want to make this edit", "Do you want to create",
                   "Make auto mode your default permission mode?",
                   # Its dialog for a peer message it holds for the person (relayd.arrival.claude_inbox),
                   # with Deny preselected: an Enter typed into it denies the message.
                   "Held message from another session"),
        first_start=(
            Question("Yes, I trust this folder", question="Quick safety check: is this a project you created or one you trust?",
                     trust=True),
            Question("Make auto mode your default permission mode?",
                     advice="Yes is preselected: Enter makes auto mode your default permission mode in every session; "
                            "choose No to keep the mode you have (relay works in either)"),
        ),
    ),
)
