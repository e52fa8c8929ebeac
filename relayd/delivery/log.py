"""The delivery log, `delivery.jsonl`: receipts, and owed records an inbox rotation handed over.

One line per announcement, bounce or cursor advance (per recipient and moment, not per
message: one trigger tells a recipient about all of its unread mail), appended without an
fsync -- a lost receipt loses a report, never a message. The other kind of line, `owed`,
holds a record an inbox rotation handed over (`relayd.delivery.owed.hand_over`); those are
fsynced. Writers lock the log itself, and the sweep rotates it to `delivery.jsonl.1` once
it has absorbed it to its end; receipts are read from both (`newest_first`).
"""

from __future__ import annotations

import fcntl
import os
from typing import Iterator, Literal

import msgspec

from .. import layout
from ..errors import RelayError
from ..fsio import Syncer, append_lines, lines_backward
from ..records import Message, json_encoder
from ..store import Store
from ..timefmt import now_iso
from .record import Record

SYSTEM_SENDER = "relay"  # the sender of relay's own messages about delivery: bounces, held notices
_OWED_STEP = b'"step":"owed"'
_STEP_WITHIN = 64  # lines begin {"ts":"<24 characters>","step":...


class Receipt(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of the delivery log: a receipt, or an owed record (relayd.delivery.owed)."""

    ts: str
    step: Literal["announced", "bounced", "held", "read", "owed", "cancelled", "door"]
    to: str  # the recipient
    how: str | None = None  # tmux, zellij, cmd, channel, hook, ...
    ok: bool = True
    error: str | None = None
    note: str | None = None  # e.g. why a trigger was not sent this time
    ids: list[str] = msgspec.field(default_factory=list)  # bounced, held, door: the messages bounced, noticed as held, the receipt is for; cancelled: the records
    status: str | None = None  # door: the program's own receipt for a message (Claude Code: held, delivered, denied, expired, refused, dropped)
    upto: str | None = None  # read: the time of the newest message the cursor passed
    record: Record | None = None  # owed: what a send --ack owes


receipt_decoder = msgspec.json.Decoder(Receipt)


def write(store: Store, receipts: list[Receipt], sync: Syncer | None = None) -> None:
    """Append lines to the delivery log in one write; `sync` (owed records handed over by an
    inbox rotation) makes them durable. Receipts are not fsynced: a lost one loses a report,
    never a message."""
    if not receipts:
        return
    payload = b"".join(json_encoder.encode(r) + b"\n" for r in receipts)
    while True:
        fd = store.append_fd(layout.DELIVERY_LOG)
        # Writers lock the log itself (a sidecar lock file would cost an open and a close a line).
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_nlink == 0 or _renamed(store, fd):
                continue  # rotated away since it was opened (relayd.delivery.owed): append to the new log
            append_lines(fd, payload, os.path.join(store.root, layout.DELIVERY_LOG))
            if sync is not None:
                sync.file(fd)
            return
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


def _renamed(store: Store, fd: int) -> bool:
    try:
        return os.stat(layout.DELIVERY_LOG, dir_fd=store.root_dir().fd, follow_symlinks=False).st_ino != os.fstat(fd).st_ino
    except FileNotFoundError:
        return True


def newest_first(store: Store, since: str) -> Iterator[Receipt]:
    """Receipts from the newest back to the first older than `since` (ISO time), through
    the log and the rotated one before it."""
    for name in (layout.DELIVERY_LOG, layout.DELIVERY_LOG_ROTATED):
        try:
            fd = store.root_dir().open(name, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            for _, line in lines_backward(fd):
                if _OWED_STEP in line[:_STEP_WITHIN]:
                    continue  # an owed record (relayd.delivery.owed): not a receipt, and maybe a big one
                try:
                    receipt = receipt_decoder.decode(line)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # a torn tail or a damaged line: not a receipt
                if receipt.ts < since:
                    return
                yield receipt
        finally:
            os.close(fd)



def read_passed(store: Store, agent: str, newest: Message) -> None:
    """Record that `agent`'s read cursor just passed its mail up to `newest` (the read time
    `track` shows). Never raises: a report must not fail the read it reports on."""
    try:
        write(store, [Receipt(ts=now_iso(), step="read", to=agent, upto=newest.ts)])
    except (RelayError, OSError):
        pass
