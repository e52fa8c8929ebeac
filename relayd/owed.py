"""Delivery records: what a message sent with `ack` owes, and where that record lives.

A send writes its records as lines of the delivery log (`delivery.jsonl`, shared with
the receipts of `relayd.receipts`), in the same write-then-fsync round as its inbox append:
under relayd the same group commit, in direct mode the same single fsync path. No extra
file, no directory fsync, so `--ack` costs about what a plain send costs. The sweep
absorbs those lines into the compact state below (`absorb`, under `delivery.lock`); until
then `unabsorbed` reads them, so a record is owed from the moment its line is durable.
A torn line (a writer killed mid-write) is not a record, and its send never got as far
as its inbox append.

In compact state a record is one small JSON file whose directory is its state:

    owed/<to>.<id>.json         waiting for the recipient's acknowledgement; its mtime is
                                the moment it is due again (redelivery or dead letter)
    acked/<to>.<id>.json        acknowledged; kept a while so a repeated ack says "already"
    dead_letter/<to>.<id>.json  every delivery went unacknowledged; the sender was told

A record leaves `owed/` only by rename, so whatever crashes, it is in exactly one of the
three. It carries the whole message, so redelivering it needs nothing else. A record file's
data is fsynced before it gets its final name, under relayd too (`write`): no crash leaves
a named record without its data. Stores written before the log have only the files; they
are read as they are. This module holds the record, its log lines and its paths;
`relayd.delivery` holds the operations that move it (ack, the redelivery sweep, the
dead-letter commands). `relayd.inbox` logs the first record of a send through
`open_records`, before the inbox append.
"""

from __future__ import annotations

import functools
import os

import msgspec

from . import layout
from .errors import UsageError
from .fsio import NoSync, Syncer
from .records import Message, json_encoder
from .store import Store
from .timefmt import now_iso, parse_duration

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


@functools.lru_cache(maxsize=64)  # every send --ack asks again for the same few durations
def _seconds(text: str, what: str) -> float:
    seconds = parse_duration(text).total_seconds()
    if seconds <= 0:
        raise UsageError(f"{what} must be longer than 0, not {text!r}")
    return seconds


class _DataFirst(Syncer):
    """Fsyncs a file's data at once (under relayd, `store.sync` only queues the fsync for its
    round); a directory's fsync goes to `then` (the round, or nowhere when a caller syncs the
    directory once for many records)."""

    def __init__(self, then: Syncer | None) -> None:
        self.then = then

    def dir(self, fd: int) -> None:
        if self.then is not None:
            self.then.dir(fd)


def _writer(store: Store, dirs: bool = True) -> Syncer:
    return store.sync if isinstance(store.sync, NoSync) else _DataFirst(store.sync if dirs else None)


def write(store: Store, folder: str, record: Record, sync: Syncer | None = None) -> None:
    """Replace the record in `folder` atomically; its mtime becomes its due time.

    Its data is fsynced before the rename, also under relayd, where `store.sync` would only
    queue that fsync for the group commit round and a crash before the round ends could
    leave the new name with no data behind it. The directory fsync joins the round."""
    m = record.message
    store.top(folder).replace(record_name(m.to, m.id), json_encoder.encode(record) + b"\n", sync or _writer(store), mtime=record.due)


def read(store: Store, folder: str, name: str) -> Record | None:
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


def open_records(store: Store, records: list[Record]) -> None:
    """Before a send appends: its owed records, one log write, durable with the append's round."""
    from .receipts import Receipt, write as log

    now = now_iso()
    log(store, [Receipt(ts=now, step="owed", to=r.message.to, record=r) for r in records], durable=True)


def open_record(store: Store, message: Message, policy: Policy) -> None:
    open_records(store, [new_record(store, message, policy)])


def cancel_records(store: Store, messages: list[Message]) -> None:
    """The append these records were opened for failed: the sender is told so, and nothing is owed.

    A `cancelled` line: a sweep that absorbed the record meanwhile removes it at its next
    absorb (taking `delivery.lock` here could deadlock: a sweep holds it while appending)."""
    from .receipts import Receipt, write as log

    now = now_iso()
    log(store, [Receipt(ts=now, step="cancelled", to=m.to, ids=[m.id]) for m in messages], durable=True)


# -- the log's records: absorbed by the sweep, read by everyone until then -------------------


def _absorbed_at(store: Store) -> tuple[int, int]:
    """(inode, offset) of the log up to which records are in compact state."""
    raw = store.root_dir().read_bytes(layout.DELIVERY_ABSORBED) or b""
    try:
        ino, offset = (int(x) for x in raw.split())
    except ValueError:
        return 0, 0
    return ino, offset


def _log_lines(store: Store) -> tuple[int, int, list[tuple[tuple[str, str], Record | None]]]:
    """(inode, end offset, [((to, id), record or None for a cancel)]) past the absorbed point."""
    from .fsio import complete_lines
    from .receipts import _receipt_decoder

    try:
        fd = store.root_dir().open(layout.DELIVERY_LOG, os.O_RDONLY)
    except FileNotFoundError:
        return 0, 0, []
    try:
        info = os.fstat(fd)
        ino, start = _absorbed_at(store)
        if ino != info.st_ino or start > info.st_size:
            start = 0  # a new log (or none was absorbed yet)
        end = start
        found: list[tuple[tuple[str, str], Record | None]] = []
        for end, line in complete_lines(fd, start):
            if b'"step":"owed"' not in line and b'"step":"cancelled"' not in line:
                continue  # a receipt: nothing to absorb (and not worth decoding)
            try:
                entry = _receipt_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # damaged: never guessed at
            if entry.step == "owed" and entry.record is not None:
                found.append(((entry.to, entry.record.message.id), entry.record))
            elif entry.step == "cancelled":
                found.extend(((entry.to, i), None) for i in entry.ids)
        return info.st_ino, end, found
    finally:
        os.close(fd)


def unabsorbed(store: Store) -> dict[tuple[str, str], Record]:
    """Records logged by sends and not yet absorbed, by (to, id): owed, whatever the folders say
    (a record is absorbed only into a folder that lacks it)."""
    pending: dict[tuple[str, str], Record] = {}
    for key, record in _log_lines(store)[2]:
        if record is None:
            pending.pop(key, None)
        else:
            pending[key] = record
    return pending


_LIST_OVER = 256  # more lines than this: list the state directories once instead of 3 stats a line


def absorb(store: Store) -> int:
    """Move the log's new records into owed/ (the caller holds `delivery.lock`). Idempotent:
    a record that is in some folder already is left alone, so a sweep killed before it
    wrote down how far it got only repeats work. Returns how many records it wrote."""
    ino, end, lines = _log_lines(store)
    if ino and (ino, end) == _absorbed_at(store):
        return 0
    folder = store.top(layout.OWED)
    sync = _writer(store, dirs=False)  # the directory once, after all of them
    held: set[str] | None = None  # every record file, when there are many lines to check
    if len(lines) > _LIST_OVER:
        held = {n for f in (layout.OWED, layout.ACKED, layout.DEAD_LETTER) for n in names(store, f)}
    written = 0
    for (to, message_id), record in lines:
        name = record_name(to, message_id)
        if record is None:
            folder.unlink(name, missing_ok=True)  # absorbed by a sweep before its send failed
            if held is not None:
                held.discard(name)
            continue
        if name in held if held is not None else any(store.top(f).exists(name) for f in (layout.OWED, layout.ACKED, layout.DEAD_LETTER)):
            continue
        if held is not None:
            held.add(name)
        write(store, layout.OWED, record, sync)
        written += 1
    if lines:
        store.sync.dir(folder.fd)
    # Data first here too: an empty file would send the next sweep back to the log's start.
    store.root_dir().replace(layout.DELIVERY_ABSORBED, f"{ino} {end}\n".encode(), _writer(store))
    return written


def needs_absorbing(store: Store) -> bool:
    """Whether the log grew past the absorbed point (a stat and a small read: no lock)."""
    try:
        info = os.stat(layout.DELIVERY_LOG, dir_fd=store.root_dir().fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return _absorbed_at(store) != (info.st_ino, info.st_size)


def names(store: Store, folder: str) -> list[str]:
    """A state directory's entries (none when an older store lacks it; looking creates nothing)."""
    found = store.top_if_exists(folder)
    return found.listdir() if found is not None else []


def states(store: Store, to: str, ids: list[str]) -> dict[str, str]:
    """For messages of `to` sent with ack: "owed", "acked", "dead_letter", or absent (unknown)."""
    pending = unabsorbed(store)
    found: dict[str, str] = {i: layout.OWED for i in ids if (to, i) in pending}
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
    listed = names(store, folder)
    for name in listed:
        parts = split_name(name)
        if parts is not None:
            counts[parts[0]] = counts.get(parts[0], 0) + 1
    if folder == layout.OWED:
        there = set(listed)
        for to, message_id in unabsorbed(store):
            if record_name(to, message_id) not in there:
                counts[to] = counts.get(to, 0) + 1
    return counts


def owed_ids(store: Store, agent: str) -> set[str]:
    """Ids of the agent's messages that are still owed (gc keeps their lines)."""
    prefix = f"{agent}."
    found = {parts[1] for name in names(store, layout.OWED) if name.startswith(prefix) and (parts := split_name(name))}
    return found | {message_id for to, message_id in unabsorbed(store) if to == agent}


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
