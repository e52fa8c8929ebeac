"""Getting new mail in front of a busy agent (DESIGN §4).

`notify_new_messages(store, recipients)` is called by the daemon for every inbox event and,
with no daemon, by the client that sent the message. It returns one outcome per recipient:
`{"agent", "method", "ok", "skipped"?, "error"?, "retry"?}`, and never raises. The
outcomes go to the delivery log, and mail whose announcement failed is bounced to its
senders once (relayd.delivery.receipts).

Each agent's `meta.notify` says how:
  tmux:TARGET            type the trigger line into the pane (`send-keys -l`), then Enter as a
                         separate key once the pane shows the line; not while the pane is
                         in copy mode, nor while its input line holds someone's unsent
                         text (relayd.arrival.paneinput): retried later.
                         `tmux:/path/to/socket:TARGET` names the tmux server explicitly.
  zellij:PANE_ID         `zellij action write-chars --pane-id` (zellij >= 0.44.1); older
                         zellij needs `zellij:PANE_ID@TAB/DIRECTION...`: go to the tab, move
                         focus, then type (seed 001's method). Every action names the
                         agent's recorded session (`meta.session`, taken from OVLD_SESSION or
                         ZELLIJ_SESSION_NAME at register) with `--session`: relayd runs
                         outside zellij, where zellij would have to guess.
  cmd:ARGV...            run ARGV (shlex-split, no shell) with RELAY_NOTIFY_AGENT and
                         RELAY_TRIGGER in its environment.
  channel | hook | none  nothing to do here (relay-mcp, Claude Code hooks, or nobody).

The trigger is one short fixed line from config.json, never a message body. The flag
`agents/<name>/pending` (created O_EXCL) means "triggered, inbox not read since": while it
exists no further trigger is sent; reading the inbox with mark-read removes it. A trigger
that was skipped or failed removes the flag again, so the next message retries.
"""

from __future__ import annotations

import os
import re
from typing import Callable
import time

from .. import layout
from ..timefmt import now_iso, parse_duration
from .asking import AskingEnds
from .pane_process import pane_process, tmux_argv
from .program_process import age as process_age, foreground, started as process_started
from .program_state import ProgramState, read_recorded, write as write_program_state
from .program_state import read as read_program_state
from ..agents.roster import read_meta
from .paneinput import bare, holds_draft, holds_trigger, prompt_drawn, question_on_screen
from ..programs.registry import PROGRAMS
from . import claude_inbox, codex_queue, copilot_extension
from ..config import load_config

ZELLIJ_PANE_ID_SINCE = (0, 44, 1)
ECHO_WAIT = 2.0  # seconds to wait for a pane to show the typed trigger before its Enter
ENTER_AFTER = 0.06  # seconds from seeing the typed text to Enter: twice Gemini CLI's 30 ms fast-return window
CONFIRM_WAIT = 5.0  # seconds for a program to show that it took the trigger as a prompt
_TURN_ENDS = frozenset(spec.hooks.stop for spec in PROGRAMS.values())  # the hook events that end a turn
# Seconds after a program starts before relay types into it: Claude Code 2.1.332 draws its
# prompt first and a first-start question ("Make auto mode your default permission mode?")
# over it a moment later; a trigger typed in between met the question and it went away
# unanswered. The mail waits for the next round (its program's first hook or the retry).
START_GRACE = 3.0
# Seconds after a program starts in an agent's pane during which relay types nothing while
# the door of the agent's last session is void: the new session may still report its own
# (Copilot's extension once Copilot has loaded it, Claude Code's inbox at its SessionStart
# hook: a door's REPORTED_AT_START), and mail typed meanwhile would take the keystrokes' way
# where a door is about to open. Past it, the pane trigger goes as before.
DOOR_WAIT = 10.0
MISSES = 3  # triggers in a row that did not submit before the announcement counts as failed
_zellij_version: tuple[int, ...] | None = None


class _Skip(Exception):
    """The trigger was not sent now, but may be later (pane busy); `since`: since when the
    reason holds, where it is known (the recorded program state's time); `retry_in`: seconds
    after which it surely no longer holds, where known (the next try comes then)."""

    def __init__(self, why: str, since: str | None = None, retry_in: float | None = None) -> None:
        super().__init__(why)
        self.since = since
        self.retry_in = retry_in


class _Failed(Exception):
    pass


class _Unsubmitted(_Skip):
    """Typed and Enter pressed, but the program did not take it: cleared, tried again."""


TRIGGERS = ("tmux", "zellij", "cmd")  # the mechanisms triggered here
# Doors before keystrokes (DESIGN §4): ways into a running session that type nothing, each
# the session's own (relayd.programs: a program's `door`), tried before the agent's mechanism.
DOORS = (claude_inbox, codex_queue, copilot_extension)
TRIGGERED = frozenset({*TRIGGERS, "unknown", *(door.METHOD for door in DOORS)})  # outcomes recorded here; channel and hook announce elsewhere
# A recorded "asking" the screen shows to be over (relayd.arrival.asking): one per process,
# so the daemon's looks at a pane add up across its retry rounds.
ASKING = AskingEnds()


class _Settings:
    """config.json's notify settings, read when the first recipient with a trigger needs
    them: mail told by relay-mcp's channel or a hook needs neither the file nor its imports."""

    def __init__(self, store) -> None:
        self.store = store
        self.loaded: tuple[str, float, str] | None = None

    def get(self) -> tuple[str, float, str]:
        """(trigger line, timeout in seconds, prompt pattern)."""
        if self.loaded is None:
            notify = load_config(self.store).notify
            self.loaded = (notify.trigger, parse_duration(notify.timeout).total_seconds(), notify.prompt)
        return self.loaded


def notify_new_messages(store, recipients: list[str]) -> list[dict]:
    """Trigger each recipient's configured arrival mechanism; never raises for a failed one."""
    outcomes = []
    settings = _Settings(store)
    # When each announcement began: its receipt's time. A door's program can take the notice
    # and run its turn, whose prompt hook then reports handing the mail over, before the door's
    # call returns here; stamped afterwards, the hook's receipt would come first in `track`.
    started: dict[str, str] = {}
    for name in dict.fromkeys(recipients):
        started[name] = now_iso()
        try:
            outcomes.append(_notify_one(store, name, settings))
        except _BrokenConfig as exc:  # a broken config must not fail the send
            outcomes.append({"agent": name, "method": "unknown", "ok": False, "error": str(exc.__cause__)})
        except Exception as exc:
            outcomes.append({"agent": name, "method": "unknown", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
    told = [o for o in outcomes if o["method"] in TRIGGERED and not o.get("retry")]  # (a held trigger is recorded when it goes out)
    if told:
        # deferred imports: a direct send loads this module; receipts, the unread check, subprocess
        # and shlex only when a trigger is due
        from ..delivery.receipts import announced  # (start-up: most sends trigger no pane or command)

        announced(store, told, started)
    return outcomes


class _BrokenConfig(Exception):
    """config.json could not be read (the cause says why)."""


def agents_awaiting_trigger(store, among: list[str] | None = None) -> list[str]:
    """Agents (of `among`, or all) with a pane/cmd mechanism, unread mail and no pending
    flag: a trigger that was skipped (copy mode, a busy program) or failed. A timer, or the
    program going idle, passes them to notify_new_messages to retry."""
    from ..inbox.read import has_unread

    waiting = []
    for name in store.known_agents() if among is None else among:
        try:
            with store.agent_dir(name) as agent:
                meta = read_meta(agent)
                kind = ((meta.notify if meta else None) or "none").partition(":")[0]
                door = next((d for d in DOORS if agent.exists(d.DOOR) and d.why_not(agent) is None), None)
                if door is not None:  # mail not yet written through the session's own door, not a trigger
                    if door.waiting(store, name, agent):
                        waiting.append(name)
                    continue
                if kind not in TRIGGERS or agent.exists(layout.PENDING):
                    continue
            if has_unread(store, name):
                waiting.append(name)
        except Exception:  # an agent being removed or a damaged meta.json: skip it this round
            continue
    return waiting


def _notify_one(store, name: str, settings: _Settings) -> dict:
    """Announce through a door or a trigger, unless the person's coordination budget holds it
    back for now (relayd.arrival.budget); an announcement that went out restarts the interval."""
    with store.agent_dir(name) as agent:
        method = _announcer(agent)
        if method is not None:
            from . import budget  # deferred: only mail that a door or trigger announces asks the budget

            why = budget.hold(store, name, agent)
            if why is not None:
                _keep_held(agent, {"skipped": why, "retry": True})
                return {"agent": name, "method": method, "ok": True, "skipped": why, "retry": True}
    outcome = _announce_one(store, name, settings)
    if method is not None and outcome.get("ok") and not outcome.get("skipped") and not outcome.get("retry"):
        from ..delivery.spend import add as spent

        with store.agent_dir(name) as agent:
            budget.announced(store, agent)
            # What the model is handed: a door's text, or the trigger line typed or passed to a command.
            chars = outcome.pop("chars", None)
            spent(store, agent, chars if chars is not None else len(settings.get()[0]), "door" if chars is not None else "trigger")
    return outcome


def _announcer(agent) -> str | None:
    """How relay itself would announce the agent's mail now (a door's method, or a trigger's
    kind), or None: its program is told otherwise (channel, hook), or not at all, or a
    trigger already waits for the inbox to be read."""
    for module in DOORS:
        if agent.exists(module.DOOR):
            door = module.current(agent)
            if door is not None and not door.unusable:
                return module.METHOD
    meta = read_meta(agent)
    kind = ((meta.notify if meta else None) or "none").partition(":")[0]
    if kind not in TRIGGERS or agent.exists(layout.PENDING):
        return None
    return kind


def _announce_one(store, name: str, settings: _Settings) -> dict:
    with store.agent_dir(name) as agent:
        # A door before keystrokes: the session's own way in when it has a usable one; the
        # agent's mechanism below otherwise.
        for module in DOORS:
            if not agent.exists(module.DOOR):
                continue
            door = module.current(agent)
            if door is not None and not door.unusable:
                told = module.announce(store, name, agent, door)
                if told.get("retry") or (told["ok"] and not told.get("skipped")):
                    _keep_held(agent, told)  # not ready for it yet (track says why), or it went: no longer held
                if told["ok"]:
                    return told
        meta = read_meta(agent)
        how = (meta.notify if meta else None) or "none"
        kind, _, target = how.partition(":")
        outcome: dict = {"agent": name, "method": kind}
        if kind not in TRIGGERS:
            outcome.update(ok=True, skipped=f"{kind}: nothing to trigger")
            return outcome
        try:
            trigger, timeout, prompt = settings.get()
        except Exception as exc:
            raise _BrokenConfig from exc
        if not agent.create_exclusive(layout.PENDING, f"{now_iso()}\n".encode(), None):
            outcome.update(ok=True, skipped="already notified; waiting for the inbox to be read")
            return outcome
        try:
            if kind == "tmux":
                _await_door(agent, how)
                # A program (named at register, or with relay's hooks) draws a prompt first; a
                # bare line reader (`cat`, a script) may show none.
                needs_prompt = bool(meta and meta.program) or read_recorded(agent) is not None
                _tmux(target, trigger, timeout, prompt, lambda: read_program_state(agent), _asking_over(agent, name), needs_prompt)
            elif kind == "zellij":
                _require_idle(read_program_state(agent))  # zellij shows relay no screen: the state alone decides
                _zellij(target, trigger, timeout, meta.session if meta else None)
            else:
                _command(target, name, trigger, timeout)
        except _Unsubmitted as why:
            agent.unlink(layout.PENDING, missing_ok=True)
            misses = _count_miss(agent)
            if misses < MISSES:
                outcome.update(ok=True, skipped=str(why), retry=True)
            else:
                outcome.update(ok=False, error=f"{why} ({misses} triggers in a row did not submit)")
        except _Skip as why:
            agent.unlink(layout.PENDING, missing_ok=True)
            outcome.update(ok=True, skipped=str(why), retry=True)
            if why.since:
                outcome["since"] = why.since
            if why.retry_in is not None:
                outcome["retry_in"] = why.retry_in
        except _Failed as why:
            agent.unlink(layout.PENDING, missing_ok=True)
            outcome.update(ok=False, error=str(why))
        else:
            agent.unlink(layout.TRIGGER_MISSES, missing_ok=True)
            outcome.update(ok=True)
        _keep_held(agent, outcome)
        return outcome


def _await_door(agent, notify: str) -> None:
    """Raise _Skip while the door of the agent's last session is void because that session
    ended, and the program now in the foreground of its pane started under DOOR_WAIT ago:
    its own session may still report a door (see DOOR_WAIT)."""
    ended = next((module.TITLE for module in DOORS if module.REPORTED_AT_START and agent.exists(module.DOOR) and _session_ended(module.current(agent))), None)
    if ended is None:
        return
    pane = pane_process(notify)
    program = (foreground(pane.pid) or pane) if pane is not None else None
    young = process_age(program) if program is not None else None
    if young is not None and young < DOOR_WAIT:
        raise _Skip(f"the {ended} of its last session is gone and the program in its pane started {young:.1f} s ago: "
                    f"relay waits up to {DOOR_WAIT:g} s for its new session's door before typing", retry_in=DOOR_WAIT - young)


def _session_ended(door) -> bool:
    """A door record whose session's process has ended (not one unusable for another reason)."""
    return door is not None and bool(door.unusable) and bool(door.pid) and bool(door.proc_start) and process_started(door.pid) != door.proc_start


def _keep_held(agent, outcome: dict) -> None:
    """Why the trigger was held back (or failed), and since when, for the sender's `track`
    and `status` (relayd.delivery.held); a trigger that went out removes it."""
    # deferred imports: a direct send loads this module; the held record only once a trigger was tried
    from ..delivery.held import clear_held, note_held

    why = outcome.get("skipped") if outcome.get("retry") else outcome.get("error")
    if why:
        note_held(agent, why, now_iso())
    else:
        clear_held(agent)


def _count_miss(agent) -> int:
    """One more trigger that did not submit, counted until one does (agents/<name>/trigger-misses)."""
    raw = agent.read_bytes(layout.TRIGGER_MISSES) or b"0"
    misses = (int(raw) if raw.strip().isdigit() else 0) + 1
    agent.replace(layout.TRIGGER_MISSES, b"%d\n" % misses, None)
    return misses


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    """stdout of a finished command; _Failed with its stderr otherwise."""
    import subprocess  # here: most sends notify nobody this way, and it costs ~3 ms to import

    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise _Failed(f"{argv[0]} is not installed (not on PATH)") from None
    except PermissionError:
        raise _Failed(f"{argv[0]} is not executable") from None
    except subprocess.TimeoutExpired:
        raise _Failed(f"{argv[0]} did not finish within {timeout:g}s") from None
    except OSError as exc:
        raise _Failed(f"{argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = " ".join(done.stderr.decode(errors="replace").split())[:200]
        raise _Failed(f"{' '.join(argv[:3])} exited {done.returncode}" + (f": {said}" if said else ""))
    return done.stdout.decode(errors="replace")


# -- tmux -------------------------------------------------------------------------------------


tmux_target = tmux_argv  # (`tmux` argv prefix, pane target): `/socket/path:TARGET` selects the server


def tmux_pane_states(targets: list[str], timeout: float = 5.0) -> dict[str, str]:
    """For `tmux:` notify targets (without the prefix): "live", "dead" (its program exited,
    the pane kept) or "gone" (no such pane, or no tmux server there). One tmux call per server."""
    by_server: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for target in targets:
        tmux, pane = tmux_target(target)
        by_server.setdefault(tuple(tmux), []).append((target, pane))
    states = {}
    for tmux, wanted in by_server.items():
        try:
            listing = _run([*tmux, "list-panes", "-a", "-F", "#{pane_id} #{pane_dead} #{session_name}:#{window_index}.#{pane_index}"], timeout)
        except _Failed:
            listing = ""
        panes: dict[str, str] = {}
        for line in listing.splitlines():
            pane_id, dead, where = (line.split(" ") + ["", ""])[:3]
            panes[pane_id] = panes[where] = "dead" if dead == "1" else "live"
        for target, pane in wanted:
            states[target] = panes.get(pane, "gone")
    return states


def add_pane_states(agents: list[dict]) -> None:
    """`pane: {"id", "state"}` for each agent (a status entry) whose notify target is a tmux
    pane: is its program running there (live), exited (dead), or the pane gone? What
    `relayctl status` and the web view show."""
    targets = {a["name"]: a["notify"][len("tmux:"):] for a in agents if str(a.get("notify") or "").startswith("tmux:")}
    if not targets:
        return
    states = tmux_pane_states(list(targets.values()))
    for a in agents:
        if a["name"] in targets:
            target = targets[a["name"]]
            a["pane"] = {"id": tmux_target(target)[1], "state": states[target]}


def _asking_over(agent, name: str) -> Callable[[ProgramState, str | None], bool]:
    """For _tmux: given the recorded asking state and one look at the screen (empty prompt,
    no question), whether the question is over; if so, "idle" is recorded in its place
    (for status and the web view too), unless a hook recorded something new meanwhile."""

    def over(state: ProgramState, at_rest: str | None) -> bool:
        if not ASKING.look(name, state.at, at_rest):
            return False
        ASKING.forget(name)
        now = read_recorded(agent)
        if now is not None and now.at == state.at:
            write_program_state(agent, "idle", "screen: its empty prompt, no question", now.owner, now.handed)
        return True

    return over


def _tmux(target: str, trigger: str, timeout: float, prompt: str, state: Callable[[], ProgramState | None],
          asking_over: Callable[[ProgramState, str | None], bool] = lambda state, at_rest: False, needs_prompt: bool = False) -> None:
    """Type the trigger into an idle program's input box, submit it once, and confirm it.

    `state()` reads the program's recorded state (None: no relay hooks report it, or it was
    of an earlier process); `asking_over` judges a recorded question by the screen;
    `needs_prompt`: type only once the program's prompt is drawn."""
    tmux, pane = tmux_target(target)
    recorded = state()
    if recorded is None or recorded.state != "asking":
        _require_idle(recorded)
    shown = _run(tmux + ["display-message", "-p", "-t", pane, "#{pane_in_mode} #{cursor_x} #{cursor_y}"], timeout).split()
    if len(shown) != 3 or not all(part.isdigit() for part in shown):
        raise _Failed(f"tmux pane {pane}: unexpected answer {' '.join(shown)!r}")
    in_mode, cursor_x, cursor_y = shown
    if in_mode == "1":
        raise _Skip(f"tmux pane {pane} is in copy mode")
    # The screen, the second check: a question or menu whose answer keys would pick.
    screen = _run(tmux + ["capture-pane", "-p", "-t", pane], timeout)
    asked = question_on_screen(screen)
    # Look right before typing: a trigger typed after someone's unsent text would be sent with it.
    row = _run(tmux + ["capture-pane", "-p", "-e", "-t", pane, "-S", cursor_y, "-E", cursor_y], timeout)
    drawn = prompt_drawn(row, int(cursor_x), prompt)
    if recorded is not None and recorded.state == "asking":
        at_rest = not asked and drawn and not holds_draft(row, int(cursor_x), prompt)
        if not asking_over(recorded, f"{cursor_x} {cursor_y}\n{screen}" if at_rest else None):
            _require_idle(recorded)
    if asked:
        raise _Skip(f"tmux pane {pane} shows a question ({asked}); it is the person's to answer")
    if holds_trigger(row, int(cursor_x), trigger, prompt):
        # relay's own line, left unsent (typed while the program was starting, or an Enter
        # it did not take): removed, and only it, then typed again below.
        _run(tmux + ["send-keys", "-t", pane, "-N", str(len(trigger)), "BSpace"], timeout)
        if not _wait_until(lambda: not _shown_at_cursor(tmux, pane, trigger, timeout), min(timeout, ECHO_WAIT)):
            raise _Skip(f"tmux pane {pane} still shows relay's earlier trigger in its input line")
        row = _run(tmux + ["capture-pane", "-p", "-e", "-t", pane, "-S", cursor_y, "-E", cursor_y], timeout)
        cursor_x = _run(tmux + ["display-message", "-p", "-t", pane, "#{cursor_x}"], timeout).strip() or "0"
    if holds_draft(row, int(cursor_x), prompt):
        raise _Skip(f"tmux pane {pane} has unsent text in its input line")
    if needs_prompt and not drawn:
        raise _Skip(f"tmux pane {pane} shows no prompt yet (its program is still drawing its screen)")
    young = process_age(recorded.owner) if needs_prompt and recorded is not None and recorded.owner is not None else None
    if young is not None and young < START_GRACE:
        raise _Skip(f"tmux pane {pane}: its program started {young:.1f} s ago and may still draw a first-start question")
    before = state()
    _run(tmux + ["send-keys", "-t", pane, "-l", trigger], timeout)
    # Enter goes separately, once the program shows the text: arriving with it (or before a
    # busy TUI has taken it in), Enter becomes a newline inside a paste, not a submit. Text
    # that never shows went somewhere else than an input box: no Enter then.
    if not _wait_until(lambda: _shown_at_cursor(tmux, pane, trigger, timeout), min(timeout, ECHO_WAIT)):
        raise _Failed(f"tmux pane {pane} never showed the typed trigger in its input line; no Enter was pressed")
    # The program's own fast-return window (Gemini CLI: an Enter within 30 ms of the last
    # key is a newline). The text on the screen means its last key was taken: from then on.
    time.sleep(ENTER_AFTER)
    _run(tmux + ["send-keys", "-t", pane, "Enter"], timeout)
    if _wait_until(lambda: _submitted(state, before, tmux, pane, trigger, timeout), CONFIRM_WAIT):
        return
    if _shown_near_cursor(tmux, pane, trigger, timeout):
        _clear_typed(tmux, pane, trigger, timeout)
        raise _Unsubmitted(f"tmux pane {pane} did not submit the trigger; relay removed what it typed and will try again")
    # Gone from the box without the program saying it took a prompt: nothing of relay's
    # is left to clear, but nothing was seen to land either.
    raise _Unsubmitted(f"tmux pane {pane} took the trigger out of its input line without starting a turn; will try again")


def _require_idle(state: ProgramState | None) -> None:
    if state is None or state.state == "idle":
        return
    doing = {
        "working": "working (its hooks hand the mail over at the next tool's end or the turn's end)",
        "asking": "asking the person a question",
        "ended": "not running (its session ended)",
        "stopped": "stopped (relayctl down)",
    }.get(state.state, state.state)
    raise _Skip(f"its program is {doing}", since=state.at)


def _wait_until(done: Callable[[], bool], wait: float) -> bool:
    deadline = time.monotonic() + wait
    while True:
        if done():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _left_of_cursor(tmux: list[str], pane: str, text: str, timeout: float, extra: int = 0) -> list[str] | None:
    """The pane's rows that end at the cursor and can hold `text` (plus `extra` rows above),
    the cursor's row cut at the cursor; None when tmux gives no cursor."""
    shown = _run(tmux + ["display-message", "-p", "-t", pane, "#{cursor_x} #{cursor_y} #{pane_width}"], timeout).split()
    if len(shown) != 3 or not all(part.isdigit() for part in shown):
        return None
    x, y, width = map(int, shown)
    first = max(0, y - (len(text) + 4) // max(width, 1) - extra)
    rows = _run(tmux + ["capture-pane", "-p", "-t", pane, "-S", str(first), "-E", str(y)], timeout).split("\n")[: y - first + 1]
    if y - first < len(rows):
        rows[y - first] = rows[y - first][:x]
    return rows


def _squeezed(text: str) -> str:
    return "".join(text.split())


def _shown_at_cursor(tmux: list[str], pane: str, text: str, timeout: float) -> bool:
    """The text left of the pane's cursor ends with `text` (blanks ignored: a program may
    wrap it over rows). Only the rows the text needs are read, so an earlier trigger
    still on the screen does not count."""
    rows = _left_of_cursor(tmux, pane, text, timeout)
    return rows is not None and _squeezed("".join(rows)).endswith(_squeezed(text))


def _shown_near_cursor(tmux: list[str], pane: str, text: str, timeout: float) -> bool:
    """The text still stands at the end of the cursor's row or the row above it (where an
    Enter taken as a newline leaves it), borders and blanks aside."""
    rows = _left_of_cursor(tmux, pane, text, timeout, extra=1)
    wanted = _squeezed(text)
    return rows is not None and (bare("".join(rows)).endswith(wanted) or bare("".join(rows[:-1])).endswith(wanted))


def _submitted(state: Callable[[], ProgramState | None], before: ProgramState | None, tmux: list[str], pane: str, trigger: str, timeout: float) -> bool:
    """A program with relay's hooks says so (a prompt-submit event after the Enter); any
    other program shows it by the text left of its cursor no longer ending in the trigger
    (a shell, a line reader: the cursor went on to a new line)."""
    if before is not None:
        now = state()
        if now is None or now.at == before.at:
            return False
        # Working on the turn the Enter started; or already past it: a quick turn can start and
        # end between two looks (relay types only into a program at rest, so a turn that
        # ended since is the Enter's).
        return now.state in ("working", "asking") or now.event in _TURN_ENDS
    return not _shown_at_cursor(tmux, pane, trigger, timeout)



def _clear_typed(tmux: list[str], pane: str, trigger: str, timeout: float) -> None:
    """Remove what relay typed, and only that: one Backspace per character, and one more
    for the newline an Enter may have left (the prompt was empty before relay typed)."""
    _run(tmux + ["send-keys", "-t", pane, "-N", str(len(trigger) + 1), "BSpace"], timeout)


# -- zellij -----------------------------------------------------------------------------------


def zellij_version(timeout: float) -> tuple[int, ...]:
    global _zellij_version
    if _zellij_version is None:
        found = re.search(r"(\d+)\.(\d+)\.(\d+)", _run(["zellij", "--version"], timeout))
        if not found:
            raise _Failed("cannot tell the zellij version from `zellij --version`")
        _zellij_version = tuple(int(part) for part in found.groups())
    return _zellij_version


def _zellij(target: str, trigger: str, timeout: float, session: str | None = None) -> None:
    pane, _, route = target.partition("@")
    version = zellij_version(timeout)
    action = ["zellij", "--session", session, "action"] if session else ["zellij", "action"]
    if version >= ZELLIJ_PANE_ID_SINCE:
        _run(action + ["write-chars", "--pane-id", pane, trigger], timeout)
        _run(action + ["write-chars", "--pane-id", pane, "\r"], timeout)
        return
    if not route:
        shown = ".".join(map(str, version))
        raise _Failed(
            f"zellij {shown} cannot type into a pane by id (needs 0.44.1); "
            f"register the route instead: --notify zellij:{pane}@TAB/DIRECTION..., e.g. zellij:{pane}@2/right"
        )
    tab, *moves = route.split("/")
    _run(action + (["go-to-tab", tab] if tab.isdigit() else ["go-to-tab-name", tab]), timeout)
    for direction in moves:
        _run(action + ["move-focus", direction], timeout)
    _run(action + ["write-chars", trigger], timeout)
    _run(action + ["write-chars", "\r"], timeout)


# -- cmd ----------------------------------------------------------------------------------------


def _command(target: str, name: str, trigger: str, timeout: float) -> None:
    import shlex  # here: only a cmd: mechanism needs it

    try:
        argv = shlex.split(target)
    except ValueError as exc:
        raise _Failed(f"cannot split the notify command: {exc}") from None
    if not argv:
        raise _Failed("empty notify command")
    env = dict(os.environ, RELAY_NOTIFY_AGENT=name, RELAY_TRIGGER=trigger)
    _run(argv, timeout, env)
