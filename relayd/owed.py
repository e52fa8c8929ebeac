"""Delivery records: what a message sent with `ack` owes, and where that record lives.

A send stores what it owes in the line it appends anyway: the inbox line of a first delivery
with ack carries its terms (`"owed": {"due", "base", "cap", "max_deliver"}` after the
message's own fields; readers decode the line as a plain message and never see them). That
line is the owed record from the moment it is durable, in the append's own fsync (under
relayd the group commit round it shares with every other send): `--ack` costs no extra file,
write or fsync. If the append is taken back (a failed send), the record goes with it; a torn
line is no record, and its send never reported success.

The sweep absorbs those lines into the compact state below (`absorb`, under
`delivery.lock`), reading each inbox only past its mark in `delivery.absorbed` (inode and
offset, as `relayd.announce` does for events); until then `unabsorbed` reads them. An inbox
rotation drops the previous `inbox.jsonl.1`; before it does (`hand_over`, under the inbox
lock), the owed lines of that file no sweep absorbed yet are written to the delivery log
as `owed` records and fsynced, so no record is lost however long no sweep runs. The log's
owed lines (and those of earlier versions, which logged every record there) are absorbed
the same way, past the log's own mark; once absorbed to its end the log is rotated.

In compact state a record is one small JSON file whose directory is its state:

    owed/<to>.<id>.json         waiting for the recipient's acknowledgement; its mtime is
                                the moment it is due again (redelivery or dead letter)
    acked/<to>.<id>.json        acknowledged; kept a while so a repeated ack says "already"
    dead_letter/<to>.<id>.json  every delivery went unacknowledged; the sender was told

A record leaves `owed/` only by rename, so whatever crashes, it is in exactly one of the
three. It carries the whole message, so redelivering it needs nothing else. A record file's
data is fsynced before it gets its final name, under relayd too (`write`): no crash leaves
a named record without its data, and the marks move only after the records they pass are
durable. Absorbing is idempotent (a record already in a folder is left alone), so a sweep
killed half way only repeats work. This module holds the record, its lines and its paths;
`relayd.delivery` holds the operations that move it (ack, the redelivery sweep, the
dead-letter commands).
"""

from __future__ import annotations

import fcntl
import functools
import os

import msgspec

from . import layout
from .announce import Mark
from .errors import UsageError
from .fsio import Dir, NoSync, Syncer, complete_lines
from .records import Message, json_encoder, message_decoder
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
    defaults = _delivery_defaults(store)
    base = _seconds(ack_wait if ack_wait is not None else defaults.ack_wait, "ack-wait")
    cap = _seconds(defaults.cap, "delivery.cap in config.json")
    count = defaults.max_deliver if max_deliver is None else max_deliver
    if not 1 <= count <= MAX_DELIVER_LIMIT:
        raise UsageError(f"max-deliver must be 1-{MAX_DELIVER_LIMIT} redeliveries, not {count}")
    return Policy(base, max(cap, base), count)


# Every send --ack asks for the defaults: config.json is read again only when it changed.
_defaults_seen: dict[str, tuple[tuple[int, int, int], object]] = {}


def _delivery_defaults(store: Store):  # -> config.Delivery
    from .config import load_config

    try:
        info = os.stat(layout.CONFIG_FILE, dir_fd=store.root_dir().fd, follow_symlinks=False)
        identity = (info.st_ino, info.st_size, info.st_mtime_ns)
    except FileNotFoundError:
        identity = (0, 0, 0)
    seen = _defaults_seen.get(store.root)
    if seen is not None and seen[0] == identity:
        return seen[1]
    defaults = load_config(store).delivery
    _defaults_seen[store.root] = (identity, defaults)
    return defaults


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


def write(store: Store, folder: str, record: Record, sync: Syncer | None = None, mtime: float | None = None) -> None:
    """Replace the record in `folder` atomically; its mtime becomes its due time (or `mtime`:
    in acked/, when it was acknowledged).

    Its data is fsynced before the rename, also under relayd, where `store.sync` would only
    queue that fsync for the group commit round and a crash before the round ends could
    leave the new name with no data behind it. The directory fsync joins the round."""
    m = record.message
    store.top(folder).replace(record_name(m.to, m.id), json_encoder.encode(record) + b"\n", sync or _writer(store), mtime=record.due if mtime is None else mtime)


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


# -- the inbox line is the record until the sweep absorbs it ----------------------------------


class Terms(msgspec.Struct, kw_only=True):
    """What a first delivery owes, carried by its inbox line (see the module docstring)."""

    due: float  # epoch seconds: when the first redelivery (or the dead letter) is due
    base: float
    cap: float
    max_deliver: int


class OwedLine(Message, kw_only=True):
    """An inbox line of a message sent with ack, first delivery: the message and its terms.
    Readers decode it as a plain `Message` (the extra field is ignored)."""

    owed: Terms


# How an owed line is told from the others without decoding them: the key only a real field
# can spell (quotes inside strings are escaped), placed last by the encoder.
_MARKER = b',"owed":{'


def owing(store: Store, message: Message, policy: Policy) -> OwedLine:
    """The inbox line of a message's first delivery with ack: it owes from the moment it is durable."""
    due = store.clock() + policy.wait(1, store.rand())
    return OwedLine(**msgspec.structs.asdict(message), owed=Terms(due=due, base=policy.base, cap=policy.cap, max_deliver=policy.max_deliver))


class _TermsOf(msgspec.Struct):
    owed: Terms


_terms_decoder = msgspec.json.Decoder(_TermsOf)


def _record_of(line: bytes) -> Record:
    """The record an owed line stands for (two decodes of the line: the message, the terms;
    cheaper than copying the fields from one into the other)."""
    message = message_decoder.decode(line)
    t = _terms_decoder.decode(line).owed
    return Record(message=message, attempt=1, last_attempt=1 + t.max_deliver, max_deliver=t.max_deliver, base=t.base, cap=t.cap, due=t.due, delivered_at=[message.ts])


def _owed_lines(fd: int, start: int) -> tuple[int, list[Record]]:
    """(end of the complete lines, the records of the owed lines) of `fd` from `start`."""
    end = start
    found = []
    for end, line in complete_lines(fd, start):
        if _MARKER in line:
            try:
                found.append(_record_of(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # damaged: never guessed at (reads report it)
    return end, found


def open_records(store: Store, records: list[Record], sync: Syncer | None = None) -> None:
    """Records as `owed` lines of the delivery log, durable before this returns (through `sync`,
    by default the store's). Sends no longer write these; an inbox rotation hands over the
    unabsorbed owed lines of the file it drops this way (`hand_over`)."""
    from .receipts import Receipt, write as log

    now = now_iso()
    log(store, [Receipt(ts=now, step="owed", to=r.message.to, record=r) for r in records], sync=sync or store.sync)


# -- how far the sweep absorbed: the delivery log and each inbox ------------------------------


class Marks(msgspec.Struct, kw_only=True):
    """`delivery.absorbed`: everything before these (inode, offset) marks is in compact state."""

    log: Mark | None = None
    inboxes: dict[str, Mark] = msgspec.field(default_factory=dict)


_marks_decoder = msgspec.json.Decoder(Marks)


def _marks(store: Store) -> Marks:
    raw = store.root_dir().read_bytes(layout.DELIVERY_ABSORBED) or b""
    if raw.startswith(b"{"):
        try:
            return _marks_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return Marks()  # damaged: read everything again (absorbing is idempotent)
    try:
        ino, offset = (int(x) for x in raw.split())  # written before inboxes had marks: the log's alone
    except ValueError:
        return Marks()
    return Marks(log=Mark(ino, offset))


def _ranges(current: int, current_ino: int, rotated: int, rotated_ino: int, mark: Mark | None) -> list[tuple[int, int]]:
    """(fd, offset) to read past `mark`, oldest first: from the mark in the file it names (the
    current file, or the rotated one and then the current), else both files whole."""
    if mark is not None and mark.ino == current_ino and current >= 0:
        ranges = [(current, mark.offset)]
    elif mark is not None and mark.ino == rotated_ino and rotated >= 0:
        ranges = [(rotated, mark.offset), (current, 0)]
    else:
        ranges = [(rotated, 0), (current, 0)]
    return [(fd, start if start <= os.fstat(fd).st_size else 0) for fd, start in ranges if fd >= 0]


def _log_lines(store: Store, mark: Mark | None) -> tuple[Mark | None, list[tuple[tuple[str, str], Record | None]]]:
    """(the log's new mark, [((to, id), record or None for a cancel)]) past `mark`."""
    from .receipts import receipt_decoder

    root = store.root_dir()
    current, current_ino = root.open_reading(layout.DELIVERY_LOG)
    rotated, rotated_ino = root.open_reading(layout.DELIVERY_LOG_ROTATED)
    try:
        new_mark = None
        found: list[tuple[tuple[str, str], Record | None]] = []
        for fd, start in _ranges(current, current_ino, rotated, rotated_ino, mark):
            end = start
            for end, line in complete_lines(fd, start):
                if b'"step":"owed"' not in line and b'"step":"cancelled"' not in line:
                    continue  # a receipt: nothing to absorb (and not worth decoding)
                try:
                    entry = receipt_decoder.decode(line)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # damaged: never guessed at
                if entry.step == "owed" and entry.record is not None:
                    found.append(((entry.to, entry.record.message.id), entry.record))
                elif entry.step == "cancelled":  # written by sends of earlier versions whose append failed
                    found.extend(((entry.to, i), None) for i in entry.ids)
            new_mark = Mark(current_ino if fd == current else rotated_ino, end)  # the last file read
        return new_mark, found
    finally:
        for fd in (current, rotated):
            if fd >= 0:
                os.close(fd)


def _inbox_records(store: Store, name: str, mark: Mark | None) -> tuple[Mark, list[Record], bool] | None:
    """(the inbox's new mark, the records of its owed lines past `mark`, whether `mark` was
    no longer valid and the files were read whole); None when nothing was appended since (a
    stat). Read under the inbox's lock, so no send is half way through."""
    with store.agent_dir(name) as agent:
        try:
            info = os.stat(layout.INBOX, dir_fd=agent.fd, follow_symlinks=False)
            now = Mark(info.st_ino, info.st_size)
        except FileNotFoundError:
            now = Mark(0, 0)
        if mark is not None and (mark.ino, mark.offset) == (now.ino, now.offset):
            return None
        if now.ino == 0 and not agent.exists(layout.INBOX_ROTATED):
            return now, [], False  # no mail yet (and no lock file made for looking)
        with agent.locked(layout.INBOX_LOCK, shared=True):
            current, current_ino = agent.open_reading(layout.INBOX)
            rotated, rotated_ino = agent.open_reading(layout.INBOX_ROTATED)
            try:
                found: list[Record] = []
                end = 0
                whole = mark is None or mark.ino not in (current_ino, rotated_ino)
                for fd, start in _ranges(current, current_ino, rotated, rotated_ino, mark):
                    end, records = _owed_lines(fd, start)
                    found += records
                return (Mark(current_ino, end) if current >= 0 else Mark(0, 0)), found, whole and bool(found)
            finally:
                for fd in (current, rotated):
                    if fd >= 0:
                        os.close(fd)


def unabsorbed(store: Store, agent: str | None = None) -> dict[tuple[str, str], Record]:
    """Records not yet absorbed, by (to, id): owed lines of inboxes past their marks (one
    agent's, or all) and `owed` lines of the delivery log. Owed, whatever the folders say (a
    record is absorbed only into a folder that lacks it)."""
    marks = _marks(store)
    pending: dict[tuple[str, str], Record] = {}
    for key, record in _log_lines(store, marks.log)[1]:
        if record is None:
            pending.pop(key, None)
        elif agent is None or key[0] == agent:
            pending[key] = record
    for name in [agent] if agent is not None else store.known_agents():
        found = _inbox_records(store, name, marks.inboxes.get(name))
        for record in found[1] if found else []:
            pending[(name, record.message.id)] = record
    return pending


def into_owed(store: Store, records: list[Record], held: set[str] | None = None) -> int:
    """Write records into owed/ (each durable before its name, the directory once after),
    skipping any that a state folder holds already (`held`: their file names, when the
    caller listed them; else a lookup each). Returns how many it wrote."""
    from .due import now_syncer

    folder = store.top(layout.OWED)
    sync = _writer(store, dirs=False)  # the directory once, after all of them
    written = 0
    for record in records:
        name = record_name(record.message.to, record.message.id)
        if name in held if held is not None else any(store.top(f).exists(name) for f in (layout.OWED, layout.ACKED, layout.DEAD_LETTER)):
            continue
        if held is not None:
            held.add(name)
        write(store, layout.OWED, record, sync)
        written += 1
    if written:
        now_syncer(store).dir(folder.fd)
    return written


_LIST_OVER = 64  # more records than this: list the state folders once instead of 3 stats a record


def absorb(store: Store) -> int:
    """Take the new records of the inboxes and the log into compact state: parked (relayd.due)
    when not due for a while, else owed/ (the caller holds `delivery.lock`). Idempotent: a
    record that a state folder holds already is left alone, so a sweep killed before it
    wrote down how far it got only repeats work. Returns how many records it took. A log
    absorbed to its end and past the rotation size is rotated."""
    from .due import every, held_names, now_syncer, park

    marks = _marks(store)
    log_mark, lines = _log_lines(store, marks.log)
    inboxes: dict[str, Mark] = {}
    # Lines read again from an inbox's start (its mark lost, or its files replaced) or handed
    # over to the log may be records absorbed long ago and parked since: checked against those.
    again = bool(lines)
    for name in store.known_agents():
        found = _inbox_records(store, name, marks.inboxes.get(name))
        if found is None:
            inboxes[name] = marks.inboxes[name]
            continue
        inboxes[name] = found[0]
        lines.extend(((name, record.message.id), record) for record in found[1])
        again = again or found[2]
    new = Marks(log=log_mark, inboxes=inboxes)
    if (new.log, new.inboxes) == (marks.log, marks.inboxes):
        return 0
    pending: dict[tuple[str, str], Record] = {}
    for key, record in lines:
        if record is not None:
            pending[key] = record
        elif pending.pop(key, None) is None:  # a cancel (earlier versions) of a record absorbed before
            store.top(layout.OWED).unlink(record_name(*key), missing_ok=True)
    held: set[str] | None = None
    if len(pending) > _LIST_OVER or again:
        held = held_names(store)
        if again:
            held |= {record_name(r.message.to, r.message.id) for r in every(store)}
    fresh = [r for (to, i), r in pending.items() if not (record_name(to, i) in held if held is not None else any(store.top(f).exists(record_name(to, i)) for f in (layout.OWED, layout.ACKED, layout.DEAD_LETTER)))]
    soon = park(store, fresh, store.clock())
    into_owed(store, soon, held)
    # Data first here too: a mark past records whose files a crash lost would lose them.
    store.root_dir().replace(layout.DELIVERY_ABSORBED, json_encoder.encode(new) + b"\n", now_syncer(store))
    if new.log is not None:
        _rotate_log(store, new.log)
    return len(fresh)


def needs_absorbing(store: Store) -> bool:
    """Whether the log or an inbox grew past its mark (a stat each, and a small read: no lock)."""
    marks = _marks(store)
    root = store.root_dir()
    try:
        info = os.stat(layout.DELIVERY_LOG, dir_fd=root.fd, follow_symlinks=False)
        if marks.log is None or (marks.log.ino, marks.log.offset) != (info.st_ino, info.st_size):
            return True
    except FileNotFoundError:
        pass
    agents = store.top(layout.AGENTS)
    for name in store.known_agents():
        mark = marks.inboxes.get(name)
        try:
            info = os.stat(f"{name}/{layout.INBOX}", dir_fd=agents.fd, follow_symlinks=False)
        except FileNotFoundError:
            if mark is None:
                return True
            continue
        if mark is None or (mark.ino, mark.offset) != (info.st_ino, info.st_size):
            return True
    return False


def hand_over(store: Store, agent: Dir, name: str) -> None:
    """Before an inbox rotation drops `inbox.jsonl.1` (under the inbox lock): its owed lines
    that no sweep absorbed yet go to the delivery log, fsynced at once with the log's directory
    entry (also under relayd: the rotation that follows must not be durable before they are).
    Rare: once per rotation size."""
    mark = _marks(store).inboxes.get(name)
    current_ino = agent.inode(layout.INBOX)
    if mark is not None and mark.ino == current_ino:
        return  # the sweep is past the file being dropped
    rotated, rotated_ino = agent.open_reading(layout.INBOX_ROTATED)
    if rotated < 0:
        return
    try:
        start = mark.offset if mark is not None and mark.ino == rotated_ino else 0
        records = _owed_lines(rotated, start)[1]
    finally:
        os.close(rotated)
    if records:
        from .due import now_syncer

        now = now_syncer(store)
        open_records(store, records, now)
        now.dir(store.root_dir().fd)  # (the log may have just been created)


def _rotate_log(store: Store, mark: Mark) -> None:
    """`delivery.jsonl` -> `delivery.jsonl.1` once absorbed to its end and past the rotation size.
    Under the log's own lock, which every writer takes (and then checks that its descriptor
    still is the log's), so nothing lands in the old file after it was absorbed; the previous
    `.1` was absorbed to its end before the mark moved on to this file."""
    root = store.root_dir()
    try:
        fd = root.open(layout.DELIVERY_LOG, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        info = os.fstat(fd)
        if info.st_ino != mark.ino or info.st_size != mark.offset or info.st_size < store.rotate_bytes:
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_size == mark.offset:  # nothing appended since it was read
            root.rename(layout.DELIVERY_LOG, layout.DELIVERY_LOG_ROTATED)
    finally:
        os.close(fd)  # (releases the lock)


def names(store: Store, folder: str) -> list[str]:
    """A state directory's entries (none when an older store lacks it; looking creates nothing)."""
    found = store.top_if_exists(folder)
    return found.listdir() if found is not None else []


def states(store: Store, to: str, ids: list[str]) -> dict[str, str]:
    """For messages of `to` sent with ack: "owed", "acked", "dead_letter", or absent (unknown)."""
    from .due import find

    found: dict[str, str] = {}
    for folder in (layout.OWED, layout.ACKED, layout.DEAD_LETTER):
        opened = store.top_if_exists(folder)
        if opened is None:
            continue
        for message_id in ids:
            if message_id not in found and opened.exists(record_name(to, message_id)):
                found[message_id] = folder
    if len(found) < len(ids):
        pending = unabsorbed(store, to)
        found.update({i: layout.OWED for i in ids if i not in found and (to, i) in pending})
    if len(found) < len(ids):
        found.update({i: layout.OWED for i in find(store, to, [i for i in ids if i not in found])})
    return found


def count_by_agent(store: Store, folder: str) -> dict[str, int]:
    """How many records each recipient has in `folder` (a listing, no file read; for owed, also
    the parked records and those not absorbed yet)."""
    if folder != layout.OWED:
        return _per_recipient(names(store, folder))
    return owed_counts(store, unabsorbed_too=True)[0]


def owed_counts(store: Store, unabsorbed_too: bool) -> tuple[dict[str, int], float | None]:
    """Owed records per recipient: in owed/, parked, and (`unabsorbed_too`) inbox and log lines
    no sweep has absorbed yet; and the earliest parked due time."""
    from .due import counts as parked

    # A sweep writes a record's new place (a parked line, an owed/ file) before it leaves the
    # old one (an inbox line past the mark, a parked file, an owed/ file), all under
    # delivery.lock: counted in between, the record would count twice. A shared hold waits
    # for the sweep's move to end (as an ack does) and lets other counts run alongside.
    with store.root_dir().locked(layout.DELIVERY_LOCK, shared=True):
        listed = names(store, layout.OWED)
        counts = _per_recipient(listed)
        per_parked, earliest = parked(store)
        for to, n in per_parked.items():
            counts[to] = counts.get(to, 0) + n
        if unabsorbed_too:
            there = set(listed)
            for to, message_id in unabsorbed(store):
                if record_name(to, message_id) not in there:
                    counts[to] = counts.get(to, 0) + 1
    return counts, earliest


def _per_recipient(listed: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in listed:
        parts = split_name(name)
        if parts is not None:
            counts[parts[0]] = counts.get(parts[0], 0) + 1
    return counts


def owed_ids(store: Store, agent: str) -> set[str]:
    """Ids of the agent's messages that are still owed (gc keeps their lines)."""
    from .due import every

    prefix = f"{agent}."
    found = {parts[1] for name in names(store, layout.OWED) if name.startswith(prefix) and (parts := split_name(name))}
    found |= {r.message.id for r in every(store) if r.message.to == agent}
    return found | {message_id for _, message_id in unabsorbed(store, agent)}


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
