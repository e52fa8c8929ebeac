"""Putting handed-over mail back as unread, after the turn it was handed into failed.

A hook that hands mail to a program's model marks it read (relayctl.hook_answer); when that
turn then fails (the model call refused: "Not logged in", a lost connection) the model never
saw it. `unread_again` moves the read cursor back over those messages, and only while they
are the last ones read: mail read since (by `relayctl read`, a later hook) keeps its place.
It also leaves the agent's `pending` flag (relayd.arrival.notify), so that no trigger starts
the same failing turn again and again: the mail comes with the next prompt's hook.
"""

from __future__ import annotations

from .. import layout
from ..fsio import Dir
from ..records import Cursor
from ..store import Store
from ..timefmt import now_iso
from .cursor import Position, read_cursor, snapshot, write_cursor
from .read import messages_forward


def unread_again(store: Store, agent: Dir, ids: list[str]) -> list[str]:
    """Move the cursor back before the newest read messages that are among `ids`; the ids
    now unread again (none when the newest read message is not one of them)."""
    wanted = set(ids)
    snap = snapshot(agent)
    try:
        here = Position(snap.cursor.rotated, snap.cursor.offset)
        lines: list[tuple[Position, Position, str]] = []  # (start, end, id), oldest first
        for rotated, fd, name in ((True, snap.rotated, layout.INBOX_ROTATED), (False, snap.current, layout.INBOX)):
            if fd < 0:
                continue
            start = Position(rotated, 0)
            for end, message in messages_forward(fd, 0, rotated, None, name):
                if end.key() > here.key():
                    break
                lines.append((start, end, message.id))
                start = end
        back: list[tuple[Position, str]] = []
        for start, _end, message_id in reversed(lines):
            if message_id not in wanted:
                break
            back.append((start, message_id))
        if not back:
            return []
        to = back[-1][0]
        with agent.locked(layout.INBOX_LOCK):
            ino = agent.inode(layout.INBOX_ROTATED if to.rotated else layout.INBOX)
            if ino != (snap.rotated_ino if to.rotated else snap.current_ino):
                return []  # rotated meanwhile: leave the cursor where it is
            now = read_cursor(agent)
            if (now.rotated, now.offset) != (snap.cursor.rotated, snap.cursor.offset):
                return []  # read further meanwhile
            write_cursor(store, agent, Cursor(offset=to.offset, rotated=to.rotated, ino=ino))
        agent.create_exclusive(layout.PENDING, f"{now_iso()}\n".encode(), None)
        return [message_id for _start, message_id in reversed(back)]
    finally:
        snap.close()
