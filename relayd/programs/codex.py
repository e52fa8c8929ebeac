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

A failed model call (the API refusing the request) runs none of its hooks, not even Stop
(0.169.0; its events are SessionStart, UserPromptSubmit, PreToolUse, PermissionRequest,
PostToolUse, PreCompact, PostCompact, PreModelRequest, SubagentStart, SubagentStop,
Interrupt, Stop, SessionEnd): no `Hooks.failed`, so mail handed into that turn stays read,
and the session stays "working" until the person's next prompt.
"""

from __future__ import annotations

import os

from .program import SERVER_NAME, Door, Hooks, Launch, Mcp, Program, Question, Screen, Settings, Trust


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


QUEUE_SWITCH = "RELAY_CODEX_QUEUE"  # 0 in a Codex session's environment: relay uses its pane trigger and hooks only
_HEX = frozenset("0123456789abcdef")


def thread_of(event: dict) -> str | None:
    """The session's thread id from one of its hook events (`session_id`, a UUID); None when
    it carries no usable one. (No regular expression: `relayctl hook` loads this at every event.)"""
    value = event.get("session_id")
    parts = value.split("-") if isinstance(value, str) else []
    return value if [len(p) for p in parts] == [8, 4, 4, 4, 12] and all(set(p) <= _HEX for p in parts) else None


def is_codex_exe(exe: str) -> bool:
    """Whether a process's executable is Codex's native binary (not the node launcher)."""
    return os.path.basename(exe) in ("codex", "codex.exe")


def _codex_above() -> int:
    """The nearest ancestor of this hook process running Codex's binary (Codex -> a shell ->
    relayctl); 0 when there is none."""
    pid, hops = os.getppid(), 0
    while pid > 1 and hops < 8:
        try:
            if is_codex_exe(os.readlink(f"/proc/{pid}/exe")):
                return pid
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return 0
        hops += 1
    return 0


def _queue(environ, event: dict) -> dict:
    """Its own queue (`codex queue --thread ID`): the session's thread, the Codex process it
    runs under and its CODEX_HOME (relayd.arrival.codex_queue)."""
    home = environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    params = {"thread": thread_of(event) or "", "pid": _codex_above(), "codex_home": os.path.abspath(home)}
    if environ.get(QUEUE_SWITCH) == "0":
        params.update(thread="", missing=f"{QUEUE_SWITCH}=0 in its session turns relay's use of `codex queue` off")
    elif not params["thread"]:
        params["missing"] = "its hook event carried no session_id"
    elif not params["pid"]:
        params["missing"] = "relay's hook found no Codex process above it"
    return params


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
    door=Door(operation="codex_queue", events=("SessionStart", "UserPromptSubmit"), report=_queue),
    screen=Screen(
        ready=("Ask Codex to do anything",),
        prompt="›",
        questions=("Would you like to run the following command?", "Press enter to confirm or esc to cancel", "Trust this folder",
                   "hooks are new or changed", "Hooks need review"),
        first_start=(Question("Trust this folder?", trust=True),),
    ),
)
