"""Delivery records: what a message sent with `ack` owes, and where that record lives.

A record is one small JSON file whose directory is its state (DESIGN §4):

    owed/<to>.<id>.json         waiting for the recipient's acknowledgement; its mtime is
                                the moment it is due again (redelivery or dead letter)
    acked/<to>.<id>.json        acknowledged; kept a while so a repeated ack says "already"
    dead_letter/<to>.<id>.json  every delivery went unacknowledged; the sender was told

A record leaves `owed/` only by rename, so whatever crashes, it is in exactly one of the
three. It carries the whole message, so redelivering it needs nothing else. This module
holds the record and its paths; `relayd.delivery` holds the operations that move it
(ack, the redelivery sweep, the dead-letter commands). `relayd.inbox` writes the first
record of a send through `open_records`, before the inbox append.
"""

from __future__ import annotations

import os

import msgspec

from . import layout
from .errors import UsageError
from .records import Message, json_encoder
from .store import Store
from .timefmt import parse_duration

SUFFIX = ".json"
MAX_DELIVER_LIMIT = 100


class Policy(msgspec.Struct, frozen=True):
    """How long to wait for an ack before presenting a message again, and how often."""

    base: float  # seconds: `ack_wait`
    cap: float  # seconds
    max_deliver: int  # redeliveries after the first delivery

    def wait(self, delivered: int, rand: float) -> float:
        """Seconds to wait after delivery number `delivered` (1 = the first): full jitter,
        random(0, min(cap, base * 2**(delivered - 1)))."""
        return rand * min(self.cap, self.base * 2.0 ** min(delivered - 1, 64))


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    message: Message  # as first sent
    attempt: int  # the last delivery recorded (1 = the first)
    last_attempt: int  # once this one goes unacknowledged, the message is dead-lettered
    max_deliver: int  # redeliveries granted at the send (and again at each `dlq retry`)
    base: float
    cap: float
    due: float  # epoch seconds: when the sweep acts on it next
    delivered_at: list[str]  # when each attempt was made, in order
    retried_at: list[str] = msgspec.field(default_factory=list)  # `dlq retry` times
    reason: str | None = None  # why it was dead-lettered
    dead_at: str | None = None
    escalation_id: str | None = None  # the id of the escalation message, chosen once
    told: list[str] = msgspec.field(default_factory=list)  # who got the escalation

    def next_wait(self, rand: float) -> float:
        """The wait after the current attempt; the backoff restarts at each `dlq retry`."""
        delivered = self.attempt - (self.last_attempt - self.max_deliver) + 1
        return Policy(self.base, self.cap, self.max_deliver).wait(delivered, rand)


record_decoder = msgspec.json.Decoder(Record)


def record_name(to: str, message_id: str) -> str:
    return f"{to}.{message_id}{SUFFIX}"


def split_name(name: str) -> tuple[str, str] | None:
    """(to, id) of a record file name; None for anything else (temp files, rotated mail)."""
    if name.startswith(".") or not name.endswith(SUFFIX):
        return None
    to, dot, message_id = name[: -len(SUFFIX)].partition(".")
    return (to, message_id) if dot and to and message_id else None


def policy_for(store: Store, ack_wait: str | None, max_deliver: int | None) -> Policy:
    """The store's defaults (config.json "delivery"), overridden per message."""
    from .config import load_config

    defaults = load_config(store).delivery
    base = _seconds(ack_wait if ack_wait is not None else defaults.ack_wait, "ack-wait")
    cap = _seconds(defaults.cap, "delivery.cap in config.json")
    count = defaults.max_deliver if max_deliver is None else max_deliver
    if not 1 <= count <= MAX_DELIVER_LIMIT:
        raise UsageError(f"max-deliver must be 1-{MAX_DELIVER_LIMIT} redeliveries, not {count}")
    return Policy(base, max(cap, base), count)


def _seconds(text: str, what: str) -> float:
    seconds = parse_duration(text).total_seconds()
    if seconds <= 0:
        raise UsageError(f"{what} must be longer than 0, not {text!r}")
    return seconds


def write(store: Store, folder: str, record: Record) -> None:
    """Replace the record in `folder` atomically; its mtime becomes its due time."""
    m = record.message
    store.top(folder).replace(record_name(m.to, m.id), json_encoder.encode(record) + b"\n", store.sync, mtime=record.due)


def read(store: Store, folder: str, name: str) -> Record | None:
    raw = store.top(folder).read_bytes(name)
    if not raw:
        return None
    try:
        return record_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def open_record(store: Store, message: Message, policy: Policy) -> None:
    """Before a send appends: the message's owed record (attempt 1, due after its wait)."""
    due = store.clock() + policy.wait(1, store.rand())
    record = Record(message=message, attempt=1, last_attempt=1 + policy.max_deliver, max_deliver=policy.max_deliver, base=policy.base, cap=policy.cap, due=due, delivered_at=[message.ts])
    write(store, layout.OWED, record)


def cancel_records(store: Store, messages: list[Message]) -> None:
    """The append these records were opened for failed: the sender is told so, and nothing is owed."""
    folder = store.top(layout.OWED)
    for m in messages:
        folder.unlink(record_name(m.to, m.id), missing_ok=True)
    store.sync.dir(folder.fd)


def names(store: Store, folder: str) -> list[str]:
    """A state directory's entries (none when an older store lacks it; looking creates nothing)."""
    found = store.top_if_exists(folder)
    return found.listdir() if found is not None else []


def states(store: Store, to: str, ids: list[str]) -> dict[str, str]:
    """For messages of `to` sent with ack: "owed", "acked", "dead_letter", or absent (unknown)."""
    found: dict[str, str] = {}
    for folder in (layout.OWED, layout.ACKED, layout.DEAD_LETTER):
        opened = store.top_if_exists(folder)
        if opened is None:
            continue
        for message_id in ids:
            if message_id not in found and opened.exists(record_name(to, message_id)):
                found[message_id] = folder
    return found


def count_by_agent(store: Store, folder: str) -> dict[str, int]:
    """How many records each recipient has in `folder` (a listing, no file read)."""
    counts: dict[str, int] = {}
    for name in names(store, folder):
        parts = split_name(name)
        if parts is not None:
            counts[parts[0]] = counts.get(parts[0], 0) + 1
    return counts


def owed_ids(store: Store, agent: str) -> set[str]:
    """Ids of the agent's messages that are still owed (gc keeps their lines)."""
    prefix = f"{agent}."
    return {parts[1] for name in names(store, layout.OWED) if name.startswith(prefix) and (parts := split_name(name))}


def due_names(store: Store, now: float) -> tuple[list[str], float | None]:
    """Owed records whose due time has come, oldest first, and the next due time after them."""
    due: list[tuple[float, str]] = []
    upcoming: float | None = None
    folder = store.top_if_exists(layout.OWED)
    if folder is None:
        return [], None
    with os.scandir(folder.fd) as entries:
        for entry in entries:
            if split_name(entry.name) is None:
                continue
            try:
                when = entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue  # acknowledged meanwhile
            if when <= now:
                due.append((when, entry.name))
            elif upcoming is None or when < upcoming:
                upcoming = when
    due.sort()
    return [name for _, name in due], upcoming
