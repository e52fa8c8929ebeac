"""Codex CLI (npm @openai/codex, tested 0.169.0): what relay knows about it.

Hooks: `.codex/hooks.json`, in Claude Code's shape (its JSON Schemas in the binary accept
exactly the same answers). Interrupt (the person pressed Esc) ends a turn: idle.

relay-mcp is given on the command line (`-c mcp_servers.relay={...}`, one inline TOML table:
no file to share), with `default_tools_approval_mode = "approve"`: relay's tools touch only
relay's store, and a one-shot run (where nobody can answer) would refuse them.

First start in a folder: "Trust this folder?" (the person's), then, for hooks it has not
trusted yet, "Hooks need review" ("N hooks are new or changed"). relay answers the review
("Trust all and continue": Down, Enter) only when every hook it can be about is relay's.
Codex keeps what it trusted in `[hooks.state."<hooks file>:<event>:..."]` of
$CODEX_HOME/config.toml, the file that also holds the folder trust; a hooks file written
after that record is new to it again.
"""

from __future__ import annotations

import os

from .program import SERVER_NAME, Hooks, Launch, Mcp, Program, Question, Screen, Settings, Trust


def _toml_string(text: str) -> str:
    # deferred import: json loads re, and `relayctl hook` loads this module at every event
    import json

    # A JSON string is a TOML basic string, except that TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _config(command: str, args: list[str], env: dict[str, str], name: str = SERVER_NAME) -> str:
    """Codex CLI's TOML: a `[mcp_servers.relay]` table for config.toml (or a profile)."""
    lines = [f"[mcp_servers.{name}]", f"command = {_toml_string(command)}"]
    if args:
        lines.append(f"args = [{', '.join(_toml_string(a) for a in args)}]")
    lines.append('default_tools_approval_mode = "approve"  # relay\'s tools touch only the relay store')
    lines += ["", f"[mcp_servers.{name}.env]"]
    lines += [f"{key} = {_toml_string(value)}" for key, value in env.items()]
    return "\n".join(lines) + "\n"


def _table(command: str, args: list[str], env: dict[str, str]) -> str:
    """The same server as one inline TOML table: `codex -c mcp_servers.relay=TABLE`."""
    return (
        f"{{command = {_toml_string(command)}, args = [{', '.join(_toml_string(a) for a in args)}], "
        f"env = {{{', '.join(f'{k} = {_toml_string(v)}' for k, v in env.items())}}}, "
        'default_tools_approval_mode = "approve"}'
    )


_config.inline = _table


def _argv(mcp: str | None, channels: tuple[str, ...], model: list[str], args: list[str]) -> list[str]:
    return ["codex", "-c", f"mcp_servers.{SERVER_NAME}={mcp}", *model, *args]


def _trust_file(env: dict[str, str]) -> str:
    return os.path.join(env.get("CODEX_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".codex"), "config.toml")


def _review(count: int | None, hooks_file: str, env: dict[str, str]) -> Question | None:
    """The hook review relay answers: only when every hook it can be about is relay's (the
    project's hooks file holds relay's alone and the count on the screen is theirs)."""
    # deferred import: tomllib only at `up`, never in a hook
    import tomllib

    if count is None:
        return None
    text = f"{count} hook is new or changed" if count == 1 else f"{count} hooks are new or changed"
    hooks_file = os.path.realpath(hooks_file)
    config = _trust_file({**os.environ, **env})
    try:
        with open(config, "rb") as fh:
            state = tomllib.load(fh).get("hooks", {}).get("state", {})
        trusted = sum(1 for key in state if key.startswith(hooks_file + ":"))
        expected = trusted < count or os.stat(hooks_file).st_mtime > os.stat(config).st_mtime
    except (OSError, ValueError, AttributeError):
        expected = True
    return Question(text, ["Down", "Enter"], expected)


PROGRAM = Program(
    name="codex",
    title="Codex CLI",
    package="@openai/codex",
    tested="0.169.0",
    hooks=Hooks(
        context=("UserPromptSubmit", "PostToolUse"),
        stop="Stop",
        state=("SessionStart", "PermissionRequest", "Interrupt"),
        other=("SubagentStop", "PreToolUse", "PreCompact", "PostCompact", "SessionEnd", "SubagentStart", "PreModelRequest"),
        states={"SessionStart": "idle", "UserPromptSubmit": "working", "PreToolUse": "working", "PostToolUse": "working",
                "PostToolUseFailure": "working", "PermissionRequest": "asking", "Stop": "idle", "Interrupt": "idle",
                "SessionEnd": "ended"},
        matcher={"PostToolUse": "*", "PermissionRequest": "*"},
        start="SessionStart",
        shown="systemMessage",  # shown in the session, above the prompt
        help="UserPromptSubmit, PostToolUse and Stop hand mail over; SessionStart, PermissionRequest and Interrupt report "
             "the session's state",
    ),
    settings=Settings(
        hooks_file=os.path.join(".codex", "hooks.json"),
        layout="groups",
        note="Codex CLI runs them once {project} is a trusted project and you trust the hooks: start `codex` there and accept both "
             "prompts (or review them with /hooks); `codex exec` needs both done before, or --trust --dangerously-bypass-hook-trust",
        review=_review,
    ),
    mcp=Mcp(
        build=_config,
        suffix=".config.toml",
        given="argument",
        help="TOML for ~/.codex/config.toml, a trusted project's .codex/config.toml,\n"
             "or a profile ~/.codex/NAME.config.toml (`codex -p NAME`)",
    ),
    launch=Launch(reads=("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY", "CODEX_HOME"), argv=_argv),
    trust=Trust(file=_trust_file, format="projects-table", hook_review="hooks.state"),
    screen=Screen(
        ready=("Ask Codex to do anything",),
        prompt="›",
        questions=("Would you like to run the following command?", "Press enter to confirm or esc to cancel", "Trust this folder",
                   "hooks are new or changed", "Hooks need review"),
        first_start=(Question("Trust this folder?", trust=True),),
    ),
)
