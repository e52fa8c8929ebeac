"""Every record relay stores or puts on the wire, defined once with msgspec.

Field names are the store's and the seed's (004 §3.2–§3.4); `--json` output, socket
replies and files on disk all use them. New fields get defaults so older files and
peers keep decoding.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .names import AGENT_NAME_RE, PRIORITIES, check_agent_name, normalize_priority  # noqa: F401  (re-exported)

Priority = Literal["low", "normal", "high", "urgent"]
SUBJECT_DEFAULT_CHARS = 80
# What one answer may carry: a send's stored messages, a read's messages. It stays under the
# wire protocol's 1 MiB line with room for the envelope, so an answer through relayd never
# fails after the operation took effect.
MAX_RESULT = 768 * 1024


class Message(msgspec.Struct, kw_only=True):
    """One line of `agents/<to>/inbox.jsonl`."""

    id: str
    ts: str
    from_: str = msgspec.field(name="from")
    to: str
    subject: str
    body: str
    thread: str | None = None
    priority: Priority = "normal"
    tags: list[str] = msgspec.field(default_factory=list)
    type: str | None = None  # IGNITE message type (seed 003), e.g. task_assignment
    ack: bool = False  # owed until the recipient acknowledges it (relayd.delivery.sweep)
    attempt: int | None = None  # with ack: which delivery of this id this line is (1 = the first)


class AgentMeta(msgspec.Struct, omit_defaults=True, kw_only=True):
    """`agents/<name>/meta.json`: identity and presence."""

    name: str
    role: str | None = None  # what the agent does in the team, e.g. reviewer (seed 002's AGENT_ROLE)
    program: str | None = None
    model: str | None = None
    task: str | None = None
    bead: str | None = None
    status: str | None = None
    notify: str | None = None  # tmux:TARGET | zellij:PANE | cmd:ARGV | channel | hook | none
    session: str | None = None
    registered_at: str
    updated_at: str | None = None


class Cursor(msgspec.Struct, omit_defaults=True, kw_only=True):
    """`agents/<name>/cursor`: how far the agent has read.

    `offset` is a byte offset at a line boundary, into `inbox.jsonl` or, when
    `rotated` is true, into `inbox.jsonl.1` (the file that was rotated out while
    unread messages remained in it).
    """

    offset: int = 0
    rotated: bool = False
    # Inode of the file `offset` points into: a rotation cut short between its rename
    # and the cursor update is recognised (and repaired) by a mismatch. 0 = not recorded.
    ino: int = 0


class Reservation(msgspec.Struct, kw_only=True):
    """`reservations/<sha256(repo:pattern)>.json` (seed 004 §3.3); every field is written,
    as in the seed, so scripts can rely on `exclusive` being there."""

    id: str
    agent: str
    pattern: str
    repo: str
    exclusive: bool = True
    reason: str | None = None
    created_at: str
    expires_at: str


CommandStatus = Literal["pending", "consumed", "done"]


class Command(msgspec.Struct, kw_only=True):
    """`commands/<ulid>.json` (seed 004 §3.4): pending -> consumed -> done. Every field is
    written: consumers outside relay poll these files for `"status": "pending"`."""

    id: str
    ts: str
    from_: str = msgspec.field(name="from")
    target_session: str
    command: str
    args: str = ""
    status: CommandStatus = "pending"
    consumed_by: str | None = None
    consumed_at: str | None = None
    done_at: str | None = None


class Event(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One line of `events.jsonl`; published to subscribers as `{"type":"event", ...}`.

    topic: inbox | reservation | command | presence | agent | wake
    """

    id: str
    ts: str
    topic: str
    action: str | None = None
    agent: str | None = None
    message_id: str | None = None
    from_: str | None = msgspec.field(default=None, name="from")
    priority: str | None = None
    subject: str | None = None
    pattern: str | None = None
    repo: str | None = None
    command_id: str | None = None
    target_session: str | None = None
    status: str | None = None
    host: str | None = None  # set on events from another host (relayd --bridge, scope team)


# Encoders and decoders are built once and reused (they are the hot path of every append).
json_encoder = msgspec.json.Encoder()
message_decoder = msgspec.json.Decoder(Message)
meta_decoder = msgspec.json.Decoder(AgentMeta)
cursor_decoder = msgspec.json.Decoder(Cursor)
event_decoder = msgspec.json.Decoder(Event)
reservation_decoder = msgspec.json.Decoder(Reservation)
command_decoder = msgspec.json.Decoder(Command)


_TS_FIELD = b'"ts":"'


def first_line_ts(data: bytes, begin: int = 0) -> str:
    """The `ts` of the message line starting at `begin`, found as bytes without decoding
    (scans read back through the lines in time order and stop at an older one); "\uffff",
    later than any time, when that line has none, so an unreadable line stops no scan."""
    at = data.find(_TS_FIELD, begin, data.find(b"\n", begin))
    if at < 0:
        return "\uffff"
    at += len(_TS_FIELD)
    return data[at : data.find(b'"', at)].decode(errors="replace")


def to_builtins(value: object) -> object:
    """Plain dicts/lists with the store's field names, for JSON output and the wire."""
    return msgspec.to_builtins(value)
