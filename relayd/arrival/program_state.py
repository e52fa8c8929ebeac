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

`asking` leaves only by a later event (the tool ran, the turn ended, the person's next
prompt): a question answered "no" may end the turn with no event at all, and then mail
waits for that next prompt, whose hook hands it over. Never the other way round: no
timer turns `asking` into `idle`.

The state lives in `agents/<name>/program-state` (one small JSON object, replaced whole,
not fsynced: a state lost to a crash is one the next event writes again), read by the
trigger (relayd.arrival.notify), `status` and the web view. An agent with no such file has no
relay hooks in its program (a shell, a script): only the screen check applies there.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .. import layout
from ..fsio import Dir
from ..agents.presence import archive
from ..records import check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import now_iso
from .program_events import STATES

State = Literal[STATES]  # type: ignore[valid-type]  # the same five names, one spelling


class ProgramState(msgspec.Struct, kw_only=True, omit_defaults=True):
    state: str
    at: str  # when it was recorded
    event: str | None = None  # the hook event that said so


_decoder = msgspec.json.Decoder(ProgramState)
_encoder = msgspec.json.Encoder()


def read(agent: Dir) -> ProgramState | None:
    """The agent's recorded program state; None when nothing (readable) was recorded."""
    raw = agent.read_bytes(layout.PROGRAM_STATE)
    if not raw:
        return None
    try:
        found = _decoder.decode(raw)
    except msgspec.DecodeError:
        return None  # a damaged file says nothing; the next hook event replaces it
    return found if found.state in STATES else None


def write(agent: Dir, state: str, event: str | None = None) -> ProgramState:
    recorded = ProgramState(state=state, at=now_iso(), event=event)
    agent.replace(layout.PROGRAM_STATE, _encoder.encode(recorded) + b"\n", None)
    return recorded


class ProgramStateParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    state: State
    event: str | None = None


@operation("program_state", ProgramStateParams)
def record(store: Store, p: ProgramStateParams) -> ProgramState:
    """Record what an agent's program is doing (its hooks report each lifecycle event)."""
    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    with store.agent_dir(p.agent) as agent:
        before = read(agent)
        recorded = write(agent, p.state, p.event)
        if p.state == "stopped":
            archive(agent)  # away at once, not alive until its heartbeat ages
    if p.state == "idle" and (before is None or before.state != "idle"):
        # relayd's notifier retries a trigger it held back while the program was busy.
        store.emit(store.event("agent", action="idle", agent=p.agent), durable=False)
    return recorded
