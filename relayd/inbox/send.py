"""Sending: the `send` operation, from a request to the messages `deliver` appends.

A send is checked whole before anything is written (names, sizes, recipients, the ack
terms), then `send_many` plans the appends of many sends that arrive together: each inbox
locked once, a repeated message id (relayd.dedup) answered with the copy already there, a
failed request taken back alone. The appends and their arrivals are written through
`relayd.inbox.append.Appends.commit`, the same step `deliver` ends with. A send with
`ack` stores what it owes in its inbox line (`relayd.owing`).
"""

from __future__ import annotations

import time
from typing import Callable

import msgspec

import relayd.delivery  # noqa: F401  (fills relayd.inbox.hooks: the hand-over an inbox rotation needs)

from .. import layout
from ..agents import presence
from ..dedup import check_id, find_recent, not_before_iso
from ..errors import RelayError, UnknownAgent, UsageError
from ..fsio import Dir
from ..records import MAX_RESULT, SUBJECT_DEFAULT_CHARS, Message, check_agent_name, json_encoder, meta_decoder, normalize_priority
from ..registry import operation
from ..store import Store
from ..timefmt import now_iso, parse_iso
from ..ulid import new_ulid
from .append import Appends, arrival, check_inbox, is_remote

MAX_BODY = 256 * 1024
MAX_SUBJECT = 1024
MAX_TAGS = 32



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
    ack: bool = False  # owed until acknowledged, redelivered until then (relayd.delivery.sweep)
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
        # deferred imports in this module keep `relayctl send` (relayd down) from loading
        # what only some sends need: the bridge's view of other hosts, --ack, chosen ids
        from .. import remote  # agents of other hosts (relayd --bridge): loaded when a send may concern them

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
            from .. import remote  # (as above)

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
    if store.remote is not None and not is_agent(sender) and any(is_remote(store, r) for r in recipients):
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
    policies: list[owing.Policy | None] = []
    # The sends of a batch run at one moment (relayd's loop thread, between two reads of
    # the socket): each name is looked up once, not twice for every send of a busy pair.
    is_agent = _memo(store.is_agent)
    is_known_agent = _memo(store.is_known_agent)
    for p in requests:
        policy = None
        try:
            messages = build_messages(store, p, is_agent)
            if p.ack:
                from .. import owing  # (start-up: only a send --ack needs it)

                policy = owing.policy_for(store, p.ack_wait, p.max_deliver)
            if len(messages) > 1:
                # All or nothing as far as we can tell beforehand: not half a broadcast, then an error.
                for message in messages:
                    check_inbox(store, message.to)
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
    remote_inboxes = sorted(r for r in by_inbox if is_remote(store, r))  # the bridge's outbox, not a file here
    local_inboxes = sorted(r for r in by_inbox if r not in remote_inboxes)
    enqueued: set[tuple[int, str]] = set()  # an outbox append cannot be taken back: never made twice
    with Appends(store) as appends:
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
                    # record (relayd.owing), durable with the append itself, gone if it is taken back.
                    appends.append(recipient, [m if policies[i] is None else owing.owed_line(store, m, policies[i]) for i, m in items])  # type: ignore[arg-type]
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
            appends.commit(events)  # under every inbox's lock, as `deliver` does
        except RelayError as exc:
            # An error must be true: the messages are taken back (and what they owed) with their events missing.
            for index in done:
                outcomes[index] = exc
            return outcomes  # type: ignore[return-value]  (no None is left)
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




def _memo(look_up: Callable[[str], bool]) -> Callable[[str], bool]:
    """`look_up`, asked once a name. (functools.cache builds a wrapper the way a decorator
    does, twice a batch: a lone send paid more for that than for the lookups it saved.)"""
    known: dict[str, bool] = {}

    def once(name: str) -> bool:
        found = known.get(name)
        if found is None:
            found = known[name] = look_up(name)
        return found

    return once


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
    from ..config import dedup_window  # (start-up: only a send with a chosen id needs config.json)

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


