"""What `relayctl hook PROGRAM` answers: unread mail handed to an agent program through its own hooks.

The program runs the hook with one JSON event on stdin (`hook_event_name` names it).
For a context event (before the prompt, after a tool) the answer is
`hookSpecificOutput.additionalContext`; for the stop event it is
`{"decision": "block", "reason": ...}`, which keeps the agent going with the mail as its
next instruction. All three programs take these same shapes (Claude Code 2.1.332; Codex
CLI 0.169.0, whose JSON Schemas in the binary accept exactly them; Gemini CLI 0.61.0,
which appends the context to the prompt or tool result and sends a blocked AfterAgent's
reason as the next prompt). Only the event names differ: `PROGRAMS` below.

GitHub Copilot CLI (1.0.102) differs in two ways. Its own hooks (.github/hooks/*.json)
get an event with no name in it, so the entry names the event: `hook copilot EVENT`; and
it reads the context from a top-level `additionalContext` (its agentStop takes the same
block decision, and sends the reason as the next prompt). It also runs the hooks of a
repository's .claude/settings.json, with Claude Code's event names but still reading only
its own shape: `hook claude` recognises such a call (`copilot_caller`) and answers it in
Copilot's shape, so mail marked read there is mail its model was shown.

OpenCode (1.18.33) runs no commands as hooks; relay's plugin for it passes its events on
to `hook opencode` and reads the same top-level `additionalContext` / block decision.

Every event relay installs also reports the session's state (at its prompt, working,
asking the person: relayd.arrival.program_state), which decides whether a trigger may be typed
into its pane. The state events (session start, a permission question, a notification,
session end) hand no mail over: at session start the model would see it only with the
person's first prompt, and it would count as read meanwhile.

Messages handed over are marked read, so the same mail is never shown twice. A stop that
follows a stop we already continued (`stop_hook_active`) hands nothing over: the session
is kept going once, never in a loop; that mail comes with the agent's trigger or the next
prompt. With nothing unread the hook prints nothing. Events of the program that cannot
carry context (PreToolUse, ...) are a no-op that leaves mail unread; a name the program
does not have (wrong `hook` subcommand, misspelt event) is an error.

Exit status: 0, or 1 with one line on stderr for anything wrong (1 is a non-blocking
error for all three programs; 2 would block the user's prompt, so it is never used).
"""

from __future__ import annotations

import os
import sys

from relayd import jsonline as json  # json itself loads re: a hook runs at every event
from relayd.errors import RelayError
from relayd.arrival.program_events import state_after

from .context import Settings, echo

BUDGET = 8000  # characters of context per hook call; Claude Code caps hook context at about 10k
BODY_MAX = 3000
PREVIEW = 50


class Program:
    """One program's hook events, by what relay does with them."""

    __slots__ = ("title", "context", "stop", "state", "other", "matcher")

    def __init__(self, title: str, context: tuple[str, ...], stop: str, state: tuple[str, ...], other: tuple[str, ...], matcher: dict[str, str]) -> None:
        self.title = title
        self.context = context  # events whose answer is additionalContext, in the order installed
        self.stop = stop  # the turn's end: a block decision keeps the session going
        self.state = state  # events installed only to report the program's state (relayd.arrival.program_state)
        self.other = other  # the program's events that cannot carry mail (a no-op)
        self.matcher = matcher  # events whose hook entries take a tool matcher

    @property
    def installed(self) -> tuple[str, ...]:
        """The events `hooks install` puts relay's entry under."""
        return (*self.state[:1], *self.context, self.stop, *self.state[1:])


PROGRAMS: dict[str, Program] = {
    "claude": Program(
        "Claude Code",
        ("UserPromptSubmit", "PostToolUse"),
        "Stop",
        ("SessionStart", "PermissionRequest", "Notification", "SessionEnd"),
        ("SubagentStop", "PreToolUse", "PostToolUseFailure", "PostToolBatch", "UserPromptExpansion",
         "StopFailure", "SubagentStart", "PreCompact", "PostCompact", "PreModelSwitch", "PostModelSwitch",
         "PermissionDenied", "Setup", "TeammateIdle", "TaskCreated", "TaskCompleted", "Elicitation",
         "ElicitationResult", "ConfigChange", "WorktreeCreate", "WorktreeRemove", "InstructionsLoaded", "CwdChanged",
         "FileChanged", "DirectoryAdded", "MessageDisplay"),
        {"PostToolUse": "*", "PermissionRequest": "*"},
    ),
    "codex": Program(
        "Codex CLI",
        ("UserPromptSubmit", "PostToolUse"),
        "Stop",
        ("SessionStart", "PermissionRequest", "Interrupt"),
        ("SubagentStop", "PreToolUse", "PreCompact", "PostCompact", "SessionEnd", "SubagentStart", "PreModelRequest"),
        {"PostToolUse": "*", "PermissionRequest": "*"},
    ),
    "gemini": Program(
        "Gemini CLI",
        ("BeforeAgent", "AfterTool"),
        "AfterAgent",
        ("SessionStart", "Notification", "SessionEnd"),
        ("BeforeTool", "PreCompress", "BeforeModel", "AfterModel", "BeforeToolSelection"),
        {"AfterTool": "*"},
    ),
    "copilot": Program(
        "GitHub Copilot CLI",
        ("userPromptSubmitted", "postToolUse"),
        "agentStop",
        ("sessionStart", "permissionRequest", "sessionEnd"),
        ("preToolUse", "postToolUseFailure", "userPromptTransformed", "errorOccurred", "subagentStart", "subagentStop",
         "preCompact", "preMcpToolCall", "notification"),
        {},
    ),
    # OpenCode has no command hooks: relay's plugin (relayctl/opencode_plugin.js) passes its
    # events on under OpenCode's own names and puts the answers where its model reads them.
    "opencode": Program(
        "OpenCode",
        ("chat.message", "tool.execute.after"),
        "session.idle",
        ("session.created", "permission.asked", "question.asked", "permission.replied", "question.replied",
         "question.rejected", "session.deleted"),
        (),
        {},
    ),
}
# Events whose name the program does not put in the hook's stdin: the entry passes it.
NAMED_BY_ENTRY = ("copilot",)
# relay's own file of Copilot hooks in a project (hook_settings writes it).
COPILOT_HOOKS_FILE = os.path.join(".github", "hooks", "relay.json")
# SubagentStop (both programs) is a no-op: blocking it would hand the agent's mail to a
# subagent, whose result the agent itself may only see summarised.




def hook(s: Settings, program: str, event: str | None = None) -> int:
    """`relayctl hook PROGRAM [EVENT]`, the event on stdin: print the answer; the exit
    status (1, with one line on stderr, for anything wrong)."""
    line, error = run(s, program, sys.stdin.read(), event)
    if error is not None:
        echo(error, err=True)
        return 1  # non-blocking for every program; 2 would block the person's prompt
    if line is not None:
        echo(line, exact=True)  # JSON for the program, unchanged
    return 0


def run(s: Settings, program: str, raw: str, event_name: str | None = None) -> tuple[str | None, str | None]:
    """One hook run -> (the line to print on stdout, the one-line error); never raises."""
    try:
        answer = answer_event(s, program, raw, event_name)
    except RelayError as exc:
        return None, _error(exc.message)
    except ValueError as exc:
        return None, _error(str(exc))
    except Exception as exc:  # never a traceback into the agent's transcript
        return None, _error(f"internal error: {type(exc).__name__}: {exc}")
    return (json.dumps(answer) if answer is not None else None), None


def _error(message: str) -> str:
    return f"error: relay hook: {' '.join(message.split())}"


def copilot_caller(event: dict) -> bool:
    """Whether a `hook claude` event came from GitHub Copilot CLI running the repository's
    .claude/settings.json: Copilot (1.0.102) puts COPILOT_CLI=1 in every hook's environment
    and a `timestamp` in every event, which Claude Code's events do not carry (a Claude Code
    started from a Copilot shell inherits the variable, not the timestamp)."""
    return os.environ.get("COPILOT_CLI") == "1" and "timestamp" in event


def _relays_copilot_hooks_run_too(event: dict) -> bool:
    """Whether the project Copilot runs in (the event's cwd, up to its git root) has relay's
    own Copilot hooks as well as relay's Claude Code hooks. Copilot (1.0.102) runs both sets
    at once and gives its model one hook's `additionalContext`: mail the other hook took
    was marked read and never shown."""
    here = os.path.abspath(event["cwd"] if isinstance(event.get("cwd"), str) else os.getcwd())
    while True:
        if os.path.isfile(os.path.join(here, COPILOT_HOOKS_FILE)):
            return True
        parent = os.path.dirname(here)
        if parent == here or os.path.exists(os.path.join(here, ".git")):
            return False
        here = parent


def answer_event(s: Settings, program: str, raw: str, event_name: str | None = None) -> dict | None:
    """What `program` should be told for the hook event `raw` (None: print nothing);
    `event_name`: the event, for a program whose events do not name themselves."""
    if not s.agent:
        return None  # no relay identity: a session relay did not start, which the project's hooks are not for
    try:
        event = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"stdin is not a hook event (bad JSON: {exc})") from None
    if not isinstance(event, dict):
        raise ValueError("stdin is not a hook event (expected a JSON object)")
    if program == "claude" and copilot_caller(event) and _relays_copilot_hooks_run_too(event):
        return None  # those hand the mail over: Copilot shows one hook's context of the two
    if event_name is not None:
        event["hook_event_name"] = event_name
    elif program == "claude" and "hook_event_name" not in event and isinstance(event.get("hookName"), str) and copilot_caller(event):
        # Copilot (1.0.102) runs a .claude/settings.json PermissionRequest hook with its own
        # event (`hookName: "permissionRequest"`, camelCase fields), and takes a failing
        # permission hook as "deny": answered as the Copilot event it is.
        program, event["hook_event_name"] = "copilot", event["hookName"]
    spec = PROGRAMS[program]
    name = event.get("hook_event_name")
    if name in spec.other:
        return None  # an event we cannot add context to: leave the mail unread
    if name not in spec.context and name != spec.stop and name not in spec.state:
        raise ValueError(_unknown_event(program, name))
    agent = s.require_agent(f"hook {program}")
    if program == "codex" and name in CODEX_QUEUE_EVENTS:
        _report_codex_thread(s, agent, event)  # [codex-queue]
    if name in spec.state:
        # The session's state only: mail handed over now would reach the model with the
        # person's next prompt, however long that takes, and count as read meanwhile. At
        # the prompt, mail comes by the agent's trigger instead (relayd.arrival.program_state).
        _record_state(s, agent, program, event)
        return None
    if name == spec.stop and event.get("stop_hook_active") is True:
        _record_state(s, agent, program, event)
        return None  # this turn is already the continuation we asked for: stop now, mail waits
    if name != spec.stop:
        _record_state(s, agent, program, event)  # working, before the mail: its trigger waits
    text = take_unread(s, agent)
    if name == spec.stop:
        _record_state(s, agent, program, event, continued=text is not None)
    if text is None:
        return None
    if name == spec.stop:
        return {"decision": "block", "reason": text}
    if program in ("copilot", "opencode") or (program == "claude" and copilot_caller(event)):
        return {"additionalContext": text}  # Copilot ignores Claude Code's hookSpecificOutput
    return {"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}}


def _record_state(s: Settings, agent: str, program: str, event: dict, continued: bool = False) -> None:
    """Report what the session is doing now (relayd.arrival.program_state). A report only: an
    agent unknown to the store or a store out of reach never fails the program's hook."""
    if program == "claude" and event.get("hook_event_name") == "SessionStart" and copilot_caller(event):
        return  # Copilot's session starts with its first prompt: not "idle" (relayd.arrival.program_events)
    state = state_after(program, event, continued)
    if state is None:
        return
    try:
        s.call("program_state", {"agent": agent, "state": state, "event": event.get("hook_event_name")})
    except RelayError:
        pass


CODEX_QUEUE_EVENTS = ("SessionStart", "UserPromptSubmit")  # [codex-queue] when a session reports its thread
CODEX_QUEUE_SWITCH = "RELAY_CODEX_QUEUE"  # [codex-queue] 0 in a Codex session's environment: the pane trigger and hooks only


def _report_codex_thread(s: Settings, agent: str, event: dict) -> None:
    """[codex-queue] Tell relay the Codex session's thread (relayd.arrival.codex_queue): the
    event's session_id, the Codex process this hook runs under, and its CODEX_HOME. A report
    only: never fails the hook."""
    # deferred import: only Codex's prompt and start events need it
    from relayd.arrival.codex_queue_format import is_codex_exe, thread_id

    pid, hops = os.getppid(), 0
    while pid > 1 and hops < 8:  # Codex -> (a shell) -> relayctl: the nearest ancestor running Codex itself
        try:
            if is_codex_exe(os.readlink(f"/proc/{pid}/exe")):
                break
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            pid = 0
        hops += 1
    else:
        pid = 0
    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    thread = thread_id(event) or ""
    params = {"agent": agent, "thread": thread, "pid": pid if pid > 1 else 0, "codex_home": os.path.abspath(home)}
    if os.environ.get(CODEX_QUEUE_SWITCH) == "0":
        params.update(thread="", missing=f"{CODEX_QUEUE_SWITCH}=0 in its session turns relay's use of `codex queue` off")
    elif not thread:
        params["missing"] = "its hook event carried no session_id"
    elif not params["pid"]:
        params["missing"] = "relay's hook found no Codex process above it"
    try:
        s.call("codex_queue", params)
    except RelayError:
        pass


def _unknown_event(program: str, name: object) -> str:
    if not isinstance(name, str):
        return "stdin is not a hook event (no hook_event_name)"
    owners = [p for p, spec in PROGRAMS.items() if p != program and name in (*spec.installed, *spec.other)]
    if owners:
        return f"{name} is a {PROGRAMS[owners[0]].title} hook event, not a {PROGRAMS[program].title} one: run `relayctl hook {owners[0]}` for it"
    return f"{name} is not a {PROGRAMS[program].title} hook event this relay knows; the mail stays unread"


def take_unread(s: Settings, agent: str) -> str | None:
    """The unread messages that fit the budget, rendered, and marked read."""
    preview = s.call("read", {"agent": agent, "unread": True, "last": PREVIEW})["messages"]
    if not preview:
        return None
    used, fits = 0, 0
    for message in preview:
        used += len(render(message))
        if fits and used > BUDGET:
            break
        fits += 1
    taken = s.call("read", {"agent": agent, "unread": True, "last": fits, "mark_read": True})
    messages = taken["messages"]
    if not messages:
        return None
    _record_hook(s, agent)
    count = len(messages)
    head = f"relay: {count} new message{'s' if count != 1 else ''} for {agent} (now marked read; reply with send_message or `relayctl send`)."
    parts = [head, *(render(m) for m in messages)]
    if taken["unread"]:
        parts.append(f"({taken['unread']} more unread: they come with the next hook, or read them with `relayctl read --unread --mark-read`.)")
    return "\n\n".join(parts)


def _record_hook(s: Settings, agent: str) -> None:
    """The hook handing mail to the model is this agent's announcement: the senders'
    `relayctl track` shows it (relayd.delivery.receipts). A report only: never fails the hook."""
    try:
        s.call("announced", {"agent": agent, "how": "hook"})
    except RelayError:
        pass


def render(m: dict) -> str:
    # deferred imports: `relayctl hook` loads this module at every program event; timefmt only when
    # there is mail to show
    from relayd.timefmt import shown  # here: a hook starts often and rarely has mail to show

    when = shown(m["ts"])
    extras = [m["priority"]] if m.get("priority", "normal") != "normal" else []
    if m.get("thread"):
        extras.append(f"thread {m['thread']}")
    if m.get("type"):
        extras.append(f"type {m['type']}")
    tail = f" [{', '.join(extras)}]" if extras else ""
    body = m["body"].rstrip("\n")
    if len(body) > BODY_MAX:
        body = body[:BODY_MAX] + f"\n… (cut at {BODY_MAX} characters; full text: relayctl read --from {m['from']} --last 5)"
    head = f"--- from {m['from']} at {when}{tail} (id {m['id']})\nsubject: {m['subject']}"
    return head if not body or body == m["subject"] else f"{head}\n{body}"
