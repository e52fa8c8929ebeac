"""Where owed records are: every form one takes on disk, and the one locked read of them all.

A message sent with `ack` is owed until its recipient acknowledges it. Its record takes
these forms, in this order; at any moment the truth is the first one of the list that holds
it, read under `delivery.lock` (`read_owed`):

    form                                  why it exists
    acked/ or dead_letter/ <to>.<id>.json the settled states (relayd.delivery.record): the truth
    owed/<to>.<id>.json                   due within the minute; its mtime is its due time
    due/<minute>.jsonl line               speed: parked until its minute, so a sweep costs what
                                          is due soon, not what is owed (relayd.delivery.parked)
    inbox line with "owed" terms          speed: a send --ack writes no file of its own; the line
                                          owes from the moment it is durable (relayd.owing)
    delivery.jsonl "owed" line            safety: an inbox rotation hands over the owed lines of
                                          the file it drops, when no sweep absorbed them yet

Two mark files say how far the slow forms were read: `delivery.absorbed` (inode and offset
of the delivery log and of each inbox: everything before is in owed/ or parked), and
`announced.json` (relayd.delivery.announce, a different rule: lines without their event).

The sweep absorbs inbox and log lines into compact state (`absorb`, under `delivery.lock`),
reading each inbox only past its mark; until then `unabsorbed` reads them. The log's owed
lines (and those of earlier versions, which logged every record there, and their
`cancelled` lines) are absorbed the same way past the log's own mark; once absorbed to its
end the log is rotated. The marks move only after the records they pass are durable, and
absorbing is idempotent (a record already in a folder is left alone), so a sweep killed half
way only repeats work.

This module imports nothing of the inbox: it is what the inbox's hooks reach (the hand-over
before a rotation, the ack states a read shows).
"""

from __future__ import annotations

import fcntl
import os

import msgspec

from .. import layout
from ..fsio import Dir, Syncer, complete_lines
from ..owing import MARKER, Terms
from ..records import json_encoder, message_decoder
from ..store import Store
from ..timefmt import now_iso
from . import parked
from .log import Receipt, receipt_decoder
from .log import write as log
from .record import Mark, Record, held_names, into_owed, names, now_syncer, read_record, record_name, split_name


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
        if MARKER in line:
            try:
                found.append(_record_of(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # damaged: never guessed at (reads report it)
    return end, found


def open_records(store: Store, records: list[Record], sync: Syncer | None = None) -> None:
    """Records as `owed` lines of the delivery log, durable before this returns (through `sync`,
    by default the store's). Sends no longer write these; an inbox rotation hands over the
    unabsorbed owed lines of the file it drops this way (`hand_over`)."""
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


_LIST_OVER = 64  # more records than this: list the state folders once instead of 3 stats a record


def absorb(store: Store) -> int:
    """Take the new records of the inboxes and the log into compact state: parked (relayd.delivery.parked)
    when not due for a while, else owed/ (the caller holds `delivery.lock`). Idempotent: a
    record that a state folder holds already is left alone, so a sweep killed before it
    wrote down how far it got only repeats work. Returns how many records it took. A log
    absorbed to its end and past the rotation size is rotated."""
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
            held |= {record_name(r.message.to, r.message.id) for r in parked.every(store)}
    fresh = [r for (to, i), r in pending.items() if not (record_name(to, i) in held if held is not None else any(store.top(f).exists(record_name(to, i)) for f in (layout.OWED, layout.ACKED, layout.DEAD_LETTER)))]
    soon = parked.park(store, fresh, store.clock())
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
    if len(found) < len(ids):
        pending = unabsorbed(store, to)
        found.update({i: layout.OWED for i in ids if i not in found and (to, i) in pending})
    if len(found) < len(ids):
        found.update({i: layout.OWED for i in parked.find(store, to, [i for i in ids if i not in found])})
    return found


def count_by_agent(store: Store, folder: str) -> dict[str, int]:
    """How many records each recipient has in `folder` (a listing, no file read; for owed, also
    the parked records and those not absorbed yet)."""
    if folder != layout.OWED:
        return _per_recipient(names(store, folder))
    return read_owed(store).counts


class Owed(msgspec.Struct, kw_only=True):
    """What is owed at one moment (`read_owed`)."""

    counts: dict[str, int]  # records per recipient
    earliest: float | None  # the earliest parked due time
    records: list[Record]  # when asked for: owed/ and unabsorbed ones all, parked ones up to the number asked


def read_owed(store: Store, unabsorbed_too: bool = True, records: int = 0) -> Owed:
    """The one read of everything owed, for status, the sweep and the web view: records in
    owed/, parked, and (`unabsorbed_too`) inbox and log lines no sweep has absorbed yet;
    with `records`, the records themselves (the parked ones until there are that many)."""
    # A sweep writes a record's new place (a parked line, an owed/ file) before it leaves the
    # old one (an inbox line past the mark, a parked file, an owed/ file), all under
    # delivery.lock: read in between, the record would count twice. A shared hold waits
    # for the sweep's move to end (as an ack does) and lets other reads run alongside.
    with store.root_dir().locked(layout.DELIVERY_LOCK, shared=True):
        listed = names(store, layout.OWED)
        counts = _per_recipient(listed)
        per_parked, earliest = parked.counts(store)
        for to, n in per_parked.items():
            counts[to] = counts.get(to, 0) + n
        found: list[Record] = []
        if records:
            found = [r for name in listed if (r := read_record(store, layout.OWED, name)) is not None]  # None: damaged by hand
        if unabsorbed_too or records:
            there = set(listed)
            for (to, message_id), record in unabsorbed(store).items():
                if record_name(to, message_id) not in there:
                    if unabsorbed_too:
                        counts[to] = counts.get(to, 0) + 1
                    if records:
                        found.append(record)
        if len(found) < records:
            held = held_names(store)
            for record in parked.every(store):
                name = record_name(record.message.to, record.message.id)
                if name not in held:
                    held.add(name)
                    found.append(record)
                if len(found) >= records:
                    break
    return Owed(counts=counts, earliest=earliest, records=found)


def _per_recipient(listed: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in listed:
        parts = split_name(name)
        if parts is not None:
            counts[parts[0]] = counts.get(parts[0], 0) + 1
    return counts


def owed_ids(store: Store, agent: str) -> set[str]:
    """Ids of the agent's messages that are still owed (gc keeps their lines)."""
    prefix = f"{agent}."
    found = {parts[1] for name in names(store, layout.OWED) if name.startswith(prefix) and (parts := split_name(name))}
    found |= {r.message.id for r in parked.every(store) if r.message.to == agent}
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
