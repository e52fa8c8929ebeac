"""What relay itself put into each model's context, per hour: an estimate in tokens.

The coordination budget's third part (docs/coordination.md#the-coordination-budget): the
person sees what relay's own words cost each agent. Every way relay hands text to a model
adds its size here: a trigger typed into a pane or run as a command and a door's delivery
(relayd.arrival.notify), a hook's text (relayctl hook), relay-mcp's tool results and channel
events (the `spent` operation). A token is taken as four characters, the measure DESIGN §6
uses for the tool list.

One line per hand-over in `agents/<name>/context-spent`: "<unix time> <characters> <kind>",
appended under its lock and not fsynced (an estimate: a line lost to a crash is not worth a
disk flush per trigger). Past a few KiB the file is renamed to `context-spent.1` and a new one
begun, so the last hour is in at most the two files. `status` and the web view sum it.
"""

from __future__ import annotations

import os
from typing import Literal

import msgspec

from .. import layout
from ..errors import RelayError
from ..fsio import Dir, NoSync, append_file, complete_lines
from ..records import check_agent_name
from ..registry import operation
from ..store import Store

Kind = Literal["trigger", "door", "hook", "tool", "channel"]
KINDS: tuple[str, ...] = ("trigger", "door", "hook", "tool", "channel")
HOUR = 3600.0
ROTATE_BYTES = 8 << 10  # a line is ~20 bytes: a few hundred hand-overs a file
CHARS_PER_TOKEN = 4


class Spent(msgspec.Struct, kw_only=True):
    """Relay's text in one model's context over the last hour, in tokens (characters / 4)."""

    tokens: int
    by: dict[str, int]  # per kind: trigger, door, hook, tool, channel
    handed: int  # how many times relay put text there


def add(store: Store, agent: Dir, chars: int, kind: str) -> None:
    """Count `chars` characters that relay put into the agent's model's context just now."""
    if chars <= 0 or kind not in KINDS:
        return
    line = b"%d %d %s\n" % (int(store.clock()), chars, kind.encode())
    with agent.locked(layout.SPENT_LOCK):
        append_file(agent, layout.SPENT, line, NoSync(), durable=False, rotate_bytes=ROTATE_BYTES,
                    rotate=lambda _: agent.rename(layout.SPENT, layout.SPENT_ROTATED))


def last_hour(store: Store, agent: Dir) -> Spent | None:
    """What relay put into the agent's model's context in the last hour; None when nothing."""
    since = store.clock() - HOUR
    by: dict[str, int] = {}
    handed = 0
    for name in (layout.SPENT_ROTATED, layout.SPENT):
        fd, _ = agent.open_reading(name)
        if fd < 0:
            continue
        try:
            for _, line in complete_lines(fd, 0):
                parts = line.split()
                if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or int(parts[0]) < since:
                    continue
                kind = parts[2].decode(errors="replace")
                by[kind] = by.get(kind, 0) + int(parts[1])
                handed += 1
        finally:
            os.close(fd)
    if not handed:
        return None
    return Spent(tokens=sum(by.values()) // CHARS_PER_TOKEN, by={k: v // CHARS_PER_TOKEN for k, v in sorted(by.items())}, handed=handed)


def add_to(store_dir: str, name: str, chars: int, kind: str) -> None:
    """`add` from a process that keeps no store handle (relay-mcp): straight into the agent's
    file, as its heartbeat is, so a tool call stays one request to relayd. Never raises for
    a store or agent that is gone: it is a count, not mail."""
    try:
        with Store(store_dir) as store, store.agent_dir(name) as agent:
            add(store, agent, chars, kind)
    except (RelayError, OSError):
        pass


class SpentParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # whose model was handed the text
    chars: int  # its length
    kind: Kind  # hook, tool, channel (relayd counts triggers and doors itself)


class SpentResult(msgspec.Struct, kw_only=True):
    counted: bool


@operation("spent", SpentParams)
def spent(store: Store, p: SpentParams) -> SpentResult:
    """Count text relay put into an agent's model's context (a hook's text, a tool result, a channel event)."""
    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    with store.agent_dir(p.agent) as agent:
        add(store, agent, p.chars, p.kind)
    return SpentResult(counted=p.chars > 0)
