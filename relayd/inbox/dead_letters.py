"""Rotated-out unread mail in `dead_letter/`: kept for a while, never without bound.

An inbox rotation moves a `.1` that still held unread mail to `dead_letter/<agent>.<ulid>.jsonl`
(`relayd.inbox.append`) rather than delete it. Anyone who can make an inbox rotate (a
flood of mail from another host, a script gone wrong) would otherwise grow that folder
forever, so these files are deleted:
* when older than `gc.dead_letter_keep` (default 30 days; the age is the time in the
  file's name, when it was moved there), by `gc`;
* the oldest first while all of them together pass `gc.dead_letter_mib` (default 256 MiB),
  by `gc` and at once by every rotation that adds one, so a flood between two runs of `gc`
  cannot pass it either.
Each deletion is an `inbox` event (`dead_letter_trimmed`, with the agent) and a line of
`gc`'s answer. Owed messages' records (`<to>.<id>.json`, `dlq list`) are small, made only
by local sends with `--ack`, and are left to `dlq retry` / `dlq drop`.
"""

from __future__ import annotations

import os

import msgspec

from .. import layout
from ..config import GcConfig, load_config
from ..errors import RelayError
from ..store import Store
from ..timefmt import parse_duration
from ..ulid import is_ulid, ulid_time_ms


class DeletedDeadLetter(msgspec.Struct, kw_only=True):
    file: str  # relative to the store: dead_letter/<agent>.<ulid>.jsonl
    agent: str
    bytes: int
    why: str  # "older than 30d", "past 256 MiB of dead letters"


class Rotated(msgspec.Struct, kw_only=True):
    name: str
    agent: str
    moved_ms: int  # when it was moved to dead_letter/ (the ULID in its name)
    size: int


def rotated(store: Store) -> list[Rotated]:
    """The rotated inbox files in dead_letter/, oldest first."""
    folder = store.top(layout.DEAD_LETTER)
    found = []
    for name in folder.listdir():
        agent, ulid, suffix = (name.rsplit(".", 2) + ["", ""])[:3]
        if name.startswith(".") or suffix != "jsonl" or not agent or not is_ulid(ulid):
            continue
        try:
            info = os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        found.append(Rotated(name=name, agent=agent, moved_ms=ulid_time_ms(ulid), size=info.st_size))
    found.sort(key=lambda r: (r.moved_ms, r.name))
    return found


def limits(store: Store) -> GcConfig:
    """config.json's gc settings; the defaults when the file cannot be read (a broken file
    is reported by the commands it breaks, and trimming must not stop a send)."""
    try:
        return load_config(store).gc
    except RelayError:
        return GcConfig()


def trim(store: Store, now_s: float, keep: str | None, max_mib: int, dry_run: bool = False) -> list[DeletedDeadLetter]:
    """Delete (or, `dry_run`, name) the rotated files older than `keep` and, oldest first,
    those past `max_mib` MiB in all."""
    keep_ms = parse_duration(keep).total_seconds() * 1000 if keep else None
    files = rotated(store)
    total = sum(f.size for f in files)
    limit = max_mib << 20
    gone: list[DeletedDeadLetter] = []
    for f in files:
        if keep_ms is not None and now_s * 1000 - f.moved_ms > keep_ms:
            why = f"older than {keep}"
        elif total > limit:
            why = f"past {max_mib} MiB of dead letters"
        else:
            continue
        total -= f.size
        gone.append(DeletedDeadLetter(file=f"{layout.DEAD_LETTER}/{f.name}", agent=f.agent, bytes=f.size, why=why))
    if gone and not dry_run:
        folder = store.top(layout.DEAD_LETTER)
        for t in gone:
            folder.unlink(os.path.basename(t.file), missing_ok=True)
        store.sync.dir(folder.fd)
        store.emit(*(store.event("inbox", action="dead_letter_trimmed", agent=t.agent, status=t.why) for t in gone))
    return gone


def trim_to_size(store: Store) -> list[DeletedDeadLetter]:
    """After a rotation added a file: the size limit only (age is `gc`'s)."""
    return trim(store, store.clock(), None, limits(store).dead_letter_mib)
