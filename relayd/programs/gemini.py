"""Gemini CLI (npm @google/gemini-cli, tested 0.61.0): what relay knows about it.

Hooks: `.gemini/settings.json`, in Claude Code's shape with its own event names
(BeforeAgent, AfterTool, AfterAgent); each entry carries a name, `relay`, which
`/hooks disable relay` refers to. It appends the context to the prompt or the tool's
result and sends a blocked AfterAgent's reason as the next prompt. Its Notification
event's `notification_type` ToolPermission means the person is asked.

relay-mcp goes into the same settings.json (`mcpServers.relay`, `"trust": true` so relay's
tools are not asked about): one project-wide file for every Gemini pane, so the server's
role is `$RELAY_AGENT`, which Gemini CLI expands from each pane's own environment.

Folder trust is on unless `security.folderTrust.enabled` is false; project settings, and
so relay's hooks and server, load only in a trusted folder. At the first start in a
folder it draws its prompt ("Type your message") and then the trust dialog over it: the
prompt alone is not yet ready (`Screen.late`). Its review of project hooks it has not seen
is no question: a warning ("WARNING: The following project-level hooks have been detected
in this workspace: - relay ...") after which it trusts them itself
(~/.gemini/trusted_hooks.json); nothing to answer.

A turn whose model call fails (an API error) runs no hook of its own, but its AfterAgent
says `"prompt_response": "[no response text]"`: that AfterAgent puts the mail handed into the
turn back as unread and hands nothing on (`Hooks.failure`). A turn that did succeed with
no text at all, or one the person cancelled before any text came, reads the same, and its
mail comes again with the next prompt: shown twice, never lost. `gemini -p` exits at the error without an AfterAgent: its mail stays read.
"""

from __future__ import annotations

import os

from .program import Hooks, Launch, Mcp, Program, Question, Screen, Settings, Trust, json_servers


NO_RESPONSE = "[no response text]"  # AfterAgent's prompt_response when the turn's model call failed (0.61.0)


def _argv(mcp: str | None, channels: tuple[str, ...], model: list[str], args: list[str]) -> list[str]:
    return ["gemini", *model, *args]


def _trust_file(env: dict[str, str]) -> str:
    return env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".gemini",
                                                                         "trustedFolders.json")


PROGRAM = Program(
    name="gemini",
    title="Gemini CLI",
    package="@google/gemini-cli",
    tested="0.61.0",
    hooks=Hooks(
        context=("BeforeAgent", "AfterTool"),
        stop="AfterAgent",
        state=("SessionStart", "Notification", "SessionEnd"),
        other=("BeforeTool", "PreCompress", "BeforeModel", "AfterModel", "BeforeToolSelection"),
        states={"SessionStart": "idle", "BeforeAgent": "working", "BeforeTool": "working", "AfterTool": "working",
                "AfterAgent": "idle", "SessionEnd": "ended"},
        notifications={"ToolPermission": "asking"},
        # No event of its own reports a failed model call; in a session (not `gemini -p`, which
        # exits with the error) AfterAgent still runs, with this text for the model's answer.
        failed=("AfterAgent",),
        failure=lambda event: event.get("prompt_response") == NO_RESPONSE,
        matcher={"AfterTool": "*"},
        entry_fields={"name": "relay"},
        start="SessionStart",
        shown="systemMessage",  # shown in the session, above the prompt
        help="BeforeAgent, AfterTool and AfterAgent hand mail over; SessionStart, Notification and SessionEnd report the "
             "session's state; an AfterAgent with no response text (a failed model call) makes the mail of that turn unread again",
    ),
    settings=Settings(
        hooks_file=os.path.join(".gemini", "settings.json"),
        layout="groups",
        server_file=os.path.join(".gemini", "settings.json"),
        server_key="mcpServers",
        note="Gemini CLI runs project hooks only in a trusted folder: trust {project} when Gemini asks (or with /permissions; "
             "~/.gemini/trustedFolders.json keeps the choice); headless runs in an untrusted folder stop with an error",
    ),
    mcp=Mcp(
        build=json_servers("mcpServers", lambda command, args, env: {"command": command, "args": args, "env": env, "trust": True}),
        suffix=".json",
        given="project",
        pane_agent="$RELAY_AGENT",
        help="the mcpServers block of .gemini/settings.json (Gemini CLI connects MCP\n"
             "servers only in a folder you have trusted)",
    ),
    launch=Launch(reads=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
                  "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_GENAI_USE_VERTEXAI", "GEMINI_MODEL"), argv=_argv),
    trust=Trust(file=_trust_file, format="folder-map"),
    screen=Screen(
        signed_out=("Enter Gemini API Key", "How would you like to authenticate"),
        ready=("Type your message",),
        prompt=">",
        questions=("Do you trust the files in this folder?", "Allow execution of", "Waiting for user confirmation"),
        first_start=(Question("Do you trust the files in this folder?", trust=True),),
        late=3.0,
    ),
)
