"""At-least-once delivery (DESIGN §4): acknowledging, redelivering, dead letters.

A message sent with `ack` is *owed* until its recipient acknowledges it; reading alone does
not settle it. Its record (`relayd.owed`) starts as the send's own inbox line; the sweep
(and an ack) absorbs it into owed/, or parks it until its due minute (`relayd.due`), from
where it moves owed -> acked, or owed -> dead_letter after its last delivery, only by rename
(a parked record is acknowledged by writing it to acked/ and settling its parked line).

The sweep (`redeliver`) is one store operation: relayd runs it on a timer, `relayctl
redeliver` and `gc` run it without the daemon. For each owed record that is due:
* attempts left: the record is rewritten first (attempt n+1, next due time), then the
  same message with attempt n+1 is appended to the inbox, and the `pending` flag is
  cleared so the recipient's arrival mechanism fires again. A crash between the two
  skips that attempt (the next one comes at the next due time); no attempt is made twice.
  A record whose next delivery is not due within the current minute is parked again, then
  its owed/ file removed.
* none left: the record is rewritten with the reason and an escalation id, the escalation
  goes to the sender and the store's escalation agent under that id (a sweep resuming an
  interrupted one skips inboxes that already hold it), then the record is renamed into
  dead_letter/.
Every change holds `delivery.lock`, so an ack, relayd's sweep and a direct-mode sweep
never interleave on one record.

Cost: a sweep reads the inboxes and the delivery log past the point it absorbed last (a stat
each when nothing is new), lists due/ and stats the records in owed/ (those due within the
minute: a record's mtime is its due time); only due records are read. It grows with the
messages due soon, not with all that are owed, and never with the stored ones.
"""

from __future__ import annotations

import os
from typing import Literal

import msgspec

from . import due, layout, owed
from .errors import NotFound, StoreError, UsageError
from .inbox import append_messages, arrival, holds_since
from .records import Message, check_agent_name
from .registry import operation
from .store import Store
from .timefmt import parse_duration, to_iso
from .ulid import is_ulid, new_ulid

ESCALATION_SENDER = "relay"


def _iso(epoch: float) -> str:
    from datetime import datetime, timezone

    return to_iso(datetime.fromtimestamp(epoch, timezone.utc))


def _check_id(message_id: object) -> str:
    if not isinstance(message_id, str) or not is_ulid(message_id):
        shown = str(message_id)[:40]
        raise UsageError(f"not a message id: {shown!r} (ids are 26-character ULIDs, as 'relayctl read' shows them)")
    return message_id


# -- acknowledging ---------------------------------------------------------------------

AckOutcome = Literal["acked", "already_acked", "dead_lettered", "not_yours", "not_owed"]


class AckParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # the recipient acknowledging
    ids: list[str]


class AckAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    outcome: AckOutcome
    attempt: int | None = None  # the delivery that was current when it was acknowledged
    owner: str | None = None  # with not_yours: whose message it is


class AckResult(msgspec.Struct, kw_only=True):
    results: list[AckAnswer]


@operation("ack", AckParams)
def ack(store: Store, p: AckParams) -> AckResult:
    """Acknowledge owed messages by id; each id gets its own outcome (acked, already_acked, ...)."""
    check_agent_name(p.agent)
    if not p.ids:
        raise UsageError("give at least one message id to acknowledge")
    ids = [_check_id(message_id) for message_id in dict.fromkeys(p.ids)]
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    answers = []
    settled = []
    with store.root_dir().locked(layout.DELIVERY_LOCK):
        owed.absorb(store)  # records sends stored since the last sweep
        parked = due.find(store, p.agent, [i for i in ids if not store.top(layout.OWED).exists(owed.record_name(p.agent, i))])
        for message_id in ids:
            answer = _ack_one(store, p.agent, message_id, parked.get(message_id))
            answers.append(answer)
            if answer.outcome == "acked":
                settled.append(answer)
        if settled:
            store.sync.dir(store.top(layout.OWED).fd)
            store.sync.dir(store.top(layout.ACKED).fd)
        # Acknowledged parked records are settled in their files only now that acked/ holds them.
        by_file: dict[str, set[tuple[str, str]]] = {}
        for answer in settled:
            if answer.id in parked:
                by_file.setdefault(parked[answer.id][0], set()).add((p.agent, answer.id))
        if by_file:  # acked/'s entries durable first (under relayd its fsync above only joined the round)
            due.now_syncer(store).dir(store.top(layout.ACKED).fd)
        for name, keys in by_file.items():
            due.settle(store, name, keys)
    store.emit(*(store.event("inbox", action="ack", agent=p.agent, message_id=a.id) for a in settled))
    return AckResult(results=answers)


def _ack_one(store: Store, agent: str, message_id: str, parked: tuple[str, owed.Record] | None) -> AckAnswer:
    name = owed.record_name(agent, message_id)
    record = owed.read(store, layout.OWED, name)
    if record is not None:
        if record.escalation_id is not None:
            return AckAnswer(id=message_id, outcome="dead_lettered")  # caught half way there: too late
        _move(store, layout.OWED, layout.ACKED, name, store.clock())
        return AckAnswer(id=message_id, outcome="acked", attempt=record.attempt)
    if parked is not None and not any(store.top(f).exists(name) for f in (layout.ACKED, layout.DEAD_LETTER)):
        record = parked[1]  # written to acked/ first; the caller then settles its parked line
        owed.write(store, layout.ACKED, record, mtime=store.clock())
        return AckAnswer(id=message_id, outcome="acked", attempt=record.attempt)
    state = owed.states(store, agent, [message_id]).get(message_id)
    if state == layout.ACKED:
        return AckAnswer(id=message_id, outcome="already_acked")
    if state == layout.DEAD_LETTER:
        return AckAnswer(id=message_id, outcome="dead_lettered")
    for folder in (layout.OWED, layout.ACKED, layout.DEAD_LETTER):
        for other in store.top(folder).listdir():
            parts = owed.split_name(other)
            if parts is not None and parts[1] == message_id and parts[0] != agent:
                return AckAnswer(id=message_id, outcome="not_yours", owner=parts[0])
    for owner in sorted(due.owners(store, message_id) - {agent}):
        return AckAnswer(id=message_id, outcome="not_yours", owner=owner)
    return AckAnswer(id=message_id, outcome="not_owed")


def _move(store: Store, src: str, dst: str, name: str, mtime: float) -> None:
    """Rename a record between state directories (atomic: it is always in exactly one);
    its mtime then says when it got there (or, in owed/, when it is due)."""
    source, target = store.top(src), store.top(dst)
    try:
        os.rename(name, name, src_dir_fd=source.fd, dst_dir_fd=target.fd)
        os.utime(name, (mtime, mtime), dir_fd=target.fd, follow_symlinks=False)
    except OSError as exc:
        raise StoreError(f"moving {source.path}/{name} to {target.path}: {exc.strerror or exc}") from exc


# -- the redelivery sweep ------------------------------------------------------------


class RedeliverParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    announce: bool = True  # also announce inbox lines that have no event (relayd.announce)


class Announced(msgspec.Struct, kw_only=True):
    id: str
    to: str


class Redelivered(msgspec.Struct, kw_only=True):
    id: str
    to: str
    attempt: int
    of: int  # the last attempt before dead_letter/


class DeadLettered(msgspec.Struct, kw_only=True):
    id: str
    to: str
    attempts: int
    told: list[str]


class SweepResult(msgspec.Struct, kw_only=True):
    redelivered: list[Redelivered]
    dead_lettered: list[DeadLettered]
    messages: list[Message]  # every line appended: redeliveries and escalations (for notifying)
    owed: int  # still owed after the sweep
    next_due: str | None  # when the next owed message is due
    announced: list[Announced] = msgspec.field(default_factory=list)  # lines found without their event, announced now


@operation("redeliver", RedeliverParams)
def redeliver(store: Store, p: RedeliverParams) -> SweepResult:
    """Redeliver owed messages whose ack-wait has passed (dead letters when out of attempts); announce lines stored without their event.

    A line without its event is what a sender killed between its two appends leaves (relayd.announce)."""
    result = SweepResult(redelivered=[], dead_lettered=[], messages=[], owed=0, next_due=None)
    if p.announce:
        from .announce import announce_missing

        found = announce_missing(store)
        result.announced = [Announced(id=m.id, to=m.to) for m in found]
        result.messages.extend(found)
    events = []
    now = store.clock()
    names, upcoming = owed.due_names(store, now)
    if names or owed.needs_absorbing(store) or due.begun(store, now):  # the lock only when there is work: an idle sweep writes nothing
        with store.root_dir().locked(layout.DELIVERY_LOCK):
            owed.absorb(store)  # the records sends stored since the last sweep
            due.unpark_begun(store, now)  # parked records whose minute has come, into owed/
            names, upcoming = owed.due_names(store, now)  # again: another sweep may have acted meanwhile
            waiting = []  # redelivered records: parked again when their next delivery is a while off
            for name in names:
                record = owed.read(store, layout.OWED, name)
                if record is None:
                    continue  # damaged by hand: left for a person to look at, never guessed at
                if record.escalation_id is None and record.attempt < record.last_attempt:
                    message = _redeliver_one(store, record, now)
                    result.redelivered.append(Redelivered(id=message.id, to=message.to, attempt=record.attempt, of=record.last_attempt))
                    result.messages.append(message)
                    events.append(arrival(store, message))
                    waiting.append(record)
                else:
                    escalations = _dead_letter_one(store, record, now)
                    m = record.message
                    result.dead_lettered.append(DeadLettered(id=m.id, to=m.to, attempts=record.attempt, told=record.told))
                    result.messages.extend(escalations)
                    events.append(store.event("inbox", action="dead_letter", agent=m.to, message_id=m.id))
                    events.extend(arrival(store, e) for e in escalations)
            soon = due.park(store, waiting, now)
            if len(soon) < len(waiting):
                folder = store.top(layout.OWED)
                for record in waiting:
                    if record not in soon:  # parked (and durable there): its owed/ file goes
                        folder.unlink(owed.record_name(record.message.to, record.message.id), missing_ok=True)
                due.now_syncer(store).dir(folder.fd)
            for record in soon:
                if upcoming is None or record.due < upcoming:
                    upcoming = record.due
    counts, earliest = owed.owed_counts(store, unabsorbed_too=False)  # (what came since the absorb above: the next sweep's)
    result.owed = sum(counts.values())
    store.emit(*events)
    if earliest is not None and (upcoming is None or earliest < upcoming):
        upcoming = earliest
    result.next_due = _iso(upcoming) if upcoming is not None else None
    return result


def _redeliver_one(store: Store, record: owed.Record, now: float) -> Message:
    record.attempt += 1
    when = _iso(now)
    record.delivered_at.append(when)
    record.due = now + record.next_wait(store.rand())
    owed.write(store, layout.OWED, record)
    # Stamped now: inbox lines stay in time order, which `read --since` relies on.
    message = msgspec.structs.replace(record.message, attempt=record.attempt, ts=when)
    with store.agent_dir(message.to) as agent:
        # The trigger fires again even if the agent never read the first one.
        agent.unlink(layout.PENDING, missing_ok=True)
    append_messages(store, message.to, [message])
    return message


def _dead_letter_one(store: Store, record: owed.Record, now: float) -> list[Message]:
    """Final state: dead_letter/, with the sender and the escalation agent told once."""
    m = record.message
    resuming = record.escalation_id is not None
    if not resuming:
        from .config import load_config

        record.reason = f"not acknowledged after {record.attempt} deliver{'y' if record.attempt == 1 else 'ies'}"
        record.dead_at = _iso(now)
        record.escalation_id = new_ulid()
        escalate_to = load_config(store).delivery.escalate_to
        record.told = [name for name in dict.fromkeys([m.from_, escalate_to]) if name and store.is_agent(name)]
        owed.write(store, layout.OWED, record)
    assert record.escalation_id is not None and record.dead_at is not None
    sent = []
    for name in record.told:
        if resuming and holds_since(store, name, record.escalation_id, record.dead_at):
            continue  # an interrupted sweep already told this one
        escalation = _escalation(record, name)
        append_messages(store, name, [escalation])
        sent.append(escalation)
    name = owed.record_name(m.to, m.id)
    _move(store, layout.OWED, layout.DEAD_LETTER, name, now)
    store.sync.dir(store.top(layout.OWED).fd)
    store.sync.dir(store.top(layout.DEAD_LETTER).fd)
    return sent


def _escalation(record: owed.Record, to: str) -> Message:
    m = record.message
    assert record.escalation_id is not None and record.dead_at is not None
    body = (
        f"Message {m.id} from {m.from_} to {m.to} was not acknowledged after {record.attempt} "
        f"deliveries ({', '.join(record.delivered_at)}) and is now a dead letter.\n"
        f"Subject: {m.subject}\n"
        f"See it with 'relayctl dlq show {m.id}'; deliver it again with 'relayctl dlq retry {m.id}'."
    )
    return Message(
        id=record.escalation_id,
        ts=record.dead_at,
        from_=ESCALATION_SENDER,
        to=to,
        subject=f"undelivered to {m.to}: {m.subject}"[:200],
        body=body,
        thread=m.thread,
        priority="high",
        type="escalation",
    )


# -- dead letters --------------------------------------------------------------------


class DeadLetter(msgspec.Struct, kw_only=True):
    id: str
    to: str
    from_: str = msgspec.field(name="from")
    subject: str
    attempts: int
    reason: str | None
    dead_at: str | None
    delivered_at: list[str]
    retried_at: list[str]
    told: list[str]
    message: Message


def _summary(record: owed.Record) -> DeadLetter:
    m = record.message
    return DeadLetter(
        id=m.id,
        to=m.to,
        from_=m.from_,
        subject=m.subject,
        attempts=record.attempt,
        reason=record.reason,
        dead_at=record.dead_at,
        delivered_at=record.delivered_at,
        retried_at=record.retried_at,
        told=record.told,
        message=m,
    )


class DlqListParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str | None = None  # only this recipient's


class DlqListResult(msgspec.Struct, kw_only=True):
    dead_letters: list[DeadLetter]
    rotated_files: list[str]  # older unread mail moved aside by inbox rotation (not retryable)


@operation("dlq_list", DlqListParams, mutates=False)
def dlq_list(store: Store, p: DlqListParams) -> DlqListResult:
    """Dead-lettered messages, oldest first, and rotated-out inbox files kept in dead_letter/."""
    if p.agent is not None:
        check_agent_name(p.agent)
    letters, rotated = [], []
    for name in sorted(store.top(layout.DEAD_LETTER).listdir()):
        parts = owed.split_name(name)
        if parts is None:
            if name.endswith(".jsonl") and not name.startswith("."):
                rotated.append(name)
            continue
        if p.agent is not None and parts[0] != p.agent:
            continue
        record = owed.read(store, layout.DEAD_LETTER, name)
        if record is not None:
            letters.append(_summary(record))
    letters.sort(key=lambda d: (d.dead_at or "", d.id))
    return DlqListResult(dead_letters=letters, rotated_files=rotated)


class DlqParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    to: str | None = None  # needed only when one id was dead-lettered for several recipients


def _find_dead(store: Store, p: DlqParams) -> tuple[str, owed.Record]:
    message_id = _check_id(p.id)
    if p.to is not None:
        check_agent_name(p.to, "recipient")
    matches = []
    for name in store.top(layout.DEAD_LETTER).listdir():
        parts = owed.split_name(name)
        if parts is not None and parts[1] == message_id and (p.to is None or parts[0] == p.to):
            matches.append((parts[0], name))
    if not matches:
        raise NotFound(f"no dead letter {message_id}{' for ' + p.to if p.to else ''}; 'relayctl dlq list' shows them", id=message_id)
    if len(matches) > 1:
        raise UsageError(f"{message_id} was dead-lettered for {', '.join(sorted(t for t, _ in matches))}: say which with --to", id=message_id)
    name = matches[0][1]
    record = owed.read(store, layout.DEAD_LETTER, name)
    if record is None:
        raise NotFound(f"dead letter {message_id} is damaged ({store.top(layout.DEAD_LETTER).path}/{name})", id=message_id)
    return name, record


@operation("dlq_show", DlqParams, mutates=False)
def dlq_show(store: Store, p: DlqParams) -> DeadLetter:
    """One dead letter in full: the message, its deliveries, why, and who was told."""
    return _summary(_find_dead(store, p)[1])


class DlqRetryResult(msgspec.Struct, kw_only=True):
    messages: list[Message]  # the delivery just made (a list, like send's answer)
    of: int  # the last attempt before it is dead-lettered again


@operation("dlq_retry", DlqParams)
def dlq_retry(store: Store, p: DlqParams) -> DlqRetryResult:
    """Deliver a dead letter again as a fresh owed message (same id, the full number of retries)."""
    with store.root_dir().locked(layout.DELIVERY_LOCK):
        name, record = _find_dead(store, p)
        m = record.message
        if not store.is_agent(m.to):
            raise store.unknown_agent(m.to)
        now = store.clock()
        record.attempt += 1
        record.last_attempt = record.attempt + record.max_deliver
        record.delivered_at.append(_iso(now))
        record.retried_at.append(_iso(now))
        record.due = now + record.next_wait(store.rand())
        record.reason = record.dead_at = record.escalation_id = None
        record.told = []
        # Rewritten where it lies, then renamed: a crash leaves it dead-lettered or owed, never both.
        owed.write(store, layout.DEAD_LETTER, record)
        _move(store, layout.DEAD_LETTER, layout.OWED, name, record.due)
        store.sync.dir(store.top(layout.DEAD_LETTER).fd)
        message = msgspec.structs.replace(m, attempt=record.attempt, ts=record.delivered_at[-1])
        with store.agent_dir(m.to) as agent:
            agent.unlink(layout.PENDING, missing_ok=True)
        append_messages(store, m.to, [message])
    store.emit(arrival(store, message))
    return DlqRetryResult(messages=[message], of=record.last_attempt)


class DlqDropResult(msgspec.Struct, kw_only=True):
    dropped: DeadLetter


@operation("dlq_drop", DlqParams)
def dlq_drop(store: Store, p: DlqParams) -> DlqDropResult:
    """Delete a dead letter for good (the inbox keeps the copies that were delivered)."""
    with store.root_dir().locked(layout.DELIVERY_LOCK):
        name, record = _find_dead(store, p)
        folder = store.top(layout.DEAD_LETTER)
        folder.unlink(name)
        store.sync.dir(folder.fd)
    store.emit(store.event("inbox", action="dead_letter_dropped", agent=record.message.to, message_id=record.message.id))
    return DlqDropResult(dropped=_summary(record))


# -- housekeeping ----------------------------------------------------------------------


def forget_old_acks(store: Store, keep: str | None = None) -> int:
    """Drop acknowledgements older than `keep` (config.json delivery.keep_acked, 7d)."""
    if keep is None:
        from .config import load_config

        keep = load_config(store).delivery.keep_acked
    horizon = store.clock() - parse_duration(keep).total_seconds()
    folder = store.top(layout.ACKED)
    dropped = 0
    with os.scandir(folder.fd) as entries:
        for entry in entries:
            if owed.split_name(entry.name) is None:
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime < horizon:
                    dropped += folder.unlink(entry.name, missing_ok=True)
            except FileNotFoundError:
                continue
    return dropped
