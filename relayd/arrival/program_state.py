"""What an agent's program is doing right now, from the program's own lifecycle signals.

Keys typed into a terminal act with the person's authority (DESIGN §4): a trigger typed
while the program shows a permission question answers it. So relay types only into a
program known to sit at its own input prompt. It knows that from the hooks it installs,
which the program runs at its lifecycle events (`relayctl hook PROGRAM` records each one
here), not from guessing at the screen; the screen is the second check (relayd.arrival.paneinput).

The state machine, one per agent (the program session in its pane):

    event (Claude Code / Codex CLI / Gemini CLI; each program's own: relayd.programs)  -> state
    session start                                         -> idle      at its prompt
    prompt submitted (UserPromptSubmit / BeforeAgent)     -> working
    after a tool (PostToolUse / AfterTool)                -> working
    a permission question (PermissionRequest; Claude's
      Notification permission_prompt / elicitation_dialog;
      Gemini's Notification ToolPermission)               -> asking    the person must answer
    Claude's Notification idle_prompt; Codex's Interrupt  -> idle
    the turn's end (Stop / AfterAgent), nothing handed on -> idle
    the turn's end continued with mail (block decision)   -> working
    session end (SessionEnd)                              -> ended
    `relayctl down`                                       -> stopped

`asking` also ends on the screen's evidence: after a question is declined (Esc) Claude
Code, Gemini CLI and Copilot CLI run no hook at all, so relayd.arrival.notify takes the
program's own empty prompt, with no question on the screen for ASKING_SETTLE seconds
(relayd.arrival.asking), as the end of the question. A question on the screen still
stops every trigger.

A state belongs to one program process: the hook reports its program (the hook's nearest
ancestor that is not a shell, relayd.arrival.program_process: pid and start time), and a
state is accepted only from a program that runs in the agent's own tmux pane (or, with no
pane to ask, from the process that owns the recorded state, or any once that one is gone),
so another session of the same user running bob's hook command changes nothing of bob's.
Readers take a state whose process has exited, or is not the pane's program, as unknown:
no "stopped" or "asking" of an earlier start outlives it.

The hook also records which messages it handed over in the current turn (`handed`); a turn
that fails after that (each program's `Hooks.failed`: Claude Code's StopFailure, Gemini
CLI's AfterModel with an error, Copilot's errorOccurred, OpenCode's session.error) puts them
back as unread (relayd.inbox.reread), says so as the agent's held record (its senders' `track`
names the failed turn, relayd.delivery.held), and leaves the agent's `pending` flag so that no
trigger starts the same failing turn again: that mail comes with the person's next prompt.
A turn the person stopped before its model saw the mail handed into it (`Hooks.stopped`:
OpenCode, whose mail counts as read only at the answer's first step) is recorded the same
way, in those words: nothing to put back, the mail was never read.

The state lives in `agents/<name>/program-state` (one small JSON object, replaced whole,
not fsynced: a state lost to a crash is one the next event writes again), read by the
trigger (relayd.arrival.notify), `status` and the web view. An agent with no such file has no
relay hooks in its program (a shell, a script): only the screen check applies there.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .. import layout
from ..errors import PermissionDenied, UsageError
from ..fsio import Dir
from ..agents.presence import archive
from ..agents.roster import read_meta
from ..records import check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import now_iso
from .pane_process import pane_process
from .program_events import STATES
from .program_process import Process, alive, runs_under

State = Literal[STATES]  # type: ignore[valid-type]  # the same five names, one spelling


class ProgramState(msgspec.Struct, kw_only=True, omit_defaults=True):
    state: str
    at: str  # when it was recorded
    event: str | None = None  # the hook event that said so
    pid: int | None = None  # the program process the state is of (None: `relayctl down`'s "stopped")
    start: int | None = None  # that process's start time (/proc/PID/stat field 22)
    handed: list[str] = []  # ids of the messages the hook handed over in the current turn

    @property
    def owner(self) -> Process | None:
        return Process(self.pid, self.start) if self.pid is not None and self.start is not None else None


_decoder = msgspec.json.Decoder(ProgramState)
_encoder = msgspec.json.Encoder()


def read_recorded(agent: Dir) -> ProgramState | None:
    """The agent's recorded program state as written, whoever's it is; None when nothing
    (readable) was recorded."""
    raw = agent.read_bytes(layout.PROGRAM_STATE)
    if not raw:
        return None
    try:
        found = _decoder.decode(raw)
    except msgspec.DecodeError:
        return None  # a damaged file says nothing; the next hook event replaces it
    return found if found.state in STATES else None


def current(found: ProgramState | None, pane: Process | None = None) -> ProgramState | None:
    """`found` if it is still true: its program process is alive and (with `pane`, the
    process of the agent's pane) runs in that pane; None (unknown) otherwise."""
    if found is None:
        return None
    owner = found.owner
    if owner is None:
        return None  # `down`'s "stopped" or a record of an older relay: no process it is of
    if pane is not None:
        return found if runs_under(owner, pane.pid) else None
    return found if alive(owner) else None


def read(agent: Dir) -> ProgramState | None:
    """The agent's program state if it is still the state of a running program (status, the
    web view, the trigger): a state of a process that has exited is unknown (None)."""
    found = read_recorded(agent)
    if found is None or found.owner is None:
        return None
    meta = read_meta(agent)
    return current(found, pane_process(meta.notify if meta else None))


def write(agent: Dir, state: str, event: str | None = None, owner: Process | None = None, handed: list[str] | None = None) -> ProgramState:
    recorded = ProgramState(state=state, at=now_iso(), event=event, pid=owner.pid if owner else None, start=owner.start if owner else None,
                            handed=handed or [])
    agent.replace(layout.PROGRAM_STATE, _encoder.encode(recorded) + b"\n", None)
    return recorded


class ProgramStateParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    state: State
    event: str | None = None
    pid: int | None = None  # the program process the hook runs for (relayd.arrival.program_process)
    start: int | None = None  # its start time
    handed: list[str] = []  # ids of messages this hook handed over just now (added to the turn's)
    new_turn: bool = False  # a turn starts here (a prompt, a turn's end): the last one's hand-overs are done with
    failed: bool = False  # the turn failed: what the hook handed over in it is unread again
    stopped: bool = False  # the person stopped the turn before its model saw the mail handed into it (still unread)


class ProgramStateResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    state: str
    at: str
    event: str | None = None
    pid: int | None = None
    start: int | None = None
    handed: list[str] = []
    put_back: list[str] = []  # the failed turn's messages that are unread again


def _check_owner(agent: Dir, name: str, p: ProgramStateParams, before: ProgramState | None) -> Process | None:
    """The program process the state is of; PermissionDenied for a report from a process
    tree that is not the agent's own program."""
    if p.pid is None or p.start is None:
        if p.state == "stopped":
            return None  # `relayctl down`: the process it stopped is gone with it
        raise UsageError("a program state needs the program process it is of (pid and start)")
    owner = Process(p.pid, p.start)
    if not alive(owner):
        raise PermissionDenied(f"process {p.pid} is not running: it reports no state for {name}")
    meta = read_meta(agent)
    pane = pane_process(meta.notify if meta else None)
    if pane is not None:
        if not runs_under(owner, pane.pid):
            raise PermissionDenied(f"process {p.pid} is not {name}'s program (not in its pane): its state is not changed")
        return owner
    held_by = before.owner if before is not None else None
    if held_by is not None and held_by != owner and alive(held_by):
        raise PermissionDenied(f"process {p.pid} is not {name}'s program (process {held_by.pid} is): its state is not changed")
    return owner


FAILED_WHY = "its program's last turn failed (its model call did not go through): the mail comes with its person's next prompt"
STOPPED_WHY = "its person stopped the turn that carried the mail before its model saw it: the mail comes with the person's next prompt"


def _note_undone(agent: Dir, why: str) -> None:
    """Say why the mail of a turn that ended without reaching the model waits
    (relayd.delivery.held): its senders' `track` and `status` name it, not only that the mail
    is unread. Dated by itself: a trigger that landed before did not bring that mail either."""
    # deferred import: such a turn is rare, and most state reports load no delivery code
    from ..delivery.held import note_held

    note_held(agent, why, now_iso(), failed=True)


def _clear_undone(agent: Dir) -> None:
    """A hook handed mail over again: the failed or stopped turn no longer explains what waits."""
    from ..delivery.held import clear_held, read_held

    held = read_held(agent)
    if held is not None and held.why in (FAILED_WHY, STOPPED_WHY):
        clear_held(agent)


@operation("program_state", ProgramStateParams)
def record(store: Store, p: ProgramStateParams) -> ProgramStateResult:
    """Record what an agent's program is doing (its hooks report each lifecycle event)."""
    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    put_back: list[str] = []
    with store.agent_dir(p.agent) as agent:
        before = read_recorded(agent)
        owner = _check_owner(agent, p.agent, p, before)
        ongoing = before is not None and before.owner == owner and owner is not None
        handed = [*(before.handed if ongoing and before is not None and not p.new_turn else []), *p.handed]
        if p.failed and handed:
            # deferred import: a failed turn is rare, and most state reports load no inbox code
            from ..inbox.reread import unread_again

            put_back = unread_again(store, agent, handed)
        if p.failed or p.stopped:
            _note_undone(agent, FAILED_WHY if p.failed else STOPPED_WHY)
        elif p.handed:
            _clear_undone(agent)
        if p.failed or p.stopped or (p.state == "idle" and not p.handed) or p.state in ("ended", "stopped"):
            handed = []  # the turn is over: what it was handed stays handed (or was put back)
        was = current(before) if before is not None else None
        recorded = write(agent, p.state, p.event, owner, handed)
        if p.state == "stopped":
            archive(agent)  # away at once, not alive until its heartbeat ages
    if p.state == "idle" and (was is None or was.state != "idle"):
        # relayd's notifier retries a trigger it held back while the program was busy.
        store.emit(store.event("agent", action="idle", agent=p.agent), durable=False)
    return ProgramStateResult(state=recorded.state, at=recorded.at, event=recorded.event, pid=recorded.pid, start=recorded.start,
                              handed=recorded.handed, put_back=put_back)
