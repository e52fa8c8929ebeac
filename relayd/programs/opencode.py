"""OpenCode (npm opencode-ai, tested 1.18.33): what relay knows about it.

It runs no commands as hooks, but loads every `.opencode/plugin/*.js`: relay installs its
plugin (relayctl/opencode_plugin.js) there as `relay.js`, which passes OpenCode's events on
to `relayctl hook opencode` under OpenCode's own names and reads back a top-level
`additionalContext` or a block decision. The plugin also starts a turn for mail to an idle
session, so nothing is ever typed into its pane (notify "hook").

relay-mcp goes under `mcp` of the project's opencode.json (a local server is one argv list),
with the role `{env:RELAY_AGENT}`, which OpenCode fills in from each pane's environment.
OpenCode finds its project from $PWD, not its working directory.

Mail the plugin hands over counts as read only at the model's first streamed step (the
`message.part.updated` event of a `step-start` part, `Hooks.read_at`): OpenCode runs
`chat.message` 1-1.5 s before its model request (and `chat.params` / `chat.headers` run
before the request is sent, so a receipt there could still precede it), while a step starts
only once the model's answer began, after its request. A model call that fails before that
leaves the mail unread; one that fails later (`session.error`) puts it back as unread, and
the plugin starts no turn of its own for that session until its person's next prompt, so a
model that keeps failing is not asked again and again. A turn the person stops (Esc) before
the answer began never showed the model its mail: it stays unread, waits for that next prompt
too, and its senders' `track` says the person stopped it (`Hooks.stopped`).

A session without RELAY_AGENT: the plugin's session.created report gets relay's line on how
to start it as an agent (`notice`), which the plugin shows as a toast in OpenCode's TUI.

The first turn of each OpenCode process is slow to reach the model, by OpenCode's own work:
before its first request it sets up its snapshot of the project (a git repository of its own,
the working tree added) and asks for the session's title; 1.5 s on a quiet machine, 6-17 s
with five programs starting on two cores (docs/team.md; `"snapshot": false` skips the first).

It asks no folder trust question, and may take a while to draw at its first start (it
npm-installs its plugin package into the folder): `up` watches it as it watches any command.
"""

from __future__ import annotations

import os

from .program import Hooks, Launch, Mcp, Program, Screen, Settings, json_servers


ABORTED = "MessageAbortedError"  # OpenCode's session.error for a turn the person (or OpenCode's end) stopped


def _argv(mcp: str | None, channels: tuple[str, ...], model: list[str], args: list[str]) -> list[str]:
    return ["opencode", *model, *args]


PROGRAM = Program(
    name="opencode",
    title="OpenCode",
    package="opencode-ai",
    tested="1.18.33",
    hooks=Hooks(
        context=("chat.message", "tool.execute.after"),
        stop="session.idle",
        state=("session.created", "permission.asked", "question.asked", "permission.replied", "question.replied",
               "question.rejected", "session.deleted", "session.error"),
        other=(),
        read_at="message.part.updated",
        failed=("session.error",),
        # the person's stop (Esc) is reported as session.error too, and is no failed model call;
        # relay's plugin reports it only when the turn's mail had not reached the model yet
        failure=lambda event: event.get("error") != ABORTED,
        stopped=lambda event: event.get("error") == ABORTED,
        states={"session.created": "idle", "chat.message": "working", "tool.execute.after": "working", "message.part.updated": "working",
                "session.error": "idle",
                "permission.replied": "working", "question.replied": "working", "question.rejected": "working",
                "permission.asked": "asking", "question.asked": "asking", "session.idle": "idle", "session.deleted": "ended"},
        answer="additionalContext",
        start="session.created",
        shown="notice",  # relay's plugin shows it as a toast in OpenCode's TUI
        help="chat.message, tool.execute.after and session.idle hand mail over, which counts as read at the model's first "
             "streamed step (message.part.updated, a step-start part); session.error (a failed model call) makes the mail of "
             "that turn unread again (one the person stopped before the answer began says so to its senders); session.created, permission.asked, question.asked, their replies and session.deleted "
             "report the session's state; relay's plugin sends them",
    ),
    settings=Settings(
        hooks_file=os.path.join(".opencode", "plugin", "relay.js"),
        layout="plugin",
        server_file="opencode.json",
        server_key="mcp",
        note="OpenCode loads the plugin when it next starts in {project} (no trust question); relay's tools come from "
             "`relayctl mcp-config --for opencode` in opencode.json",
    ),
    mcp=Mcp(
        build=json_servers("mcp", lambda command, args, env: {"type": "local", "command": [command, *args], "environment": env,
                                                               "enabled": True}),
        suffix=".json",
        given="project",
        pane_agent="{env:RELAY_AGENT}",
        help="the mcp block of opencode.json (in the folder OpenCode starts in)",
    ),
    launch=Launch(reads=("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                  "OPENCODE_CONFIG"), argv=_argv, env=lambda repo: {"PWD": os.path.abspath(repo)}, arrival="hook"),
    screen=Screen(),
)
