"""An owed record: the file a message sent with `ack` is tracked by, its name, and its moves.

A record is one small JSON file whose directory is its state (`relayd.delivery.owed` lists
every form a record takes before it gets here):

    owed/<to>.<id>.json         waiting for the recipient's acknowledgement; its mtime is
                                the moment it is due again (redelivery or dead letter)
    acked/<to>.<id>.json        acknowledged; kept a while so a repeated ack says "already"
    dead_letter/<to>.<id>.json  every delivery went unacknowledged; the sender was told

A record leaves `owed/` only by rename (`move`), so whatever crashes, it is in exactly one
of the three. It carries the whole message, so redelivering it needs nothing else. Its
data is fsynced before it gets its final name, under relayd too (`write_record`): no crash leaves
a named record without its data.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

import msgspec

from .. import layout
from ..errors import StoreError, UsageError
from ..fsio import NoSync, Syncer
from ..owing import Policy
from ..records import Message, json_encoder
from ..store import Store
from ..timefmt import to_iso
from ..ulid import is_ulid

SUFFIX = ".json"


class Mark(msgspec.Struct, array_like=True):
    """How far a file was read: its inode and an offset (a rotated or replaced file has another inode)."""

    ino: int
    offset: int


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


class _FilesOnly(Syncer):
    """Fsyncs each record at once and leaves its directory to the caller, who fsyncs it once
    for many records."""

    def dir(self, fd: int) -> None:
        pass


def write_record(store: Store, folder: str, record: Record, sync: Syncer | None = None, mtime: float | None = None) -> None:
    """Replace the record in `folder` atomically; its mtime becomes its due time (or `mtime`:
    in acked/, when it was acknowledged).

    Its data is durable before the rename, also under relayd (`Syncer.content`); the
    directory fsync joins relayd's round."""
    m = record.message
    store.top(folder).replace(record_name(m.to, m.id), json_encoder.encode(record) + b"\n", sync or store.sync, mtime=record.due if mtime is None else mtime)


def read_record(store: Store, folder: str, name: str) -> Record | None:
    raw = store.top(folder).read_bytes(name)
    if not raw:
        return None
    try:
        return record_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def new_record(store: Store, message: Message, policy: Policy) -> Record:
    """A message's first owed record (attempt 1, due after its wait)."""
    due = store.clock() + policy.wait(1, store.rand())
    return Record(message=message, attempt=1, last_attempt=1 + policy.max_deliver, max_deliver=policy.max_deliver, base=policy.base, cap=policy.cap, due=due, delivered_at=[message.ts])


def names(store: Store, folder: str) -> list[str]:
    """A state directory's entries (none when an older store lacks it; looking creates nothing)."""
    found = store.top_if_exists(folder)
    return found.listdir() if found is not None else []


def now_syncer(store: Store) -> Syncer:
    """Fsyncs at once, also under relayd (where `store.sync` only queues for the round): what
    moves from one place to another must be durable in the new place before the old one goes."""
    return store.sync if isinstance(store.sync, NoSync) else Syncer()


def held_names(store: Store) -> set[str]:
    """Every record file name in the state folders: the records a parked line must not count for."""
    return {n for f in (layout.OWED, layout.ACKED, layout.DEAD_LETTER) for n in names(store, f)}


def into_owed(store: Store, records: list[Record], held: set[str] | None = None) -> int:
    """Write records into owed/ (each durable before its name, the directory once after),
    skipping any that a state folder holds already (`held`: their file names, when the
    caller listed them; else a lookup each). Returns how many it wrote."""
    folder = store.top(layout.OWED)
    sync = store.sync if isinstance(store.sync, NoSync) else _FilesOnly()  # the directory once, after all of them
    written = 0
    for record in records:
        name = record_name(record.message.to, record.message.id)
        if name in held if held is not None else any(store.top(f).exists(name) for f in (layout.OWED, layout.ACKED, layout.DEAD_LETTER)):
            continue
        if held is not None:
            held.add(name)
        write_record(store, layout.OWED, record, sync)
        written += 1
    if written:
        now_syncer(store).dir(folder.fd)
    return written


def move(store: Store, src: str, dst: str, name: str, mtime: float) -> None:
    """Rename a record between state directories (atomic: it is always in exactly one);
    its mtime then says when it got there (or, in owed/, when it is due)."""
    source, target = store.top(src), store.top(dst)
    try:
        os.rename(name, name, src_dir_fd=source.fd, dst_dir_fd=target.fd)
        os.utime(name, (mtime, mtime), dir_fd=target.fd, follow_symlinks=False)
    except OSError as exc:
        raise StoreError(f"moving {source.path}/{name} to {target.path}: {exc.strerror or exc}") from exc


def check_id(message_id: object) -> str:
    """A message id given to ack or a dead-letter command, or a one-line error."""
    if not isinstance(message_id, str) or not is_ulid(message_id):
        shown = str(message_id)[:40]
        raise UsageError(f"not a message id: {shown!r} (ids are 26-character ULIDs, as 'relayctl read' shows them)")
    return message_id


def iso(epoch: float) -> str:
    return to_iso(datetime.fromtimestamp(epoch, timezone.utc))
