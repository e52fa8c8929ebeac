"""Message retention (seed 004 §9, "gc truncates old messages"): `gc --keep 30d`.

Only the rotated inbox `agents/<name>/inbox.jsonl.1` is trimmed: it is closed (nothing
appends to it), and the current inbox is never rewritten under a writer. A message is
dropped only when all of these hold:
* it lies before the agent's read cursor (read: unread mail is never dropped);
* its `ts` is older than the limit (a line whose time cannot be read is kept);
* it is not owed: sent with `ack` and not yet acknowledged (`relayd.delivery.owed`), since an
  owed message may still be presented again and acknowledged by its id;
* it decodes (a damaged line is kept for a person to look at).
Rotated files moved to `dead_letter/` held unread mail when they went there; they are
never trimmed line by line, only deleted whole past their age and size
(`relayd.inbox.dead_letters`). The rewrite is temp file + fsync + rename under the inbox lock, then the
cursor moves to the same message in the new file; a crash between the two leaves the
cursor at the start of the kept file, which shows kept mail again rather than losing any.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from .. import layout
from ..errors import UsageError
from ..fsio import Dir
from ..inbox.cursor import read_cursor, write_cursor
from ..records import Cursor, message_decoder
from ..store import Store
from ..timefmt import parse_iso
from .owed import owed_ids


class Trimmed(msgspec.Struct, kw_only=True):
    agent: str
    file: str  # the file trimmed, relative to the store
    dropped: int  # read messages older than the limit (removed, or that would be)
    kept: int  # lines left in it: newer, unread, owed or damaged


def trim_rotated(store: Store, name: str, cutoff: datetime, dry_run: bool) -> Trimmed | None:
    """Drop read messages older than `cutoff` from one agent's rotated inbox."""
    owed = owed_ids(store, name)
    with store.agent_dir(name) as agent, agent.locked(layout.INBOX_LOCK):
        data = agent.read_bytes(layout.INBOX_ROTATED)
        if data is None:
            return None
        cursor = read_cursor(agent)
        read_end = min(cursor.offset, len(data)) if cursor.rotated else len(data)
        kept: list[bytes] = []
        kept_before_cursor = 0
        dropped = 0
        offset = 0
        for line in data.splitlines(keepends=True):
            end = offset + len(line)
            if end <= read_end and line.endswith(b"\n") and _expired(line, cutoff, owed):
                dropped += 1
            else:
                kept.append(line)
                if end <= read_end:
                    kept_before_cursor += len(line)
            offset = end
        if not dropped:
            return None
        result = Trimmed(agent=name, file=f"{layout.AGENTS}/{name}/{layout.INBOX_ROTATED}", dropped=dropped, kept=len(kept))
        if not dry_run:
            _rewrite(store, agent, b"".join(kept), cursor, kept_before_cursor)
    return result


def _expired(line: bytes, cutoff: datetime, owed: set[str]) -> bool:
    try:
        message = message_decoder.decode(line)
        return message.id not in owed and parse_iso(message.ts) < cutoff
    except (msgspec.DecodeError, msgspec.ValidationError, UsageError):
        return False


def _rewrite(store: Store, agent: Dir, kept: bytes, cursor: Cursor, new_offset: int) -> None:
    """Under the inbox lock: the trimmed file replaces `.1`, and the cursor follows it."""
    if not kept:
        agent.unlink(layout.INBOX_ROTATED)
        store.sync.dir(agent.fd)
        if cursor.rotated:  # everything in `.1` was read: reading goes on at the current file
            current = agent.inode(layout.INBOX)
            write_cursor(store, agent, Cursor(offset=0, ino=max(current, 0)))
        return
    agent.replace(layout.INBOX_ROTATED, kept, store.sync)
    if cursor.rotated:
        write_cursor(store, agent, Cursor(offset=new_offset, rotated=True, ino=agent.inode(layout.INBOX_ROTATED)))


def trim_all(store: Store, cutoff: datetime, dry_run: bool) -> list[Trimmed]:
    """Trim every agent's rotated inbox; what was (or would be) dropped, per agent."""
    found = []
    for name in store.known_agents():
        trimmed = trim_rotated(store, name, cutoff, dry_run)
        if trimmed is not None:
            found.append(trimmed)
    return found


