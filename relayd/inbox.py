"""Messages: send and broadcast (appends to inboxes), read with a cursor, rotation.

An inbox is `agents/<name>/inbox.jsonl`, one message per line, appended under an
exclusive flock on `inbox.lock`. The cursor is a byte offset at a line boundary. When an
inbox passes the rotation size it becomes `inbox.jsonl.1` and the cursor is moved along
with it, under the same lock, so unread mail stays unread. Only one rotated file is kept:
the previous `.1` is deleted when it was read to the end, and moved to `dead_letter/` when
it still held unread mail.
"""

from __future__ import annotations

import functools
import os
import time
from datetime import datetime, timezone
from typing import Callable, Iterator

import msgspec

from . import layout, presence
from .errors import RelayError, StoreError, UnknownAgent, UsageError
from .dedup import check_id, find_recent, not_before_iso
from .fsio import Dir, append_lines, blocks_forward, complete_lines, line_start_at, lines_backward, open_appending, regions_holding
from .registry import operation
from .records import (
    SUBJECT_DEFAULT_CHARS,
    Cursor,
    Event,
    Message,
    check_agent_name,
    cursor_decoder,
    first_line_ts,
    json_encoder,
    message_decoder,
    meta_decoder,
    normalize_priority,
)
from .store import Store
from .timefmt import now_iso, parse_iso
from .ulid import new_ulid

MAX_BODY = 256 * 1024
# What one answer may carry: a send's stored messages, a read's messages. It stays under the
# wire protocol's 1 MiB line with room for the envelope, so an answer through relayd never
# fails after the operation took effect.
MAX_RESULT = 768 * 1024
MAX_SUBJECT = 1024
MAX_TAGS = 32


# -- sending ---------------------------------------------------------------------------


class SendParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # the sender
    body: str
    to: list[str] = msgspec.field(default_factory=list)
    broadcast: bool = False
    subject: str | None = None
    thread: str | None = None
    priority: str | None = None
    tags: list[str] = msgspec.field(default_factory=list)
    type: str | None = None
    ack: bool = False  # owed until acknowledged, redelivered until then (relayd.delivery)
    ack_wait: str | None = None  # with ack: the redelivery backoff base [config.json, 5s]
    max_deliver: int | None = None  # with ack: redeliveries before dead_letter/ [config.json, 3]
    # Chosen by the client before its first attempt and repeated on a retry: a recipient
    # whose inbox already holds this id (within the dedup window) is not sent a second copy.
    id: str | None = None


class SendResult(msgspec.Struct, kw_only=True):
    messages: list[Message]
    notifications: list[dict] = msgspec.field(default_factory=list)
    # Recipients that already had this message (a repeated id): `messages` holds the
    # original copy for them, and nothing was appended.
    duplicates: list[str] = msgspec.field(default_factory=list)
    # False: the sender names no agent of the team (a typo in --agent?); sent all the same,
    # as a script may speak for a name nobody registered, but its front end warns.
    agent_registered: bool = True


def default_subject(body: str) -> str:
    """The body with whitespace collapsed, up to 80 characters; a longer one ends at a word
    boundary (unless the last word is very long) with "…", so a list shows it is cut."""
    text = " ".join(body.split())
    if len(text) <= SUBJECT_DEFAULT_CHARS:
        return text
    cut = text[: SUBJECT_DEFAULT_CHARS - 1]
    if text[len(cut)] != " ":  # mid-word: end before that word
        space = cut.rfind(" ")
        if space >= SUBJECT_DEFAULT_CHARS // 2:
            cut = cut[:space]
    return cut.rstrip() + "…"


def _closed_web_view(store: Store, name: str) -> bool:
    """A web view's identity while no `relayctl web` runs for it (it archives the identity
    when it stops): a broadcast then would wait for a page nobody may open again."""
    with store.agent_dir(name) as agent:
        if not presence.archived(agent):
            return False
        raw = agent.read_bytes(layout.META)
    try:
        return raw is not None and meta_decoder.decode(raw).program == presence.WEB_VIEW
    except msgspec.DecodeError:
        return False


def _recipients(store: Store, p: SendParams, sender: str, is_agent: Callable[[str], bool]) -> list[str]:
    if p.broadcast:
        from . import remote  # agents of other hosts (relayd --bridge): loaded when a send may concern them

        if p.to:
            raise UsageError("give recipients or --broadcast, not both")
        others = [name for name in store.known_agents() if name != sender and not _closed_web_view(store, name)] + remote.broadcast_targets(store, sender, p.ack)
        if not others:
            raise UnknownAgent("nothing to broadcast to: no other agents are registered", known=[])
        return others
    if not p.to:
        raise UsageError("no recipient: give an agent name or --broadcast")
    seen: list[str] = []
    for name in p.to:
        check_agent_name(name, "recipient")
        if not is_agent(name):
            from . import remote

            if remote.recipient_host(store, name, p.ack) is None:
                raise store.unknown_agent(name)
        if name not in seen:
            seen.append(name)
    return seen


def build_messages(store: Store, p: SendParams, is_agent: Callable[[str], bool] | None = None) -> list[Message]:
    """Validate a send request into the messages to append; writes nothing. `is_agent`:
    `store.is_agent`, or a batch's memo of it (see send_many)."""
    is_agent = is_agent or store.is_agent
    sender = check_agent_name(p.agent, "sender")
    if not p.ack and (p.ack_wait is not None or p.max_deliver is not None):
        raise UsageError("--ack-wait and --max-deliver go with --ack")
    priority = normalize_priority(p.priority)
    if not p.body.strip() and not (p.subject or "").strip():
        raise UsageError("empty message: give a body or a subject")
    subject = p.subject if p.subject is not None else default_subject(p.body)
    check_content(p.body, subject, p.tags, p.thread)
    chosen = check_id(p.id) if p.id is not None else None
    recipients = _recipients(store, p, sender, is_agent)
    if store.remote is not None and not is_agent(sender) and any(_is_remote(store, r) for r in recipients):
        # The receiving host stores mail only from a name the directory gives to this host.
        raise UsageError(f"{sender} is not an agent of this host, and mail to other hosts must come from one: relayctl register {sender}")
    stamp = now_iso()
    messages = [
        Message(
            id=chosen or new_ulid(),  # a broadcast's copies share a chosen id: unique per inbox
            ts=stamp,
            from_=sender,
            to=recipient,
            subject=subject,
            body=p.body,
            thread=p.thread,
            priority=priority,  # type: ignore[arg-type]
            tags=list(p.tags),
            type=p.type,
            ack=p.ack,
            attempt=1 if p.ack else None,
        )
        for recipient in recipients
    ]
    size = len(json_encoder.encode(messages[0])) + 1
    if size * len(messages) > MAX_RESULT:
        copies = f"{len(messages)} copies of this {size}-byte message" if len(messages) > 1 else f"this message, {size} bytes stored,"
        raise UsageError(f"{copies} would be more than one send may carry ({MAX_RESULT} bytes); send a shorter text, or write it to a file and send the path")
    return messages


def check_content(body: str, subject: str, tags: list[str], thread: str | None) -> None:
    """The limits every message keeps, sent here or received from another host."""
    if len(body.encode()) > MAX_BODY:
        raise UsageError(f"message body is too large ({len(body.encode())} bytes, at most {MAX_BODY})")
    if len(subject) > MAX_SUBJECT:
        raise UsageError(f"subject is too long ({len(subject)} characters, at most {MAX_SUBJECT})")
    if len(tags) > MAX_TAGS or any(not tag or len(tag) > 128 for tag in tags):
        raise UsageError(f"tags: at most {MAX_TAGS}, each 1-128 characters")
    if thread is not None and (not thread or len(thread) > 256):
        raise UsageError("thread: 1-256 characters")


def check_message(m: Message) -> None:
    """A whole message, as a local send would have made it (mail from another host is
    stored only if it passes): names, id, time, priority, sizes, tags."""
    check_agent_name(m.from_, "sender")
    check_agent_name(m.to, "recipient")
    check_id(m.id)
    if m.id != m.id.upper():
        raise UsageError(f"id {m.id!r} is not in upper case, as relay writes ids")
    parse_iso(m.ts)
    normalize_priority(m.priority)
    if not m.body.strip() and not m.subject.strip():
        raise UsageError("empty message: no body and no subject")
    check_content(m.body, m.subject, m.tags, m.thread)
    if m.ack or m.attempt is not None:
        raise UsageError("--ack works within one host: a message from another host cannot be owed")


def append_messages(store: Store, recipient: str, messages: list[Message]) -> None:
    """Append messages to one inbox in a single write, rotating first when it is full.

    Mail for an agent on another host goes to the bridge's outbox instead (`relayd.remote`)."""
    if _is_remote(store, recipient):
        return store.remote.enqueue(store, recipient, messages)
    with _Appends(store) as appends:
        appends.lock(recipient)
        appends.append(recipient, messages)
        appends.keep()


class _Appends:
    """Inbox appends that can still be taken back: each inbox stays locked, with the
    offset where this operation's lines begin, until `keep()` or the end of the `with`
    (which truncates them away unless kept). Locks are taken in name order, so two
    processes sending to the same inboxes cannot deadlock."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dirs: dict[str, Dir] = {}
        self.locks: dict[str, object] = {}
        self.written: dict[str, tuple[int, int]] = {}  # recipient -> (fd, start offset)
        self.kept = False

    def __enter__(self) -> "_Appends":
        return self

    def lock(self, recipient: str) -> Dir:
        agent = self.store.agent_dir(recipient)
        self.dirs[recipient] = agent
        held = agent.locked(layout.INBOX_LOCK)
        held.__enter__()
        self.locks[recipient] = held
        return agent

    def append(self, recipient: str, messages: list[Message]) -> None:
        payload = b"".join(json_encoder.encode(m) + b"\n" for m in messages)
        agent = self.dirs[recipient]
        store = self.store
        fd = open_appending(agent, layout.INBOX, len(payload), store.sync, store.rotate_bytes, lambda size: _rotate(store, agent, size))
        try:
            start = append_lines(fd, payload, os.path.join(agent.path, layout.INBOX))
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

    def keep(self) -> None:
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
    from . import owed  # (here: rotations are rare, and most commands never load it)

    owed.hand_over(store, agent, os.path.basename(agent.path))  # the `.1` dropped now may owe records no sweep took yet
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


def _is_remote(store: Store, recipient: str) -> bool:
    return store.remote is not None and store.remote.host_of(recipient) is not None


def _check_inbox(store: Store, recipient: str) -> None:
    """Refuse an inbox whose files are not plain files (a planted symlink) before writing."""
    if store.remote is not None and store.remote.host_of(recipient) is not None:
        return  # mail for another host goes to the outbox
    with store.agent_dir(recipient) as agent:
        agent.refuse_non_regular(layout.INBOX, layout.INBOX_LOCK)


def send_many(store: Store, requests: list[SendParams]) -> list[SendResult | RelayError]:
    """Several sends done as one: each inbox gets one append, the event log one write.

    The outcome of each request is what `send` alone would have given, in order: its
    messages are appended in request order, and a request that fails (bad input, an
    append refused, the event log refused) has nothing appended anywhere and no events:
    the inboxes stay locked until the events are written, and are cut back otherwise.
    A request repeating a message id that a recipient already holds (relayd.dedup) gets
    the original copy for that recipient instead of a new one.
    The daemon passes the sends that arrive together; `send` is the batch of one.
    """
    outcomes: list[SendResult | RelayError | None] = []
    planned: list[list[Message]] = []
    policies: list[owed.Policy | None] = []
    # The sends of a batch run at one moment (relayd's loop thread, between two reads of
    # the socket): each name is looked up once, not twice for every send of a busy pair.
    is_agent = functools.cache(store.is_agent)
    is_known_agent = functools.cache(store.is_known_agent)
    for p in requests:
        policy = None
        try:
            messages = build_messages(store, p, is_agent)
            if p.ack:
                from . import owed  # (here: only a send --ack needs it)

                policy = owed.policy_for(store, p.ack_wait, p.max_deliver)
            if len(messages) > 1:
                # All or nothing as far as we can tell beforehand: not half a broadcast, then an error.
                for message in messages:
                    _check_inbox(store, message.to)
        except RelayError as exc:
            outcomes.append(exc)
            planned.append([])
        else:
            outcomes.append(None)
            planned.append(messages)
        policies.append(policy)
    by_inbox: dict[str, list[tuple[int, Message]]] = {}
    for index, messages in enumerate(planned):
        for message in messages:
            by_inbox.setdefault(message.to, []).append((index, message))
    originals: dict[tuple[int, str], Message] = {}  # (request, recipient) -> the copy already there
    same_batch: dict[int, int] = {}  # request -> an earlier request of this batch with its id
    chosen = {index for index, p in enumerate(requests) if p.id is not None and outcomes[index] is None}
    remote_inboxes = sorted(r for r in by_inbox if _is_remote(store, r))  # the bridge's outbox, not a file here
    local_inboxes = sorted(r for r in by_inbox if r not in remote_inboxes)
    enqueued: set[tuple[int, str]] = set()  # an outbox append cannot be taken back: never made twice
    with _Appends(store) as appends:
        for recipient in local_inboxes:
            try:
                agent = appends.lock(recipient)
                if chosen:
                    _find_originals(store, agent, recipient, by_inbox[recipient], chosen, originals, same_batch)
            except RelayError as exc:
                for index, _ in by_inbox[recipient]:
                    outcomes[index] = exc
        while True:
            for index, first in same_batch.items():
                if outcomes[first] is not None and outcomes[index] is None:
                    outcomes[index] = outcomes[first]  # its "original" was never written
            failed_now = False
            for recipient in local_inboxes:
                items = [(i, m) for i, m in by_inbox[recipient] if outcomes[i] is None and (i, recipient) not in originals]
                if not items:
                    continue  # every request with mail for this inbox has failed, or it had it already
                try:
                    # A message sent with ack is stored with its terms: that line is its owed
                    # record (relayd.owed), durable with the append itself, gone if it is taken back.
                    appends.append(recipient, [m if policies[i] is None else owed.owing(store, m, policies[i]) for i, m in items])  # type: ignore[arg-type]
                except RelayError as exc:
                    failed_now = True
                    for index, _ in items:
                        outcomes[index] = exc
            for recipient in [] if failed_now else remote_inboxes:
                items = [(i, m) for i, m in by_inbox[recipient] if outcomes[i] is None and (i, recipient) not in enqueued]
                if not items:
                    continue
                try:
                    store.remote.enqueue(store, recipient, [message for _, message in items])
                except RelayError as exc:
                    failed_now = True
                    for index, _ in items:
                        outcomes[index] = exc
                else:
                    enqueued.update((index, recipient) for index, _ in items)
            if not failed_now or not appends.written:
                break
            # A failed request may have copies in inboxes appended to before the failure:
            # take every append back (and with it what it owed) and write again for the requests still standing.
            appends.take_back()
        for index, first in same_batch.items():
            if outcomes[first] is not None and outcomes[index] is None:
                outcomes[index] = outcomes[first]
        done = [index for index, outcome in enumerate(outcomes) if outcome is None]
        fresh = [(index, m) for index in done for m in planned[index] if (index, m.to) not in originals]
        events = [arrival(store, m) for _, m in fresh]
        try:
            store.emit(*events)
        except RelayError as exc:
            # An error must be true: the messages are taken back (and what they owed) with their events missing.
            for index in done:
                outcomes[index] = exc
            return outcomes  # type: ignore[return-value]  (no None is left)
        appends.keep()
    if store.recent_ids is not None and fresh:
        now_ms = time.time_ns() // 1_000_000
        store.recent_ids.wrote([event.id for event in events])
        for index, m in fresh:
            if index in chosen:  # ids relayd made itself are never sent twice
                store.recent_ids.add(m.to, m.id, now_ms)
    for index in done:
        messages = [originals.get((index, m.to), m) for m in planned[index]]
        outcomes[index] = SendResult(
            messages=messages,
            duplicates=[m.to for m in planned[index] if (index, m.to) in originals],
            agent_registered=is_known_agent(requests[index].agent),
        )
    return outcomes  # type: ignore[return-value]  (no None is left)


def arrival(store: Store, m: Message) -> Event:
    """The event that announces an appended line: it wakes followers and triggers notifications."""
    return store.event("inbox", action="message", agent=m.to, message_id=m.id, from_=m.from_, priority=m.priority, subject=m.subject[:120])


def _find_originals(
    store: Store,
    agent: Dir,
    recipient: str,
    items: list[tuple[int, Message]],
    chosen: set[int],
    originals: dict[tuple[int, str], Message],
    same_batch: dict[int, int],
) -> None:
    """Under the inbox lock: which requests with a chosen id does this inbox hold already?"""
    from .config import dedup_window

    window = dedup_window(store)
    now_ms = time.time_ns() // 1_000_000
    recent = store.recent_ids
    earlier: dict[str, tuple[int, Message]] = {}  # the same id twice in one batch: the first one counts
    for index, message in items:
        if index not in chosen:
            continue
        if message.id in earlier:
            first, copy = earlier[message.id]
            originals[(index, recipient)] = copy
            same_batch[index] = first
            continue
        found = None
        if recent is None or recent.may_hold(recipient, message.id, now_ms):
            found = find_recent(agent, message.id, not_before_iso(message.id, now_ms, window), store.sync)
        if found is not None:
            originals[(index, recipient)] = found
        earlier[message.id] = (index, found or message)


@operation("send", SendParams, batch=send_many)
def send(store: Store, p: SendParams) -> SendResult:
    """Append a message to each recipient's inbox (or every other agent's, with broadcast)."""
    [outcome] = send_many(store, [p])
    if isinstance(outcome, RelayError):
        raise outcome
    return outcome


# -- the cursor ------------------------------------------------------------------------


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


# -- reading ---------------------------------------------------------------------------


class Position(msgspec.Struct, frozen=True):
    """Where a line ends: in the rotated file (`rotated=True`) or the current one."""

    rotated: bool
    offset: int

    def key(self) -> tuple[int, int]:
        return (0 if self.rotated else 1, self.offset)


class CorruptLine(msgspec.Struct, kw_only=True):
    file: str
    offset: int


class _Snapshot(msgspec.Struct):
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


def _snapshot(agent: Dir) -> _Snapshot:
    with agent.locked(layout.INBOX_LOCK, shared=True):
        cursor = read_cursor(agent)
        current, current_ino = _open_fd(agent, layout.INBOX)
        rotated, rotated_ino = _open_fd(agent, layout.INBOX_ROTATED)
    return _Snapshot(cursor, current, rotated, current_ino, rotated_ino)


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


def _at_line_start(fd: int, offset: int) -> int:
    """Where unread lines begin for a cursor at `offset`: the start of the line it points
    into or after (a damaged cursor), or 0 when it points past the end (the file was
    replaced since the cursor was written: read it all)."""
    if offset > os.fstat(fd).st_size:
        return 0
    return line_start_at(fd, offset)


def _unread(snap: _Snapshot, bad: list[CorruptLine]) -> Iterator[tuple[Position, Message]]:
    for fd, start, rotated in _unread_ranges(snap):
        yield from messages_forward(fd, start, rotated, bad, layout.INBOX_ROTATED if rotated else layout.INBOX)


def _newest_first(snap: _Snapshot, bad: list[CorruptLine]) -> Iterator[tuple[Position, Message]]:
    if snap.current >= 0:
        yield from messages_backward(snap.current, False, bad, layout.INBOX)
    if snap.rotated >= 0:
        yield from messages_backward(snap.rotated, True, bad, layout.INBOX_ROTATED)


def _count_unread(snap: _Snapshot) -> int:
    """Messages past the cursor: complete lines that readers would deliver.

    Counting newlines alone would count a corrupt line, which readers skip (the count
    then exceeds what `read --unread` can show). Lines that look like JSON objects are
    counted by byte search; a chunk holding any other line is decoded line by line.
    """
    count = 0
    for fd, offset, _ in _unread_ranges(snap):
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
        snap = _snapshot(agent)
        try:
            return any(next(blocks_forward(fd, offset), None) is not None for fd, offset, _ in _unread_ranges(snap))
        finally:
            snap.close()


def _unread_ranges(snap: _Snapshot) -> list[tuple[int, int, bool]]:
    """(fd, offset where unread lines begin, whether it is the rotated file), oldest first."""
    cursor = snap.cursor
    ranges = []
    if cursor.rotated and snap.rotated >= 0:
        ranges.append((snap.rotated, _at_line_start(snap.rotated, cursor.offset), True))
    if snap.current >= 0:
        ranges.append((snap.current, 0 if cursor.rotated else _at_line_start(snap.current, cursor.offset), False))
    return ranges


def _advance_cursor(store: Store, agent: Dir, snap: _Snapshot, to: Position) -> bool:
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
    from .timefmt import parse_since

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
        snap = _snapshot(agent)
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
                if advance is not None and passed is not None and _advance_cursor(store, agent, snap, advance):
                    from .receipts import read_passed

                    read_passed(store, p.agent, passed)
                agent.unlink(layout.PENDING, missing_ok=True)
                snap.close()
                snap = _snapshot(agent)
            left = _count_unread(snap)
        finally:
            snap.close()
    unique_bad = {(b.file, b.offset): b for b in bad}
    owing = [m.id for m in shown if m.ack]
    delivery = {}
    if owing:
        from . import owed

        delivery = owed.states(store, p.agent, owing)
    return ReadResult(messages=shown, unread=left, corrupt=list(unique_bad.values()), delivery=delivery)


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
        snap = _snapshot(agent)
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
        snap = _snapshot(agent)
        try:
            for _, message in _newest_first(snap, bad):
                if message.id == message_id:
                    return True
                if message.ts < since:
                    return False
            return False
        finally:
            snap.close()


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
        snap = _snapshot(agent)
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
        snap = _snapshot(agent)
        try:
            count = _count_unread(snap)
        finally:
            snap.close()
        pending = agent.exists(layout.PENDING)
    return UnreadResult(agent=p.agent, unread=count, pending=pending)
