"""What `relayctl hook PROGRAM` answers: unread mail handed to an agent program through its own hooks.

The program runs the hook with one JSON event on stdin (`hook_event_name` names it, or the
hook entry passes it where the program does not: `hook copilot EVENT`). For a context event
(before the prompt, after a tool) the answer is `additionalContext`, nested under
`hookSpecificOutput` or at the top level as the program reads it; for the stop event it is
`{"decision": "block", "reason": ...}`, which keeps the agent going with the mail as its
next instruction. Which events are which, the answer shape and each program's quirks are
its own module's in the programs wing (relayd.programs; `Hooks`). A program that runs
another's project hooks (GitHub Copilot CLI running .claude/settings.json: its `Guest`) is
answered in its own shape, so mail marked read there is mail its model was shown.

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
from relayd.errors import PermissionDenied, RelayError
from relayd.arrival.program_events import state_after, turn_failed, turn_stopped
from relayd.arrival.program_process import program_of
from relayd.programs.program import Program
from relayd.programs.registry import PROGRAMS, guests_of, owner_of

from .context import Settings, echo

BUDGET = 8000  # characters of context per hook call; Claude Code caps hook context at about 10k
PREVIEW = 50


# Each program's hook events, the state each implies and the answer shape it reads are its
# own module's (relayd.programs; `Hooks`). SubagentStop (Claude Code, Codex) is a no-op there:
# blocking it would hand the agent's mail to a subagent, whose result the agent itself may
# only see summarised.


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


def guest_calling(program: str, event: dict) -> Program | None:
    """The program that ran `program`'s project hooks for this event, when it is not
    `program` itself (GitHub Copilot CLI running .claude/settings.json: relayd.programs.copilot)."""
    return next((g for g in guests_of(program) if g.guest.calling(event)), None)


def _own_hooks_run_too(guest: Program, event: dict) -> bool:
    """Whether the project the guest runs in (the event's cwd, up to its git root) has
    relay's own hooks for the guest as well as the host's. Copilot (1.0.102) runs both sets
    at once and gives its model one hook's `additionalContext`: mail the other hook took
    was marked read and never shown."""
    here = os.path.abspath(event["cwd"] if isinstance(event.get("cwd"), str) else os.getcwd())
    while True:
        if os.path.isfile(os.path.join(here, guest.settings.hooks_file)):
            return True
        parent = os.path.dirname(here)
        if parent == here or os.path.exists(os.path.join(here, ".git")):
            return False
        here = parent


def answer_event(s: Settings, program: str, raw: str, event_name: str | None = None) -> dict | None:
    """What `program` should be told for the hook event `raw` (None: print nothing);
    `event_name`: the event, for a program whose events do not name themselves."""
    if not s.agent:
        return _no_agent(program, raw, event_name)  # a session relay did not start, which the project's hooks are not for
    try:
        event = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"stdin is not a hook event (bad JSON: {exc})") from None
    if not isinstance(event, dict):
        raise ValueError("stdin is not a hook event (expected a JSON object)")
    guest = guest_calling(program, event)
    if guest is not None and _own_hooks_run_too(guest, event):
        return None  # those hand the mail over: the guest shows one hook's context of the two
    if event_name is not None:
        event["hook_event_name"] = event_name
    elif guest is not None and "hook_event_name" not in event and isinstance(event.get(guest.guest.event_field), str):
        # Copilot (1.0.102) runs a .claude/settings.json PermissionRequest hook with its own
        # event (`hookName: "permissionRequest"`, camelCase fields), and takes a failing
        # permission hook as "deny": answered as the guest's event it is.
        program, event["hook_event_name"], guest = guest.name, event[guest.guest.event_field], None
    spec = PROGRAMS[program].hooks
    name = event.get("hook_event_name")
    if name in spec.other:
        return None  # an event we cannot add context to: leave the mail unread
    if name not in spec.context and name != spec.stop and name not in spec.state and name != spec.read_at:
        raise ValueError(_unknown_event(program, name))
    agent = s.require_agent(f"hook {program}")
    door = PROGRAMS[program].door
    if door is not None and guest is None and name in door.events:
        _report_door(s, agent, door, event)
    owner = program_of(os.getpid())
    if name == spec.read_at:
        # The model's request went out with the mail handed over before: read from now on.
        ids = mark_handed_read(s, agent, event.get("handed"))
        _record_state(s, agent, program, event, owner, handed=ids, guest=guest)
        return None
    if name in spec.state:
        # The session's state only: mail handed over now would reach the model with the
        # person's next prompt, however long that takes, and count as read meanwhile. At
        # the prompt, mail comes by the agent's trigger instead (relayd.arrival.program_state).
        _record_state(s, agent, program, event, owner, guest=guest)
        return None
    if name == spec.stop and turn_failed(program, event):
        # The turn's end after a failed model call (Gemini CLI's): what it was handed goes
        # back unread, and nothing is handed into a continuation that would fail the same way.
        _record_state(s, agent, program, event, owner, guest=guest)
        return None
    if name == spec.stop and event.get("stop_hook_active") is True:
        _record_state(s, agent, program, event, owner, new_turn=True, guest=guest)
        return None  # this turn is already the continuation we asked for: stop now, mail waits
    # Before the mail, and refused unless this hook runs in the agent's own program: working
    # (its trigger waits) until the turn's end says otherwise.
    _record_state(s, agent, program, event, owner, state="working", new_turn=name == spec.stop or name == spec.context[0], guest=guest)
    later = spec.read_at is not None and guest is None  # read once the model's request carries it (`Hooks.read_at`)
    # The person's prompt takes the mail with it; later in the turn the coordination budget may hold it (relayd.arrival.budget).
    # A prompt that is the door's own peer message already carries its mail: read, not handed again.
    prompt = event.get(door.prompt) if door is not None and door.prompt and guest is None and name == spec.context[0] else None
    text, ids = take_unread(s, agent, mark_read=not later, coordination=None if name == spec.context[0] else name != spec.stop,
                            prompt=prompt)
    handed = [] if later else ids
    if name == spec.stop:
        _record_state(s, agent, program, event, owner, continued=text is not None, handed=handed, guest=guest)
    elif handed:
        _record_state(s, agent, program, event, owner, handed=handed, guest=guest)
    if text is None:
        return None
    passed = {"handed": ids} if later else {}  # what the program passes back at its read_at event
    if name == spec.stop:
        return {"decision": "block", "reason": text, **passed}
    if (guest.hooks if guest is not None else spec).answer == "additionalContext":
        return {"additionalContext": text, **passed}  # top level: Copilot and OpenCode ignore Claude Code's hookSpecificOutput
    return {"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}}


NO_AGENT = ("relay: this {title} session has no agent name (RELAY_AGENT), so relay's hooks in this project do nothing here. "
            "To run it as a relay agent, start it as `RELAY_AGENT=NAME {program}`, or start the team with `relayctl up`.")


PASS_ON = "Before anything else in your answer, tell the person this, in one line: {notice}"


def _no_agent(program: str, raw: str, event_name: str | None = None) -> dict | None:
    """A session started without RELAY_AGENT: its hooks hand nothing over, silently, except
    once at its start, where the program shows the person a line (`Hooks.shown`) saying how
    to start it as an agent; a program that shows the person no hook's text (`Hooks.relayed`)
    gives it to its model to pass on. A clear or a compaction starts no new session."""
    spec = PROGRAMS[program]
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(event, dict) or spec.hooks.shown is None or (event_name or event.get("hook_event_name")) != spec.hooks.start:
        return None
    if event.get("source") in ("clear", "compact") or guest_calling(program, event) is not None:
        return None  # the guest (Copilot) reads only its own shape, which shows no such line
    notice = NO_AGENT.format(title=spec.title, program=program)
    return {spec.hooks.shown: PASS_ON.format(notice=notice) if spec.hooks.relayed else notice}


def _record_state(s: Settings, agent: str, program: str, event: dict, owner, *, continued: bool = False, state: str | None = None,
                  new_turn: bool = False, handed: list[str] | None = None, guest: Program | None = None) -> None:
    """Report what the session is doing now (relayd.arrival.program_state), as the state of
    `owner`, the program process this hook runs for. A report: an agent unknown to the store
    or a store out of reach never fails the program's hook; a report refused because this
    hook is not the agent's own program's (PermissionDenied) is raised: it hands no mail over."""
    if guest is not None and event.get("hook_event_name") in guest.guest.no_state:
        return  # e.g. Copilot's session starts with its first prompt: not "idle" (relayd.programs.copilot)
    name = event.get("hook_event_name")
    state = state or state_after(program, event, continued)
    if state is None:
        return
    if owner is None:
        raise PermissionDenied(f"this hook runs in no program process, so it speaks for no session of {agent}")
    params = {"agent": agent, "state": state, "event": name, "pid": owner.pid, "start": owner.start}
    if handed:
        params["handed"] = handed
    if new_turn:
        params["new_turn"] = True
    if turn_failed(program, event):
        params["failed"] = True
    elif turn_stopped(program, event):
        params["stopped"] = True
    try:
        s.call("program_state", params)
    except PermissionDenied:
        raise
    except RelayError:
        pass


def _report_door(s: Settings, agent: str, door, event: dict) -> None:
    """Tell relay the session's own door (its program's `door`: Claude Code's inbox,
    relayd.arrival.claude_inbox; Codex's queue, relayd.arrival.codex_queue), as the session
    names it to its children and in its events. A report only: never fails the hook."""
    try:
        s.call(door.operation, {"agent": agent, **door.report(os.environ, event)})
    except RelayError:
        pass


def _unknown_event(program: str, name: object) -> str:
    if not isinstance(name, str):
        return "stdin is not a hook event (no hook_event_name)"
    owner = owner_of(name, program)
    if owner is not None:
        return f"{name} is a {owner.title} hook event, not a {PROGRAMS[program].title} one: run `relayctl hook {owner.name}` for it"
    return f"{name} is not a {PROGRAMS[program].title} hook event this relay knows; the mail stays unread"


def take_unread(s: Settings, agent: str, mark_read: bool = True, coordination: bool | None = None,
                prompt: object = None) -> tuple[str | None, list[str]]:
    """The unread messages that fit the budget, rendered, and marked read (unless not
    `mark_read`: then `mark_handed_read` does it once the model's request carries them);
    and their ids. `coordination`: ask the person's coordination budget first (True: its
    interrupt interval too). `prompt`: the text of a turn the agent's door started
    (`Door.prompt`): the mail it holds whole is marked read with the rest but named, not
    rendered again."""
    peeked = s.call("read", {"agent": agent, "unread": True, "last": PREVIEW})
    preview = peeked["messages"]
    if not preview:
        return None, []
    if coordination is not None and _held_back(s, agent, coordination):
        return None, []  # it waits in the inbox; the held record says why
    in_prompt = _in_prompt(agent, prompt, preview)
    used, fits = 0, 0
    for message in preview:
        used += 0 if message["id"] in in_prompt else len(render(message))
        if fits and used > BUDGET:
            break
        fits += 1
    if mark_read:
        taken = s.call("read", {"agent": agent, "unread": True, "last": fits, "mark_read": True})
        messages, more = taken["messages"], taken["unread"]
    else:
        messages, more = preview[:fits], max(0, peeked["unread"] - fits)
    if not messages:
        return None, []
    if mark_read:
        _record_hook(s, agent)
    new = [m for m in messages if m["id"] not in in_prompt]
    parts = []
    if len(new) < len(messages):
        ids = ", ".join(m["id"] for m in messages if m["id"] in in_prompt)
        parts.append(f"relay: the mail in this prompt ({ids}) is now marked read in relay: no need to read it again; "
                     "reply with send_message or `relayctl send`.")
    if new:
        count = len(new)
        parts.append(f"relay: {count} new message{'s' if count != 1 else ''} for {agent} (now marked read; reply with send_message or `relayctl send`).")
        parts += [render(m) for m in new]
    if more:
        parts.append(f"({more} more unread: they come with the next hook, or read them with `relayctl read --unread --mark-read`.)")
    text = "\n\n".join(parts)
    _record_spent(s, agent, len(text))
    return text, [m["id"] for m in messages]


def _in_prompt(agent: str, prompt: object, messages: list[dict]) -> set[str]:
    """The ids of `messages` that `prompt`, made of the door's peer messages, carries whole,
    each under its own sender's name."""
    if not isinstance(prompt, str) or "relay mail for " not in prompt:  # (for_models.PEER_HEAD's opening)
        return set()
    # deferred import, as in render: most prompts are not relay's
    from relayd.arrival.for_models import field, peer_carried

    carried = peer_carried(agent, prompt)
    return {m["id"] for m in messages if carried.get(m["id"]) == field(m["from"])}


def _record_spent(s: Settings, agent: str, chars: int) -> None:
    """What this hook puts into the model's context, for the person's view of relay's cost
    (relayd.delivery.spend). A report only: never fails the hook."""
    try:
        s.call("spent", {"agent": agent, "chars": chars, "kind": "hook"})
    except RelayError:
        pass


def _held_back(s: Settings, agent: str, interval: bool) -> bool:
    """Whether the coordination budget holds the agent's mail back now; a relayd without it
    (an older one still running) holds nothing back."""
    try:
        return s.call("budget_hold", {"agent": agent, "interval": interval})["why"] is not None
    except RelayError:
        return False


def mark_handed_read(s: Settings, agent: str, handed: object) -> list[str]:
    """Mark read the messages a hook handed over earlier without marking them (`handed`, as
    its answer listed them), now that the model's request carries them: those of them that
    are still the oldest unread (mail read meanwhile, by `relayctl read`, keeps its place).
    Their ids."""
    wanted = {i for i in handed if isinstance(i, str)} if isinstance(handed, list) else set()
    if not wanted:
        return []
    oldest = s.call("read", {"agent": agent, "unread": True, "last": len(wanted)})["messages"]
    count = 0
    while count < len(oldest) and oldest[count]["id"] in wanted:
        count += 1
    if not count:
        return []
    taken = s.call("read", {"agent": agent, "unread": True, "last": count, "mark_read": True})["messages"]
    _record_hook(s, agent)
    return [m["id"] for m in taken]


def _record_hook(s: Settings, agent: str) -> None:
    """The hook handing mail to the model is this agent's announcement: the senders'
    `relayctl track` shows it (relayd.delivery.receipts). A report only: never fails the hook."""
    try:
        s.call("announced", {"agent": agent, "how": "hook"})
    except RelayError:
        pass


def render(m: dict) -> str:
    """One message as the model reads it (relayd.arrival.for_models: one-line fields escaped,
    the body quoted line by line, so nothing in a message can look like relay's own lines)."""
    # deferred imports: `relayctl hook` loads this module at every program event; timefmt and the
    # formatter only when there is mail to show
    from relayd.arrival import for_models
    from relayd.timefmt import shown

    return for_models.message(m, shown(m["ts"]), cut_hint=f"full text: relayctl read --from {for_models.field(m['from'])} --last 5")
