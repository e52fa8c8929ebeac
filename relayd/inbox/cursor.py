"""The read cursor: how far an agent has read its inbox, and the files it points into.

The cursor (`cursor.json`) is a byte offset at a line boundary of the current inbox or of
`inbox.jsonl.1` (after a rotation), with the inode of that file, so a crash between a
rotation's rename and the cursor's move is recognised. It is read and moved under the inbox
lock; a reader opens the inbox files together with the cursor (`snapshot`), so a rotation
cannot split them, and moves the cursor only forward (`advance`).
"""

from __future__ import annotations

import os

import msgspec

from .. import layout
from ..fsio import Dir, line_start_at
from ..records import Cursor, cursor_decoder, json_encoder
from ..store import Store


def read_cursor(agent: Dir) -> Cursor:
    """The cursor, checked against the files it points into (call it under the inbox lock)."""
    raw = agent.read_bytes(layout.CURSOR)
    if not raw:
        return Cursor()
    try:
        cursor = cursor_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        # Older stores kept a bare byte offset.
        text = raw.decode(errors="replace").strip()
        return Cursor(offset=int(text)) if text.isdigit() else Cursor()
    if not cursor.ino or agent.inode(layout.INBOX_ROTATED if cursor.rotated else layout.INBOX) == cursor.ino:
        return cursor
    # A rotation renamed the inbox but died before moving the cursor along.
    rotated_ino = agent.inode(layout.INBOX_ROTATED)
    if not cursor.rotated and rotated_ino == cursor.ino:
        return Cursor(offset=cursor.offset, rotated=True, ino=cursor.ino)
    # The file it pointed into was rotated away (the policy drops it): begin at what is kept.
    return Cursor(offset=0, rotated=rotated_ino >= 0, ino=max(rotated_ino, 0))


def write_cursor(store: Store, agent: Dir, cursor: Cursor) -> None:
    agent.replace(layout.CURSOR, json_encoder.encode(cursor) + b"\n", store.sync)


class Position(msgspec.Struct, frozen=True):
    """Where a line ends: in the rotated file (`rotated=True`) or the current one."""

    rotated: bool
    offset: int

    def key(self) -> tuple[int, int]:
        return (0 if self.rotated else 1, self.offset)


class Snapshot(msgspec.Struct):
    """The inbox files opened together under the lock, so a rotation cannot split them."""

    cursor: Cursor
    current: int  # fds, -1 when absent
    rotated: int
    current_ino: int
    rotated_ino: int

    def close(self) -> None:
        for fd in (self.current, self.rotated):
            if fd >= 0:
                os.close(fd)


def _open_fd(agent: Dir, name: str) -> tuple[int, int]:
    try:
        fd = agent.open(name, os.O_RDONLY)
    except FileNotFoundError:
        return -1, -1
    return fd, os.fstat(fd).st_ino


def snapshot(agent: Dir) -> Snapshot:
    with agent.locked(layout.INBOX_LOCK, shared=True):
        cursor = read_cursor(agent)
        current, current_ino = _open_fd(agent, layout.INBOX)
        rotated, rotated_ino = _open_fd(agent, layout.INBOX_ROTATED)
    return Snapshot(cursor, current, rotated, current_ino, rotated_ino)


def at_line_start(fd: int, offset: int) -> int:
    """Where unread lines begin for a cursor at `offset`: the start of the line it points
    into or after (a damaged cursor), or 0 when it points past the end (the file was
    replaced since the cursor was written: read it all)."""
    if offset > os.fstat(fd).st_size:
        return 0
    return line_start_at(fd, offset)


def unread_ranges(snap: Snapshot) -> list[tuple[int, int, bool]]:
    """(fd, offset where unread lines begin, whether it is the rotated file), oldest first."""
    cursor = snap.cursor
    ranges = []
    if cursor.rotated and snap.rotated >= 0:
        ranges.append((snap.rotated, at_line_start(snap.rotated, cursor.offset), True))
    if snap.current >= 0:
        ranges.append((snap.current, 0 if cursor.rotated else at_line_start(snap.current, cursor.offset), False))
    return ranges


def advance(store: Store, agent: Dir, snap: Snapshot, to: Position) -> bool:
    """Move the cursor forward to `to`, re-checked under the lock against a rotation
    that happened while the messages were being read. False when it did not move."""
    file_ino = snap.rotated_ino if to.rotated else snap.current_ino
    with agent.locked(layout.INBOX_LOCK):
        now_current = agent.inode(layout.INBOX)
        now_rotated = agent.inode(layout.INBOX_ROTATED)
        if file_ino == now_current:
            target = Position(False, to.offset)
        elif file_ino == now_rotated:
            target = Position(True, to.offset)
        else:
            return False  # rotated out twice meanwhile; leave the cursor where it is
        existing = read_cursor(agent)
        was = Position(existing.rotated, existing.offset)
        if not existing.rotated and existing.offset > _size(agent, layout.INBOX):
            was = Position(False, 0)  # a cursor past the end of a replaced inbox counts as none
        if was.key() >= target.key():
            return False  # another reader already moved it further
        ino = now_rotated if target.rotated else now_current
        write_cursor(store, agent, Cursor(offset=target.offset, rotated=target.rotated, ino=ino))
        return True


def _size(agent: Dir, name: str) -> int:
    try:
        return os.stat(name, dir_fd=agent.fd, follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0

