"""What happened to a message on its way to each recipient, for its sender (DESIGN §4).

Per recipient, four steps:
* stored: the line in the recipient's inbox (its time, how many deliveries);
* announced: the arrival mechanism that told the recipient (tmux, zellij, cmd, channel,
  hook, ...), when, and whether it worked -- from the delivery log below;
* read: the recipient's cursor has passed the line (`read --mark-read`, `check_inbox`, a hook),
  and when: each cursor advance logs a `read` line saying how far it got (`upto`, the time of
  the newest message it passed);
* acknowledged: for `send --ack`, the delivery record is in acked/ (or still owed, or a
  dead letter);
* held: neither read nor told for `delivery.held_after`: why, in words, and since when
  (relayd.delivery.held);
* the door's own receipts: where the recipient's program answers for a message relay wrote
  into it (Claude Code's inbox: held for the person's approval, delivered, denied,
  expired, refused, dropped), each status and its time (`door_receipt`, from
  relayd.arrival.claude_peer). Anything but "delivered" is told to the sender once, as a
  message from `relay`.

Announcements and read times need writing down: the other steps are read off the store
when asked. They go to the delivery log (`relayd.delivery.log`), read back from it and
its rotated predecessor, so a message's way shows as long as the rotated log reaches back
to it. relayd.arrival.notify reports its triggers' outcomes here (`announced`); the inbox's read
receipts reach the log through the hook the wing registers (relayd.inbox.hooks).

An announcement that fails comes back to the senders of the mail it was for, once, as a
message from `relay` (a bounce); the log remembers which messages were bounced.
"""

from __future__ import annotations

import os
from typing import Literal
from datetime import datetime, timedelta, timezone

import msgspec

from .. import layout
from ..agents.roster import arrival_mechanism, read_meta
from ..dedup import check_id, ms_to_iso
from ..errors import NotFound, RelayError
from ..inbox.append import deliver
from ..inbox.read import ReadParams, find_copies, read
from ..records import Message, check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import now, now_iso, to_iso
from ..ulid import new_ulid, ulid_time_ms
from . import owed, parked
from .held import Held, clear_held, held_record, held_since, landed, note_held, thresholds, waited
from .log import SYSTEM_SENDER, Receipt, newest_first, write
from .record import record_name

_CLOCK_SLACK_MS = 5 * 60 * 1000  # an id may be made a while before its message is stored


# -- recording announcements and bouncing failed ones -------------------------------------------


def announced(store: Store, outcomes: list[dict], started: dict[str, str] | None = None) -> None:
    """Record the outcomes of the triggers relayd.arrival.notify sent (it passes only those),
    each at the time its announcement began (`started`, by agent; now where not given); bounce
    the mail whose announcement failed. Never raises: a report must not fail the send it
    reports on."""
    try:
        now = now_iso()
        receipts = [
            Receipt(ts=(started or {}).get(o["agent"], now), step="announced", to=o["agent"], how=o.get("method"), ok=bool(o.get("ok", True)), error=o.get("error"), note=o.get("skipped") or o.get("note"))
            for o in outcomes
        ]
        write(store, receipts)
        for receipt in receipts:
            if not receipt.ok:
                _bounce(store, receipt)
    except (RelayError, OSError):
        pass


def _bounce(store: Store, failed: Receipt) -> None:
    """Tell the senders of the recipient's unread mail, once per message, that it was not announced."""
    unread = read(store, ReadParams(agent=failed.to, unread=True, last=0)).messages
    unread = [m for m in unread if m.from_ != SYSTEM_SENDER]
    if not unread:
        return
    oldest = min(m.ts for m in unread)
    done = {i for r in newest_first(store, oldest) if r.step == "bounced" for i in r.ids}
    by_sender: dict[str, list[Message]] = {}
    for m in unread:
        if m.id not in done:
            by_sender.setdefault(m.from_, []).append(m)
    for sender, messages in by_sender.items():
        if not store.is_agent(sender):
            continue
        ids = list(dict.fromkeys(m.id for m in messages))
        listed = "\n".join(f"  {m.id}  {m.subject}" for m in messages)
        bounce = Message(
            id=new_ulid(),
            ts=now_iso(),
            from_=SYSTEM_SENDER,
            to=sender,
            subject=f"not announced to {failed.to}: {len(ids)} message{'s' if len(ids) != 1 else ''}",
            body=(
                f"Your mail to {failed.to} is stored in its inbox, but telling {failed.to} failed "
                f"({failed.how}: {failed.error}). {failed.to} sees it when it next checks its inbox; "
                f"relay keeps retrying the announcement.\n{listed}\n'relayctl track ID' shows each message's way."
            ),
            priority="high",
            tags=["bounce"],
        )
        write(store, [Receipt(ts=bounce.ts, step="bounced", to=failed.to, how=failed.how, ok=False, error=failed.error, ids=ids)])
        deliver(store, {sender: [bounce]})


# -- a door's own receipts: Claude Code answering for the mail relay wrote into its inbox --------

DOOR_WORDS = {
    "held": "held for the person's approval",
    "delivered": "delivered to the model's queue",
    "denied": "denied by the person",
    "expired": "expired before it was let in",
    "refused": "refused by the session's settings",
    "dropped": "dropped by the session",
}


def door_receipt(store: Store, to: str, message_id: str, sender: str | None, how: str, status: str, detail: str | None = None) -> None:
    """Record the program's own receipt for one message relay wrote through `to`'s door,
    and tell its sender when the message is not simply in (held, denied, ...). Never
    raises: a report must not fail the door it reports on."""
    try:
        at = now_iso()
        write(store, [Receipt(ts=at, step="door", to=to, how=how, status=status, error=detail, ids=[message_id])])
        if status == "delivered" or not sender or sender == SYSTEM_SENDER or not store.is_agent(sender):
            return
        words = DOOR_WORDS.get(status, status)
        notice = Message(
            id=new_ulid(),
            ts=at,
            from_=SYSTEM_SENDER,
            to=sender,
            subject=f"{status} at {to}: {message_id}",
            body=(f"Your message {message_id} to {to} reached its Claude Code session, which answered: {words}"
                  f"{f' ({detail})' if detail else ''}. It stays in {to}'s relay inbox"
                  f"{' and reaches the model once the person lets it in' if status == 'held' else ''}; "
                  f"'relayctl track {message_id}' shows its way."),
            tags=["door"],
        )
        deliver(store, {sender: [notice]})
    except (RelayError, OSError):
        pass


# -- the announced op: relay-mcp's channel push and hooks report here ----------------------------


class AnnouncedParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # the recipient that was told
    how: Literal["channel", "hook", "wake", "bridge"]
    ok: bool = True
    error: str | None = None


class AnnouncedResult(msgspec.Struct, kw_only=True):
    recorded: bool


@operation("announced", AnnouncedParams)
def record_announced(store: Store, p: AnnouncedParams) -> AnnouncedResult:
    """Record that an agent was told of its mail (relay-mcp's channel push, a hook)."""
    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    write(store, [Receipt(ts=now_iso(), step="announced", to=p.agent, how=p.how, ok=p.ok, error=p.error)])
    with store.agent_dir(p.agent) as agent:  # why its mail waits, for track and status (relayd.delivery.held)
        if p.ok:
            clear_held(agent)
        elif p.error:
            note_held(agent, p.error, now_iso())
    return AnnouncedResult(recorded=True)


# -- track ----------------------------------------------------------------------------------------


class TrackParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str


class Announcement(msgspec.Struct, kw_only=True, omit_defaults=True):
    how: str | None
    at: str
    ok: bool
    error: str | None = None
    note: str | None = None


class DoorStatus(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One receipt of the recipient's program for the message (`door_receipt`)."""

    status: str  # held, delivered, denied, expired, refused, dropped
    at: str
    how: str | None = None  # the door: claude-inbox
    detail: str | None = None


class Way(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One recipient's steps."""

    to: str
    stored: str  # when the (first) copy was appended
    deliveries: int  # copies in the inbox (redeliveries of a --ack message add some)
    read: bool  # the recipient's read cursor has passed its (latest) copy
    read_at: str | None = None  # when it did (None for reads logged by no receipt, e.g. older versions)
    mechanism: str  # the recipient's arrival mechanism now (register --notify; channel when unset)
    announced: Announcement | None = None
    ack: Literal["owed", "acked", "dead_letter"] | None = None  # only for --ack messages
    acked_at: str | None = None
    bounced: bool = False
    held: Held | None = None  # not read nor told for delivery.held_after: why, in words (relayd.delivery.held)
    door: list[DoorStatus] = msgspec.field(default_factory=list)  # the program's own receipts, oldest first


class TrackResult(msgspec.Struct, kw_only=True):
    id: str
    from_: str = msgspec.field(name="from")
    subject: str
    recipients: list[Way]
    held_after: float | None = None  # seconds (delivery.held_after) after which waiting mail says why; set while a recipient waits


@operation("track", TrackParams, mutates=False)
def track(store: Store, p: TrackParams) -> TrackResult:
    """Each recipient's way of one message: stored, announced (how), read, acknowledged."""
    message_id = check_id(p.id)
    since = ms_to_iso(ulid_time_ms(message_id) - _CLOCK_SLACK_MS)
    ways: list[Way] = []
    latest_ts: dict[str, str] = {}  # recipient -> the time of its latest copy (what its cursor must pass)
    first: Message | None = None
    for name in store.known_agents():
        found = _copies(store, name, message_id, since)
        if found is None:
            continue
        message, deliveries, read, mechanism, latest = found
        first = first or message
        ways.append(Way(to=name, stored=message.ts, deliveries=deliveries, read=read, mechanism=mechanism))
        latest_ts[name] = latest
    if first is None:
        raise NotFound(f"no message {message_id} in any inbox (tracked back to {since[:19]}Z)", id=message_id)
    oldest = min(w.stored for w in ways)
    for receipt in newest_first(store, oldest):
        for way in ways:
            if receipt.to != way.to or receipt.ts < way.stored:
                continue
            if receipt.step == "bounced" and message_id in receipt.ids:
                way.bounced = True
            elif receipt.step == "door" and message_id in receipt.ids and receipt.status:
                way.door.insert(0, DoorStatus(status=receipt.status, at=receipt.ts, how=receipt.how, detail=receipt.error))
            elif receipt.step == "read":
                if way.read and receipt.upto is not None and receipt.upto >= latest_ts[way.to]:
                    way.read_at = receipt.ts  # going back in time: the first advance past it wins
            elif receipt.step == "announced" and _told_first(receipt, way.announced):
                way.announced = Announcement(how=receipt.how, at=receipt.ts, ok=receipt.ok, error=receipt.error, note=receipt.note)
    if first.ack:
        for way in ways:
            way.ack, way.acked_at = _ack_state(store, way.to, message_id)
    waiting = [w for w in ways if not w.read and not (w.announced and landed(w.announced.how, w.announced.ok, w.announced.at, held_record(store, w.to)))]
    held_after = thresholds(store)[0] if waiting else None
    for way in waiting:
        if waited(store, way.stored) >= held_after:  # type: ignore[operator]
            way.held = held_since(store, way.to, way.stored)
    return TrackResult(id=message_id, from_=first.from_, subject=first.subject, recipients=ways, held_after=held_after)


# -- each agent's latest announcement: status and the web view ---------------------------------

ANNOUNCED_WINDOW_MS = 24 * 3600 * 1000  # how far back the delivery log is read for them


class LastAnnouncement(Announcement):
    """How an agent was last told of its mail; when that failed, the failures in a row it ends
    (a failing pane or command is retried every few seconds, each try a receipt)."""

    failures: int = 0  # announcements that failed in a row, up to the last one (0: it worked)
    failing_since: str | None = None  # when the first of them failed
    earlier: bool = False  # they go back past the log's window: they began before failing_since


def _told_first(receipt: Receipt, shown: Announcement | None) -> bool:
    """Whether `receipt` is the announcement `track` shows rather than `shown`: the earliest
    success, else the earliest failure. Earliest by its time, not its place in the log: a
    door's receipt is written once the program took the message, stamped when relay began
    to hand it over, and the prompt hook of the turn it started may have written its own
    between the two."""
    if shown is None:
        return True
    if receipt.ok != shown.ok:
        return receipt.ok
    return receipt.ts <= shown.at


def last_announcements(store: Store, names: list[str]) -> dict[str, LastAnnouncement]:
    """Each of `names`' newest announcement over the last day of the delivery log; an agent
    not told in that time is left out. A trigger skipped because the last one is still
    unread (a `note`) told nobody: it is shown only when there is nothing else."""
    found: dict[str, LastAnnouncement] = {}
    skipped: dict[str, LastAnnouncement] = {}
    settled: set[str] = set()  # the newest announcement and the failures before it are known
    wanted = set(names)
    since = to_iso(now() - timedelta(milliseconds=ANNOUNCED_WINDOW_MS))
    cut = False  # the log goes back further than was read
    for receipt in newest_first(store, ""):
        if receipt.ts < since:
            cut = True
            break
        who = receipt.to
        if receipt.step != "announced" or who not in wanted or who in settled:
            continue
        told = LastAnnouncement(how=receipt.how, at=receipt.ts, ok=receipt.ok, error=receipt.error, note=receipt.note)
        last = found.get(who)
        if receipt.ok and receipt.note:
            skipped.setdefault(who, told)
        elif last is None:
            found[who] = told
            if receipt.ok:
                settled.add(who)
            else:
                told.failures, told.failing_since = 1, receipt.ts
        elif receipt.ok:
            settled.add(who)  # the failures began after this success
        else:
            last.failures += 1
            last.failing_since = receipt.ts
        if len(settled) == len(wanted):
            break
    for who, last in found.items():
        last.earlier = cut and not last.ok and who not in settled
    return {**skipped, **found}


class LastDoorStatus(DoorStatus):
    """An agent's newest receipt from its program's own door, and the message it was for."""

    id: str


def last_door_statuses(store: Store, names: list[str]) -> dict[str, LastDoorStatus]:
    """Each of `names`' newest door receipt (Claude Code: held, delivered, denied, ...) over
    the last day of the delivery log; an agent with none is left out."""
    found: dict[str, LastDoorStatus] = {}
    wanted = set(names)
    since = to_iso(now() - timedelta(milliseconds=ANNOUNCED_WINDOW_MS))
    for receipt in newest_first(store, since):
        if receipt.step == "door" and receipt.to in wanted and receipt.to not in found and receipt.status and receipt.ids:
            found[receipt.to] = LastDoorStatus(status=receipt.status, at=receipt.ts, how=receipt.how, detail=receipt.error, id=receipt.ids[0])
            if len(found) == len(wanted):
                break
    return found


def _copies(store: Store, name: str, message_id: str, since: str) -> tuple[Message, int, bool, str, str] | None:
    """(the first copy, how many copies, whether the cursor passed the last one, the arrival
    mechanism, the time of the last one) of the id in an inbox, looking back to `since`; None when it holds none."""
    found = find_copies(store, name, message_id, since)
    if found is None:
        return None
    with store.agent_dir(name) as agent:
        meta = read_meta(agent)
    mechanism = arrival_mechanism(meta.notify, meta.program).partition(":")[0] if meta else "none"
    copies = found.newest_first
    return copies[-1], len(copies), found.read, mechanism, copies[0].ts


def _ack_state(store: Store, to: str, message_id: str) -> tuple[Literal["owed", "acked", "dead_letter"] | None, str | None]:
    name = record_name(to, message_id)
    for state, folder in (("acked", layout.ACKED), ("dead_letter", layout.DEAD_LETTER), ("owed", layout.OWED)):
        opened = store.top_if_exists(folder)
        try:
            st = os.stat(name, dir_fd=opened.fd, follow_symlinks=False) if opened is not None else None
        except FileNotFoundError:
            st = None
        if st is None:
            continue
        at = to_iso(datetime.fromtimestamp(st.st_mtime, timezone.utc)) if state == "acked" else None
        return state, at  # type: ignore[return-value]
    if (to, message_id) in owed.unabsorbed(store, to) or parked.is_parked(store, to, message_id):
        return "owed", None
    return None, None
