"""Reading inboxes: the `read` and `unread` operations, and the scans the delivery wing uses.

A reader opens the inbox files together with the cursor (`relayd.inbox.cursor.snapshot`),
reads without the lock, and moves the cursor forward under it. A torn tail is not a line
yet; a corrupt line is skipped and reported. What the delivery wing adds to a read (a read
receipt when the cursor moved, the ack states of shown messages) it gets through
`relayd.inbox.hooks`, filled by the wing, which this module loads for that.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterator

import msgspec

import relayd.delivery  # noqa: F401  (fills relayd.inbox.hooks: read receipts, ack states)

from .. import layout
from ..errors import UsageError
from ..fsio import blocks_forward, complete_lines, lines_backward, regions_holding
from ..records import MAX_RESULT, Message, check_agent_name, first_line_ts, json_encoder, message_decoder
from ..registry import operation
from ..store import Store
from ..timefmt import parse_iso, parse_since
from . import hooks
from .cursor import Position, Snapshot, snapshot, unread_ranges
from .cursor import advance as advance_cursor


class CorruptLine(msgspec.Struct, kw_only=True):
    file: str
    offset: int




def messages_forward(fd: int, start: int, rotated: bool = False, bad: list[CorruptLine] | None = None, name: str = layout.INBOX) -> Iterator[tuple[Position, Message]]:
    """The messages of an inbox file from `start` (a line start), each with where its line
    ends; a torn tail is not a line yet, a corrupt line is reported in `bad` (as `name`)."""
    line_start = start
    for end, line in complete_lines(fd, start):
        if line:
            try:
                message = message_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                if bad is not None:
                    bad.append(CorruptLine(file=name, offset=line_start))
            else:
                yield Position(rotated, end), message
        line_start = end


def messages_backward(fd: int, rotated: bool = False, bad: list[CorruptLine] | None = None, name: str = layout.INBOX) -> Iterator[tuple[Position, Message]]:
    """The messages of an inbox file from the last complete line back to the first."""
    for end, line in lines_backward(fd):
        try:
            message = message_decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            if bad is not None:
                bad.append(CorruptLine(file=name, offset=end - len(line) - 1))
        else:
            yield Position(rotated, end), message




def _unread(snap: Snapshot, bad: list[CorruptLine]) -> Iterator[tuple[Position, Message]]:
    for fd, start, rotated in unread_ranges(snap):
        yield from messages_forward(fd, start, rotated, bad, layout.INBOX_ROTATED if rotated else layout.INBOX)


def _newest_first(snap: Snapshot, bad: list[CorruptLine]) -> Iterator[tuple[Position, Message]]:
    if snap.current >= 0:
        yield from messages_backward(snap.current, False, bad, layout.INBOX)
    if snap.rotated >= 0:
        yield from messages_backward(snap.rotated, True, bad, layout.INBOX_ROTATED)


def _count_unread(snap: Snapshot) -> int:
    """Messages past the cursor: complete lines that readers would deliver.

    Counting newlines alone would count a corrupt line, which readers skip (the count
    then exceeds what `read --unread` can show). Lines that look like JSON objects are
    counted by byte search; a chunk holding any other line is decoded line by line.
    """
    count = 0
    for fd, offset, _ in unread_ranges(snap):
        for _, block in blocks_forward(fd, offset):
            count += _messages_in(block)
    return count


def _messages_in(lines: bytes) -> int:
    """How many of these complete lines are messages. When every line is shaped like one
    JSON object (the usual case) they all count, found by byte search without decoding;
    otherwise each line is decoded, as a reader would."""
    total = lines.count(b"\n")
    starts = lines.startswith(b"{") + lines.count(b"\n{")  # every line ends in a newline
    if starts == total and lines.count(b"}\n") == total:
        return total  # every line is shaped like one object: the usual case, no decoding
    good = 0
    for line in lines.split(b"\n")[:-1]:
        if line:
            try:
                message_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            good += 1
    return good


def has_unread(store: Store, name: str) -> bool:
    """Whether any complete message lies past the agent's cursor; unlike counting, it
    stops at the first one (relayd asks this of some agents every few seconds)."""
    with store.agent_dir(name) as agent:
        snap = snapshot(agent)
        try:
            return any(next(blocks_forward(fd, offset), None) is not None for fd, offset, _ in unread_ranges(snap))
        finally:
            snap.close()




class ReadParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    from_: str | None = msgspec.field(default=None, name="from")
    thread: str | None = None
    since: str | None = None  # a duration back from now ("1h") or a date/time
    unread: bool = False
    last: int | None = 20  # None or 0: no limit
    mark_read: bool = False
    max_bytes: int | None = None  # stop before the messages pass this size (at most MAX_RESULT)


class ReadResult(msgspec.Struct, kw_only=True):
    messages: list[Message]
    unread: int  # unread messages left after this read
    corrupt: list[CorruptLine] = msgspec.field(default_factory=list)
    # For shown messages sent with ack: "owed", "acked" or "dead_letter" by id.
    delivery: dict[str, str] = msgspec.field(default_factory=dict)


def _matcher(p: ReadParams):
    since: datetime | None = parse_since(p.since) if p.since else None
    if p.from_ is not None:
        check_agent_name(p.from_, "sender")

    def matches(message: Message) -> bool:
        if p.from_ is not None and message.from_ != p.from_:
            return False
        if p.thread is not None and message.thread != p.thread:
            return False
        if since is not None:
            try:
                return parse_iso(message.ts) >= since
            except UsageError:
                return False
        return True

    return matches, since


@operation("read", ReadParams)
def read(store: Store, p: ReadParams) -> ReadResult:
    """Read the agent's inbox: the last N messages, or (unread) the oldest N unread.

    With mark_read, the cursor moves past the messages shown, but never past an unread
    message that a filter, the limit or the size budget held back, so nothing is marked
    read unseen.
    """
    if p.last is not None and p.last < 0:
        raise UsageError("--last must be 0 (no limit) or more")
    limit = p.last or None
    if p.max_bytes is not None and p.max_bytes <= 0:
        raise UsageError("max_bytes must be positive")
    budget = min(p.max_bytes or MAX_RESULT, MAX_RESULT)
    used = 0

    def fits(message: Message) -> bool:
        """Room for this message in the answer? The first one always goes."""
        nonlocal used
        size = len(json_encoder.encode(message)) + 2
        if used and used + size > budget:
            return False
        used += size
        return True

    matches, since = _matcher(p)
    since_utc = since.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") if since is not None else ""
    bad: list[CorruptLine] = []
    with store.agent_dir(p.agent) as agent:
        if not agent.exists(layout.META):
            raise store.unknown_agent(p.agent)
        snap = snapshot(agent)
        try:
            advance: Position | None = None
            passed: Message | None = None  # the message at `advance`
            if p.unread:
                shown: list[Message] = []
                contiguous = True
                for pos, message in _unread(snap, bad):
                    if (limit is None or len(shown) < limit) and matches(message):
                        if not fits(message):
                            break  # the answer is full: the rest stays unread
                        shown.append(message)
                        if contiguous:
                            advance, passed = pos, message
                    else:
                        contiguous = False
                        if limit is not None and len(shown) >= limit:
                            break
            else:
                newest: list[Message] = []
                for _, message in _newest_first(snap, bad):
                    if since is not None and message.ts < since_utc:
                        break  # older from here on (appends are in time order)
                    if matches(message):
                        if not fits(message):
                            break
                        newest.append(message)
                        if limit is not None and len(newest) >= limit:
                            break
                shown = newest[::-1]
                if p.mark_read and shown:
                    ids = {m.id for m in shown}
                    for pos, message in _unread(snap, bad):
                        if message.id not in ids:
                            break
                        advance, passed = pos, message
            if p.mark_read:
                if advance is not None and passed is not None and advance_cursor(store, agent, snap, advance):
                    hooks.read_passed(store, p.agent, passed)
                agent.unlink(layout.PENDING, missing_ok=True)
                snap.close()
                snap = snapshot(agent)
            left = _count_unread(snap)
        finally:
            snap.close()
    unique_bad = {(b.file, b.offset): b for b in bad}
    owing = [m.id for m in shown if m.ack]
    states = hooks.delivery_states(store, p.agent, owing) if owing else {}
    return ReadResult(messages=shown, unread=left, corrupt=list(unique_bad.values()), delivery=states)


def read_all(store: Store, agent_name: str) -> ReadResult:
    """Every message in the agent's inbox files, oldest first, read in-process.

    Not an operation: an answer on the wire stays under one line (`MAX_RESULT`), so `read`
    pages; in-process tools that want the whole inbox at once (tests, benchmarks, export)
    use this, which reads with the same code and moves no cursor.
    """
    bad: list[CorruptLine] = []
    with store.agent_dir(agent_name) as agent:
        if not agent.exists(layout.META):
            raise store.unknown_agent(agent_name)
        snap = snapshot(agent)
        try:
            messages = [m for _, m in messages_forward(snap.rotated, 0, True, bad, layout.INBOX_ROTATED)] if snap.rotated >= 0 else []
            if snap.current >= 0:
                messages += [m for _, m in messages_forward(snap.current, 0, False, bad, layout.INBOX)]
            left = _count_unread(snap)
        finally:
            snap.close()
    return ReadResult(messages=messages, unread=left, corrupt=bad)


def holds_since(store: Store, agent_name: str, message_id: str, since: str) -> bool:
    """Whether the agent's inbox got a message with this id at or after `since` (ISO time).

    Reads backwards and stops at the first older message (appends are in time order), so
    it costs what arrived since, not the whole inbox.
    """
    bad: list[CorruptLine] = []
    with store.agent_dir(agent_name) as agent:
        snap = snapshot(agent)
        try:
            for _, message in _newest_first(snap, bad):
                if message.id == message_id:
                    return True
                if message.ts < since:
                    return False
            return False
        finally:
            snap.close()


def stored_since(store: Store, agent_name: str, since: str) -> list[Message]:
    """The agent's messages stored at or after `since` (ISO time), newest first; like
    `holds_since`, it reads back only that far."""
    found: list[Message] = []
    with store.agent_dir(agent_name) as agent:
        snap = snapshot(agent)
        try:
            for _, message in _newest_first(snap, []):
                if message.ts < since:
                    break
                found.append(message)
        finally:
            snap.close()
    return found


class Copies(msgspec.Struct, kw_only=True):
    """The copies of one message id in an inbox (a --ack message gets one per delivery)."""

    newest_first: list[Message]
    read: bool  # the agent's read cursor has passed the newest copy


_SCAN_REGION = 1 << 20  # copies are looked for by byte search: up to large regions, few reads


def find_copies(store: Store, agent_name: str, message_id: str, since: str) -> Copies | None:
    """The copies of `message_id` in the agent's inbox files, looking back to `since` (ISO
    time); None when it holds none. Reads newest first, decodes only lines holding the id,
    and stops at the first delivery (attempt 1, or a message without --ack, which an inbox
    holds once): it costs about a byte search of what arrived after the message."""
    copies: list[tuple[Position, Message]] = []
    with store.agent_dir(agent_name) as agent:
        snap = snapshot(agent)
        try:
            finished = False
            for fd, rotated in ((snap.current, False), (snap.rotated, True)):
                if fd < 0 or finished:
                    continue
                for region, hits in regions_holding(fd, message_id.encode(), most=_SCAN_REGION):
                    for end, line in hits:
                        try:
                            message = message_decoder.decode(line)
                        except (msgspec.DecodeError, msgspec.ValidationError):
                            continue
                        if message.id == message_id:
                            copies.append((Position(rotated, end), message))
                            if message.attempt in (None, 1):
                                finished = True
                                break
                    if finished or first_line_ts(region) < since:
                        finished = True
                        break
        finally:
            snap.close()
    if not copies:
        return None
    return Copies(newest_first=[m for _, m in copies], read=copies[0][0].key() <= (0 if snap.cursor.rotated else 1, snap.cursor.offset))


class UnreadParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str


class UnreadResult(msgspec.Struct, kw_only=True):
    agent: str
    unread: int
    pending: bool  # a notification was sent and the inbox not read since


@operation("unread", UnreadParams, mutates=False)
def unread(store: Store, p: UnreadParams) -> UnreadResult:
    """How many unread messages wait for the agent (cheap: counts lines past the cursor)."""
    with store.agent_dir(p.agent) as agent:
        if not agent.exists(layout.META):
            raise store.unknown_agent(p.agent)
        snap = snapshot(agent)
        try:
            count = _count_unread(snap)
        finally:
            snap.close()
        pending = agent.exists(layout.PENDING)
    return UnreadResult(agent=p.agent, unread=count, pending=pending)
