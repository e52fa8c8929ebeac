"""Parked owed records: those not due for a while, kept compactly, one file per minute of due times.

A record in `owed/` is a file whose mtime is its due time, so a sweep stats every one of them;
absorbing a record writes one. Both grow with the owed messages. Most records wait seconds
(a recipient acknowledges, or the first redelivery comes); those waiting longer are *parked*
here instead, as lines of `due/<minute>.jsonl` (the minute, in epoch minutes, in which they
come due), many records to one write and one fsync. A sweep lists `due/` (a few names),
and when a file's minute has begun it moves the file's records into `owed/` and deletes the
file; until then nothing of it is read. So a sweep costs what is due soon, not what is owed.

Rules that keep each record in exactly one state (DESIGN §4), whatever crashes:
* a parked line counts only while no state folder (owed/, acked/, dead_letter/) holds its
  record: the folders win. A record is written to a folder before its parked line goes
  (a redelivery parks the rewritten record, then removes its owed/ file; an ack writes
  acked/ and then appends a line settling the parked one), so a crash between the two
  leaves it counted twice at most (until its minute comes), never lost or revived;
* a parked file is appended to and replaced only under `delivery.lock`, its data fsynced
  before the marks or files that rely on it move on. A sweep that lost its marks parks a
  record again, in the same file (same due time): counted once, moved to owed/ once.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import msgspec

from .. import layout
from ..fsio import append_file
from ..records import json_encoder
from ..store import Store
from .record import Record, held_names, into_owed, names, now_syncer

WINDOW = 60.0  # seconds of due times per parked file
SUFFIX = ".jsonl"


class Parked(msgspec.Struct, kw_only=True):
    """One line of a parked file; `to` and `id` come first, so a lookup decodes little. A line
    without a record settles its key's record in this file (written after an ack put the
    record in acked/: the file is appended to, never rewritten for one ack)."""

    to: str
    id: str
    record: Record | None = None


class _Due(msgspec.Struct):
    due: float


class _Light(msgspec.Struct):
    """A parked line as counting needs it: whose, and when due (the message is skipped)."""

    to: str
    id: str
    record: _Due | None = None


_parked_decoder = msgspec.json.Decoder(Parked)
_light_decoder = msgspec.json.Decoder(_Light)


def minute(due: float) -> int:
    return int(due // WINDOW)


def _minute_of(name: str) -> int | None:
    stem = name[: -len(SUFFIX)]
    return int(stem) if name.endswith(SUFFIX) and stem.isdigit() else None


def files(store: Store) -> list[tuple[int, str]]:
    """(minute, name) of every parked file, soonest first."""
    found = [(m, name) for name in names(store, layout.DUE) if (m := _minute_of(name)) is not None]
    return sorted(found)


def park(store: Store, records: list[Record], now: float) -> list[Record]:
    """Append the records due after the current minute to their parked files (fsynced);
    returns the others, which belong in owed/ now."""
    later: dict[int, list[Record]] = {}
    soon = []
    current = minute(now)
    for record in records:
        if minute(record.due) <= current:
            soon.append(record)
        else:
            later.setdefault(minute(record.due), []).append(record)
    if later:
        folder = store.top(layout.DUE)
        sync = now_syncer(store)
        for when, parked in sorted(later.items()):
            payload = b"".join(json_encoder.encode(Parked(to=r.message.to, id=r.message.id, record=r)) + b"\n" for r in parked)
            append_file(folder, f"{when}{SUFFIX}", payload, sync)  # (a new file's directory entry is fsynced too)
    return soon


def _lines(store: Store, name: str) -> Iterator[bytes]:
    folder = store.top_if_exists(layout.DUE)
    raw = folder.read_bytes(name) if folder is not None else None
    for line in (raw or b"").split(b"\n"):
        if line:
            yield line


def _entries(lines: Iterator[bytes], decoder: msgspec.json.Decoder = _parked_decoder) -> tuple[dict[tuple[str, str], Any], set[tuple[str, str]]]:
    """(the records by key, the keys settled) of a parked file's lines; a torn or damaged
    line is neither. A record parked twice (a sweep that lost its marks) is one. With
    `_light_decoder`, a record is only its due time."""
    records: dict[tuple[str, str], Any] = {}
    settled: set[tuple[str, str]] = set()
    for line in lines:
        try:
            entry = decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if entry.record is None:
            settled.add((entry.to, entry.id))
        else:
            records[(entry.to, entry.id)] = entry.record
    for key in settled:
        records.pop(key, None)
    return records, settled


def read(store: Store, name: str) -> list[Record]:
    """The records of one parked file that are not settled."""
    return list(_entries(_lines(store, name))[0].values())


def unpark_begun(store: Store, now: float) -> int:
    """Move the records of every parked file whose minute has begun into owed/ (skipping those
    a state folder holds), then delete the file. Returns how many files it emptied (the
    caller holds `delivery.lock`)."""
    begun = [name for when, name in files(store) if when <= minute(now)]
    if not begun:
        return 0
    held = held_names(store)
    for name in begun:
        into_owed(store, read(store, name), held)
    folder = store.top(layout.DUE)
    for name in begun:
        folder.unlink(name, missing_ok=True)
    now_syncer(store).dir(folder.fd)
    return len(begun)


def begun(store: Store, now: float) -> bool:
    """Whether a parked file's minute has begun (a listing of due/, no file read)."""
    found = files(store)
    return bool(found) and found[0][0] <= minute(now)


def find(store: Store, to: str, ids: list[str]) -> dict[str, tuple[str, Record]]:
    """The parked records of `to` among `ids`: id -> (file name, record). A byte search of each
    parked file; only lines holding an id are decoded."""
    found: dict[str, tuple[str, Record]] = {}
    needles = [i.encode() for i in ids]
    for _, name in files(store):
        raw = store.top(layout.DUE).read_bytes(name) or b""
        records, _ = _entries(_holding(raw, needles))
        found.update({i: (name, r) for (t, i), r in records.items() if t == to and i in ids})
    return found


def _holding(raw: bytes, needles: list[bytes]) -> Iterator[bytes]:
    """The lines of `raw` that hold one of `needles` (found by byte search, not by splitting)."""
    for needle in needles:
        at = raw.find(needle)
        while at >= 0:
            start = raw.rfind(b"\n", 0, at) + 1
            end = raw.find(b"\n", at)
            if end < 0:
                break  # a torn last line
            yield raw[start:end]
            at = raw.find(needle, end)


def owners(store: Store, message_id: str) -> set[str]:
    """Recipients with a parked record of this id."""
    found: set[str] = set()
    for _, name in files(store):
        records, _ = _entries(_holding(store.top(layout.DUE).read_bytes(name) or b"", [message_id.encode()]))
        found |= {t for t, i in records if i == message_id}
    return found


def settle(store: Store, name: str, keys: set[tuple[str, str]]) -> None:
    """Mark the records of `keys` in one parked file as settled elsewhere (one append, fsynced)."""
    payload = b"".join(json_encoder.encode(Parked(to=to, id=i)) + b"\n" for to, i in sorted(keys))
    append_file(store.top(layout.DUE), name, payload, now_syncer(store))


# Counting parked records reads every parked file; a sweep every second would read them all
# each time. The counts are kept per file, by the file's identity (inode, size, mtime), so a
# process reads a file again only after it changed.
_counted: dict[tuple[str, str], tuple[tuple[int, int, int], dict[str, int], float | None]] = {}


def counts(store: Store) -> tuple[dict[str, int], float | None]:
    """Parked records per recipient (those no state folder holds, as far as a crash left
    none behind: see the module docstring), and the earliest parked due time."""
    total: dict[str, int] = {}
    earliest: float | None = None
    folder = store.top_if_exists(layout.DUE)
    if folder is None:
        return total, None
    listed = files(store)
    for _, name in listed:
        try:
            info = os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        identity = (info.st_ino, info.st_size, info.st_mtime_ns)
        key = (folder.path, name)
        cached = _counted.get(key)
        if cached is None or cached[0] != identity:
            dues, _ = _entries(_lines(store, name), _light_decoder)
            per: dict[str, int] = {}
            for to, _id in dues:
                per[to] = per.get(to, 0) + 1
            first = min((r.due for r in dues.values()), default=None)
            cached = (identity, per, first)
            _counted[key] = cached
        for to, n in cached[1].items():
            total[to] = total.get(to, 0) + n
        if cached[2] is not None and (earliest is None or cached[2] < earliest):
            earliest = cached[2]
    there = {n for _, n in listed}
    for gone in [k for k in list(_counted) if k[0] == folder.path and k[1] not in there]:  # (relayd's sweeper thread counts too)
        _counted.pop(gone, None)
    return total, earliest


def every(store: Store) -> Iterator[Record]:
    """Every parked record, soonest file first."""
    for _, name in files(store):
        yield from read(store, name)


def is_parked(store: Store, to: str, message_id: str) -> bool:
    return message_id in find(store, to, [message_id])

