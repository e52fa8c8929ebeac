"""No message without its announcement: inbox lines whose event never reached events.jsonl.

Every writer appends the inbox line and then, still holding the inbox lock, the event that
announces it (`relayd.inbox.append.deliver`; relayd publishes it, notifications and
followers act on it). A writer killed between the two appends leaves a line that nobody
would ever be told about.
`announce_missing` finds such lines and writes their events; relayd runs it when it starts,
and the redelivery sweep (`relayctl redeliver`) runs it in direct mode.

It reads only what is new. `announced.json` holds marks: how far the event log and each
inbox were checked (inode and offset). The log's mark is taken before any inbox is looked
at, and an inbox is checked holding its lock, when no writer is between its two appends;
a line past an inbox's mark therefore has its event in the log past the log's mark, or
never will have one. A line appended after the log was read and before the inbox's lock
was taken (relayd sends while its first check runs) has its event past the log's new
mark: the log is read on under the lock before such a line counts as unannounced.
Without marks (a store from before, a new agent, a file rotated twice since) the lines
are checked back to the oldest event the log still holds.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import contextmanager
from typing import Iterable, Iterator
from datetime import timedelta

import msgspec

from .. import layout
from ..fsio import Dir, complete_end, complete_lines
from ..inbox.append import arrival
from ..inbox.read import messages_backward, messages_forward
from ..records import Message
from ..store import Store
from ..timefmt import now_iso, parse_iso, to_iso
from .record import Mark

SLACK = 60.0  # seconds a line's time may precede the moment its append began (stamped, then the lock awaited)
_NOTHING = "\uffff"  # a horizon no line reaches: check nothing back in time


class Marks(msgspec.Struct, kw_only=True):
    checked_at: str = ""  # when the event log's mark was taken
    events: Mark | None = None
    inboxes: dict[str, Mark] = msgspec.field(default_factory=dict)


class _LogLine(msgspec.Struct):
    ts: str = ""
    action: str | None = None
    agent: str | None = None
    message_id: str | None = None


_marks_decoder = msgspec.json.Decoder(Marks)
_line_decoder = msgspec.json.Decoder(_LogLine)


def announce_missing(store: Store) -> list[Message]:
    """Write the events of inbox lines that have none; returns those lines' messages."""
    root = store.root_dir()
    with root.locked(layout.ANNOUNCE_LOCK):  # two checks at once would announce a line twice
        return _announce_missing(store, root)


def _announce_missing(store: Store, root: Dir) -> list[Message]:
    raw = root.read_bytes(layout.ANNOUNCED)
    try:
        marks = _marks_decoder.decode(raw) if raw else Marks()
    except (msgspec.DecodeError, msgspec.ValidationError):
        marks = Marks()  # damaged: check back as far as the log goes
    checked_at = now_iso()
    announced, horizon, events_mark = _announced_since(root, marks)
    found: list[Message] = []
    inboxes: dict[str, Mark] = {}
    for name in store.known_agents():
        with store.agent_dir(name) as agent, agent.locked(layout.INBOX_LOCK):
            missing, inboxes[name] = _unannounced(agent, marks.inboxes.get(name), horizon, announced.get(name) or Counter())
            if missing:
                # A send that committed after the log was read has its line here and its
                # event past the log's mark: read on to where the log ends now (rare).
                missing = _without_later_events(root, events_mark, name, missing)
            if missing:
                store.emit(*(arrival(store, m) for m in missing))
                found.extend(missing)
    new = Marks(checked_at=checked_at, events=events_mark, inboxes=inboxes)
    if (new.events, new.inboxes) != (marks.events, marks.inboxes):
        # No fsync: a mark lost in a crash only means checking a stretch again.
        root.replace(layout.ANNOUNCED, msgspec.json.encode(new), None)
    return found


def _announced_since(root: Dir, marks: Marks) -> tuple[dict[str, Counter[str]], str, Mark | None]:
    """Per agent, how many message events each id has in the log past its mark; how far
    back an inbox without a valid mark is checked; the log's new mark."""
    mark = marks.events
    announced: dict[str, Counter[str]] = {}
    with _log_files(root) as (current, rotated):
        continued = mark is not None and mark.ino in (current[1], rotated[1])
        ranges = _past(mark, current, rotated)
        oldest = None
        end = ranges[-1][1]  # (the current file's: with nothing new in it, the mark stays)
        for fd, end_of_line, event in _log_lines(ranges):
            if fd == current[0]:
                end = end_of_line
            if event is None:
                continue
            oldest = oldest or event.ts
            if event.action == "message" and event.agent and event.message_id:
                announced.setdefault(event.agent, Counter())[event.message_id] += 1
        if continued and marks.checked_at:
            horizon = to_iso(parse_iso(marks.checked_at) - timedelta(seconds=SLACK))  # an inbox new since the last check
        else:
            horizon = oldest or _NOTHING  # older lines' events may have been rotated away: not judged
        return announced, horizon, Mark(current[1], end) if current[0] >= 0 else None


@contextmanager
def _log_files(root: Dir) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """The event log's current and rotated files, open for reading: (descriptor, inode)
    each, -1 for a missing one."""
    current = root.open_reading(layout.EVENTS)
    rotated = root.open_reading(layout.EVENTS_ROTATED)
    try:
        yield current, rotated
    finally:
        for fd, _ in (current, rotated):
            if fd >= 0:
                os.close(fd)


def _log_lines(ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int, _LogLine | None]]:
    """Each complete line of the log from the (descriptor, offset) ranges on: its file, the
    offset after it, and the line (None when it cannot be read)."""
    for fd, start in ranges:
        if fd < 0:
            continue
        for end, line in complete_lines(fd, start):
            try:
                event = _line_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                event = None
            yield fd, end, event


def _past(mark: Mark | None, current: tuple[int, int], rotated: tuple[int, int]) -> list[tuple[int, int]]:
    """Where the log continues past `mark`: (descriptor, offset) in the order written. A
    mark on neither file (none yet, or rotated twice since) means both files whole."""
    if mark is not None and mark.ino == current[1]:
        return [(current[0], mark.offset)]
    if mark is not None and mark.ino == rotated[1]:
        return [(rotated[0], mark.offset), (current[0], 0)]
    return [(rotated[0], 0), (current[0], 0)]


def _without_later_events(root: Dir, mark: Mark | None, agent: str, missing: list[Message]) -> list[Message]:
    """Of `missing`, the messages whose event is not in the log past `mark` either. Called
    holding the agent's inbox lock: every line then in its inbox has its event written."""
    later: Counter[str] = Counter()
    with _log_files(root) as (current, rotated):
        for _, _, event in _log_lines(_past(mark, current, rotated)):
            if event is not None and event.action == "message" and event.agent == agent and event.message_id:
                later[event.message_id] += 1
    return _without_events(missing, later)


def _without_events(messages: Iterable[Message], events: Counter[str]) -> list[Message]:
    """The messages that no event in `events` (message id -> count) announces; each event
    accounts for one line, and is used up by it."""
    left = []
    for message in messages:
        if events[message.id] > 0:
            events[message.id] -= 1
        else:
            left.append(message)
    return left


def _unannounced(agent: Dir, mark: Mark | None, horizon: str, announced: Counter[str]) -> tuple[list[Message], Mark]:
    """Under the inbox lock: the lines past `mark` (without a valid one, back to `horizon`)
    that have no event among `announced`, oldest first, and the inbox's new mark."""
    # (corrupt lines are reported by reads, not here)
    current, current_ino = agent.open_reading(layout.INBOX)
    rotated, rotated_ino = agent.open_reading(layout.INBOX_ROTATED)
    try:
        def forward(fd: int, start: int) -> Iterator[Message]:
            if fd >= 0:
                yield from (m for _, m in messages_forward(fd, start))

        def newest_first(fd: int) -> Iterator[Message]:
            if fd >= 0:
                yield from (m for _, m in messages_backward(fd))

        lines: Iterator[Message]
        if mark is not None and mark.ino == current_ino:
            lines = forward(current, mark.offset)
        elif mark is not None and mark.ino == rotated_ino:
            lines = _chain(forward(rotated, mark.offset), forward(current, 0))
        else:
            lines = _until(_chain(newest_first(current), newest_first(rotated)), horizon)
        missing = _without_events(lines, announced)
        missing.sort(key=lambda m: m.ts)
        return missing, Mark(current_ino, complete_end(current) if current >= 0 else 0)
    finally:
        for fd in (current, rotated):
            if fd >= 0:
                os.close(fd)


def _chain(*parts: Iterator[Message]) -> Iterator[Message]:
    for part in parts:
        yield from part


def _until(newest_first: Iterator[Message], horizon: str) -> Iterator[Message]:
    for message in newest_first:
        if message.ts < horizon:
            return
        yield message
