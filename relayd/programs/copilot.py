"""GitHub Copilot CLI (npm @github/copilot, tested 1.0.102): what relay knows about it.

Its own hooks are every `.github/hooks/*.json` of the repository, in its own shape:
`{"version": 1, "hooks": {EVENT: [{"type": "command", "bash": ...}]}}`, no matcher groups.
relay writes its entries into a file of its own there, `relay.json`. The event's name is not
in the JSON on stdin, so each entry names it: `relayctl hook copilot EVENT`. It reads the
context from a top-level `additionalContext` (its agentStop takes the same block decision,
and sends the reason as the next prompt).

No state from sessionStart: Copilot starts its session only with the first prompt and runs
sessionStart beside userPromptSubmitted, so "idle" from it could land after "working" and
let a second trigger in while the first turn starts.

It also runs the hooks of a repository's .claude/settings.json (its `Guest` of Claude Code),
with Claude Code's event names but still reading only its own shape; it puts COPILOT_CLI=1
in every hook's environment and a `timestamp` in every event, which Claude Code's events do
not carry (a Claude Code started from a Copilot shell inherits the variable, not the
timestamp). A .claude/settings.json PermissionRequest hook gets its own event
(`hookName: "permissionRequest"`, camelCase fields). Where the project has relay's Copilot
hooks too, Copilot runs both sets and gives its model one hook's context: the Claude Code
hooks then stand back.

A failed model call runs errorOccurred (`errorContext: "model_call"`), once for each of its
retries too, all of them `recoverable: true`, and no agentStop after the last: the first puts
the mail handed into the turn back as unread. Where a retry then gets through, that mail
comes again with the turn's next hook: shown twice, never lost.

A session without RELAY_AGENT is told how to start as an agent through its model: Copilot
(1.0.102) shows the person no hook's text (no `systemMessage`, not a failing hook's stderr),
so the sessionStart hook gives the model the line, asking it to pass it on.

relay-mcp: Claude Code's file as it is, with `--additional-mcp-config @FILE`, relay's tools
allowed with `--allow-tool=relay`.

Its door (relayd.arrival.copilot_extension): Copilot loads every
`.github/extensions/NAME/extension.mjs` of a trusted project (and of `$COPILOT_HOME/extensions`)
as a Node process of its own, which joins the session through the SDK Copilot bundles
(`joinSession()` from `@github/copilot-sdk/extension`) and may put a message into it with
`session.send({prompt, mode: "enqueue"})`: the session's next turn, at once when idle. It
does so only with extensions switched on, which `--experimental` does ("Enable experimental
features": with extensions it turns on Copilot's other experimental features too, such as
the /every and /after commands and --assisted-approval). relay's extension
(relayctl/copilot_extension.mjs) listens on `<XDG_RUNTIME_DIR or /tmp/relay-copilot-UID>/AGENT.sock`
and reports itself as relay's hooks report a door: `relayctl hook copilot sessionStart`.
"""

from __future__ import annotations

import os

from .program import SERVER_NAME, Door, Extension, Guest, Hooks, Launch, Mcp, Program, Question, Screen, Settings, Trust
from .claude import PROGRAM as CLAUDE


def _calling(event: dict) -> bool:
    return os.environ.get("COPILOT_CLI") == "1" and "timestamp" in event


def _argv(mcp: str | None, channels: tuple[str, ...], model: list[str], args: list[str]) -> list[str]:
    return ["copilot", "--additional-mcp-config", f"@{mcp}", f"--allow-tool={SERVER_NAME}", *model, *args]


EXTENSION_FILE = os.path.join(".github", "extensions", "relay", "extension.mjs")
EXPERIMENTAL, NO_EXPERIMENTAL = "--experimental", "--no-experimental"


def extension_socket(environ, agent: str) -> str:
    """Where relay's extension listens for `agent`'s mail (the extension's own rule, the same)."""
    runtime = environ.get("XDG_RUNTIME_DIR")
    folder = os.path.join(runtime, "relay-copilot") if runtime else f"/tmp/relay-copilot-{os.getuid()}"
    return os.path.join(folder, f"{agent}.sock")


def _ancestors_argv() -> list[list[str]]:
    """The command lines of this hook's ancestors (Copilot runs it through a shell, or its
    extension's Node process starts it), nearest first."""
    found, pid = [], os.getppid()
    while pid > 1 and len(found) < 8:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                found.append([a.decode(errors="replace") for a in fh.read().split(b"\0") if a])
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def _extension(environ, event: dict) -> dict:
    """Its door: relay's extension's socket for the session's agent, or why there is none
    (relayd.arrival.copilot_extension checks the socket itself)."""
    agent = environ.get("RELAY_AGENT") or environ.get("OVLD_ROLE") or ""
    socket = extension_socket(environ, agent)
    if os.path.exists(socket):
        return {"socket": socket}
    project = event.get("cwd") if isinstance(event.get("cwd"), str) else os.getcwd()
    if not os.path.exists(os.path.join(project, EXTENSION_FILE)):
        why = (f"relay's extension is not installed in {project} (`relayctl hooks install --for copilot --extension`, "
               "or `extension = true` for the agent in the team file)")
    elif not _experimental(environ, _ancestors_argv()):
        why = (f"this Copilot runs without {EXPERIMENTAL} (or with {NO_EXPERIMENTAL}) and without `experimental` in "
               f"{_settings_file(environ)}, so it loads no extensions")
    else:
        why = f"relay's extension did not start in this session (nothing listens at {socket})"
    return {"socket": "", "missing": why}


def _home(env) -> str:
    return env.get("COPILOT_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".copilot")


def _trust_file(env: dict[str, str]) -> str:
    return os.path.join(_home(env), "config.json")


def _settings_file(env) -> str:
    return os.path.join(_home(env), "settings.json")


def _experimental(environ, ancestors: list[list[str]]) -> bool:
    """Whether this Copilot has its experimental features on, which load extensions: as
    Copilot 1.0.102 decides it, the flag on the nearest `copilot` command line
    (--experimental or --no-experimental), else `experimental` in the user's settings.json
    (`copilot config experimental on`; a repository's settings may not set it)."""
    for argv in ancestors:
        flags = [arg for arg in argv if arg in (EXPERIMENTAL, NO_EXPERIMENTAL)]
        if flags:
            return flags[-1] == EXPERIMENTAL
    # deferred import: every hook loads this module, and json (with re) is wanted only here
    import json

    try:
        with open(_settings_file(environ), "rb") as file:
            settings = json.loads(file.read())
    except (OSError, ValueError):
        return False
    return isinstance(settings, dict) and settings.get("experimental") is True


PROGRAM = Program(
    name="copilot",
    title="GitHub Copilot CLI",
    package="@github/copilot",
    tested="1.0.102",
    hooks=Hooks(
        context=("userPromptSubmitted", "postToolUse"),
        stop="agentStop",
        state=("sessionStart", "permissionRequest", "sessionEnd", "errorOccurred"),
        other=("preToolUse", "postToolUseFailure", "userPromptTransformed", "subagentStart", "subagentStop",
               "preCompact", "preMcpToolCall", "notification"),
        states={"userPromptSubmitted": "working", "preToolUse": "working", "postToolUse": "working",
                "postToolUseFailure": "working", "permissionRequest": "asking", "agentStop": "idle", "sessionEnd": "ended",
                "errorOccurred": "working"},
        # a model call that failed (each retry runs it too, all "recoverable"; no agentStop follows the last)
        failed=("errorOccurred",),
        failure=lambda event: event.get("errorContext") == "model_call",
        named_by_entry=True,
        answer="additionalContext",
        start="sessionStart",
        # In an agent's session sessionStart has nothing to do: no state (above), and its door
        # is reported by the extension itself and again by the prompt hook. Copilot runs it
        # before the first prompt's hook, so a relayctl process there was ~45 ms more on the
        # way of the session's first mail (docs/benchmarks.md).
        agentless=("sessionStart",),
        shown="additionalContext",  # its model's: Copilot shows the person neither a systemMessage nor a hook's stderr
        relayed=True,
        help="userPromptSubmitted, postToolUse and agentStop hand mail over; sessionStart, permissionRequest and sessionEnd "
             "report the session's state; errorOccurred for a model call makes the mail of that turn unread again",
    ),
    guest=Guest(host=CLAUDE.name, calling=_calling, event_field="hookName", no_state=("SessionStart",)),
    settings=Settings(
        hooks_file=os.path.join(".github", "hooks", "relay.json"),
        layout="own-file",
        note="GitHub Copilot CLI runs repository hooks only in a trusted folder: trust {project} when `copilot` asks "
             "(~/.copilot/config.json trustedFolders keeps the choice); `copilot -p` in an untrusted folder runs without them",
    ),
    mcp=Mcp(
        build=CLAUDE.mcp.build,
        suffix=".json",
        given="file",
        help="Claude Code's file, which GitHub Copilot CLI takes as it is:\n"
             "`copilot --additional-mcp-config @FILE`, ~/.copilot/mcp-config.json,\n"
             "or a trusted folder's .mcp.json",
    ),
    launch=Launch(reads=("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL", "COPILOT_MODEL"), argv=_argv),
    trust=Trust(file=_trust_file, format="folder-list"),
    door=Door(operation="copilot_extension", events=("sessionStart", "userPromptSubmitted"), report=_extension),
    extension=Extension(
        file=EXTENSION_FILE,
        source="copilot_extension.mjs",
        flags=(EXPERIMENTAL,),
        help="GitHub Copilot CLI loads extensions only with --experimental (\"Enable experimental features\"), which also turns "
             "on its other experimental features: commands such as /every and /after, and --assisted-approval",
    ),
    screen=Screen(
        ready=("/ commands",),
        questions=("Do you trust the files in this folder?",),
        first_start=(Question("Do you trust the files in this folder?", trust=True),),
    ),
)
