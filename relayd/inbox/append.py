"""Appending to inboxes: `deliver`, the one way a message reaches an inbox, and rotation.

An inbox is `agents/<name>/inbox.jsonl`, one message per line, appended under an exclusive
flock on `inbox.lock`. Every writer (send, the redelivery sweep, `dlq retry`, bounces,
escalations, the bridge receiver; IGNITE files arrive as sends) goes through `deliver`,
which appends and then writes the lines' arrival events (relayd publishes them: they wake
followers and trigger notifications) while still holding each inbox's lock. So the rule
"no line without its event, emitted under the inbox lock" holds by construction: a line is
kept only together with its event (`Appends.commit`), and a writer killed between the two
leaves a line that `relayd.delivery.announce` finds and announces.

When an inbox passes the rotation size it becomes `inbox.jsonl.1` and the cursor is moved
along with it, under the same lock, so unread mail stays unread. Only one rotated file is
kept: the previous `.1` is deleted when it was read to the end, and moved to `dead_letter/`
when it still held unread mail (kept there within an age and a size, `dead_letters`). Before it goes, the delivery wing takes the owed records its
lines carry (`relayd.inbox.hooks.hand_over`).
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from .. import layout
from ..errors import RelayError, StoreError
from ..fsio import Dir, append_lines, open_appending
from ..records import Cursor, Event, Message, json_encoder
from ..store import Store
from ..ulid import new_ulid
from . import dead_letters, hooks
from .cursor import read_cursor, write_cursor


def deliver(store: Store, by_inbox: Mapping[str, Sequence[Message]], also: Sequence[Event] = ()) -> None:
    """Append each recipient's messages in one write per inbox and emit their arrivals (and
    `also`, events of the same moment) while every inbox is still locked. If the events
    cannot be written, the appends are taken back and the error raised: nothing is stored
    that nobody would be told about.

    Mail for an agent on another host goes to the bridge's outbox instead (`relayd.remote`);
    its arrival is emitted all the same (the outbox has no lock to hold)."""
    remote = [r for r in by_inbox if is_remote(store, r)]
    local = sorted(r for r in by_inbox if r not in remote)
    with Appends(store) as appends:
        for recipient in local:  # all locked first, in name order
            appends.lock(recipient)
        for recipient in local:
            appends.append(recipient, by_inbox[recipient])
        for recipient in remote:
            store.remote.enqueue(store, recipient, list(by_inbox[recipient]))
        appends.commit([arrival(store, m) for messages in by_inbox.values() for m in messages] + list(also))


def arrival(store: Store, m: Message) -> Event:
    """The event that announces an appended line: it wakes followers and triggers notifications."""
    return store.event("inbox", action="message", agent=m.to, message_id=m.id, from_=m.from_, priority=m.priority, subject=m.subject[:120])


class Appends:
    """Inbox appends that can still be taken back: each inbox stays locked, with the
    offset where this operation's lines begin, until `commit(events)` wrote their events
    or the end of the `with` (which truncates them away unless committed). Lock inboxes in
    name order, so two processes sending to the same inboxes cannot deadlock."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dirs: dict[str, Dir] = {}
        self.locks: dict[str, object] = {}
        self.written: dict[str, tuple[int, int]] = {}  # recipient -> (fd, start offset)
        self.kept = False

    def __enter__(self) -> "Appends":
        return self

    def lock(self, recipient: str) -> Dir:
        agent = self.store.agent_dir(recipient)
        self.dirs[recipient] = agent
        held = agent.locked(layout.INBOX_LOCK)
        held.__enter__()
        self.locks[recipient] = held
        return agent

    def append(self, recipient: str, messages: Sequence[Message]) -> None:
        payload = b"".join(json_encoder.encode(m) + b"\n" for m in messages)
        agent = self.dirs[recipient]
        store = self.store
        fd, size = open_appending(agent, layout.INBOX, len(payload), store.sync, store.rotate_bytes, lambda size: _rotate(store, agent, size))
        try:
            start = append_lines(fd, payload, os.path.join(agent.path, layout.INBOX), size)
            self.written[recipient] = (fd, start)  # from here on, taking back cuts it off again
            store.sync.file(fd)
        except BaseException:
            if recipient not in self.written:
                os.close(fd)
            raise

    def take_back(self) -> None:
        """Truncate every inbox to where this operation began writing (durably)."""
        for fd, start in self.written.values():
            try:
                os.ftruncate(fd, start)
                self.store.sync.file(fd)
            except (OSError, RelayError):
                pass  # shrinking a file cannot run out of space; nothing better to do here
            os.close(fd)
        self.written.clear()

    def commit(self, events: Sequence[Event]) -> None:
        """Write the lines' events (their arrivals) while every inbox is still locked, then
        keep the lines: the only way appends are kept. Raises the event log's error, and
        the end of the `with` then takes the lines back."""
        self.store.emit(*events)
        self.kept = True

    def __exit__(self, *exc: object) -> None:
        try:
            if self.kept:
                for fd, _ in self.written.values():
                    os.close(fd)
                self.written.clear()
            else:
                self.take_back()
        finally:
            for held in self.locks.values():
                held.__exit__(None, None, None)  # type: ignore[attr-defined]
            for agent in self.dirs.values():
                agent.close()


def _rotate(store: Store, agent: Dir, old_size: int) -> None:
    """Under the inbox lock: current -> `.1`, and carry the cursor along."""
    hooks.hand_over(store, agent, os.path.basename(agent.path))  # the `.1` dropped now may owe records no sweep took yet
    cursor = read_cursor(agent)
    if cursor.rotated and agent.exists(layout.INBOX_ROTATED):
        _dead_letter_rotated(store, agent)
    agent.rename(layout.INBOX, layout.INBOX_ROTATED)
    # A crash right here leaves the old cursor, which read_cursor recognises by its inode.
    rotated_ino = agent.inode(layout.INBOX_ROTATED)
    if cursor.rotated:
        # The previous `.1` went to dead_letter/ with its unread mail; start at the file rotated now.
        moved = Cursor(offset=0, rotated=True, ino=rotated_ino)
    elif cursor.offset < old_size:
        moved = Cursor(offset=cursor.offset, rotated=True, ino=rotated_ino)
    else:
        moved = Cursor(offset=0)
    write_cursor(store, agent, moved)


def _dead_letter_rotated(store: Store, agent: Dir) -> None:
    """Only one rotated file is kept; one that still holds unread mail is not deleted but
    moved to `dead_letter/<agent>.<ulid>.jsonl`, so mail is never lost without a trace."""
    name = os.path.basename(agent.path)
    folder = store.top(layout.DEAD_LETTER)
    target = f"{name}.{new_ulid()}.jsonl"
    try:
        os.rename(layout.INBOX_ROTATED, target, src_dir_fd=agent.fd, dst_dir_fd=folder.fd)
    except OSError as exc:
        raise StoreError(f"moving unread mail of {name} to {folder.path}: {exc.strerror or exc}") from exc
    store.sync.dir(folder.fd)
    store.emit(store.event("inbox", action="dead_letter", agent=name))
    dead_letters.trim_to_size(store)  # a flood of mail must not fill the disk between two gc runs


def is_remote(store: Store, recipient: str) -> bool:
    return store.remote is not None and store.remote.host_of(recipient) is not None


def check_inbox(store: Store, recipient: str) -> None:
    """Refuse an inbox whose files are not plain files (a planted symlink) before writing."""
    if is_remote(store, recipient):
        return  # mail for another host goes to the outbox
    with store.agent_dir(recipient) as agent:
        agent.refuse_non_regular(layout.INBOX, layout.INBOX_LOCK)
