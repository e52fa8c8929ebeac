"""The redelivery sweep (`redeliver`): owed messages whose ack-wait has passed are delivered again.

The sweep is one store operation: relayd runs it on a timer (relayd/daemon/timers.py),
`relayctl redeliver` and `gc` run it without the daemon. For each owed record that is due:
* attempts left: the record is rewritten first (attempt n+1, next due time), then the
  same message with attempt n+1 is delivered to the inbox (`relayd.inbox.append.deliver`,
  its arrival emitted under the inbox lock), and the `pending` flag is cleared so the
  recipient's arrival mechanism fires again. A crash between the two skips that attempt
  (the next one comes at the next due time); no attempt is made twice. A record whose next
  delivery is not due within the current minute is parked again, then its owed/ file removed.
* none left: the record is rewritten with the reason and an escalation id, the escalation
  goes to the sender and the store's escalation agent under that id (a sweep resuming an
  interrupted one skips inboxes that already hold it), then the record is renamed into
  dead_letter/.
Every change holds `delivery.lock`, so an ack, relayd's sweep and a direct-mode sweep
never interleave on one record. It also announces inbox lines stored without their event
(relayd.delivery.announce).

Cost: a sweep reads the inboxes and the delivery log past the point it absorbed last (a stat
each when nothing is new), lists due/ and stats the records in owed/ (those due within the
minute: a record's mtime is its due time); only due records are read. It grows with the
messages due soon, not with all that are owed, and never with the stored ones.
"""

from __future__ import annotations

import msgspec

from .. import layout
from ..inbox.append import deliver
from ..inbox.read import holds_since
from ..records import Message
from ..registry import operation
from ..store import Store
from ..ulid import new_ulid
from . import owed, parked
from .announce import announce_missing
from .record import Record, iso, move, now_syncer, read_record, record_name, write_record
from ..config import load_config

ESCALATION_SENDER = "relay"


class RedeliverParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    announce: bool = True  # also announce inbox lines that have no event (relayd.delivery.announce)


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

    A line without its event is what a sender killed between its two appends leaves (relayd.delivery.announce)."""
    result = SweepResult(redelivered=[], dead_lettered=[], messages=[], owed=0, next_due=None)
    if p.announce:
        found = announce_missing(store)
        result.announced = [Announced(id=m.id, to=m.to) for m in found]
        result.messages.extend(found)
    events = []  # of dead letters (each arrival is emitted by its delivery)
    now = store.clock()
    names, upcoming = owed.due_names(store, now)
    if names or owed.needs_absorbing(store) or parked.begun(store, now):  # the lock only when there is work: an idle sweep writes nothing
        with store.root_dir().locked(layout.DELIVERY_LOCK):
            owed.absorb(store)  # the records sends stored since the last sweep
            parked.unpark_begun(store, now)  # parked records whose minute has come, into owed/
            names, upcoming = owed.due_names(store, now)  # again: another sweep may have acted meanwhile
            waiting = []  # redelivered records: parked again when their next delivery is a while off
            for name in names:
                record = read_record(store, layout.OWED, name)
                if record is None:
                    continue  # damaged by hand: left for a person to look at, never guessed at
                if record.escalation_id is None and record.attempt < record.last_attempt:
                    message = _redeliver_one(store, record, now)
                    result.redelivered.append(Redelivered(id=message.id, to=message.to, attempt=record.attempt, of=record.last_attempt))
                    result.messages.append(message)
                    waiting.append(record)
                else:
                    escalations = _dead_letter_one(store, record, now)
                    m = record.message
                    result.dead_lettered.append(DeadLettered(id=m.id, to=m.to, attempts=record.attempt, told=record.told))
                    result.messages.extend(escalations)
                    events.append(store.event("inbox", action="dead_letter", agent=m.to, message_id=m.id))
            soon = parked.park(store, waiting, now)
            if len(soon) < len(waiting):
                folder = store.top(layout.OWED)
                for record in waiting:
                    if record not in soon:  # parked (and durable there): its owed/ file goes
                        folder.unlink(record_name(record.message.to, record.message.id), missing_ok=True)
                now_syncer(store).dir(folder.fd)
            for record in soon:
                if upcoming is None or record.due < upcoming:
                    upcoming = record.due
    left = owed.read_owed(store, unabsorbed_too=False)  # (what came since the absorb above: the next sweep's)
    result.owed = sum(left.counts.values())
    store.emit(*events)
    earliest = left.earliest
    if earliest is not None and (upcoming is None or earliest < upcoming):
        upcoming = earliest
    result.next_due = iso(upcoming) if upcoming is not None else None
    return result


def _redeliver_one(store: Store, record: Record, now: float) -> Message:
    record.attempt += 1
    when = iso(now)
    record.delivered_at.append(when)
    record.due = now + record.next_wait(store.rand())
    write_record(store, layout.OWED, record)
    # Stamped now: inbox lines stay in time order, which `read --since` relies on.
    message = msgspec.structs.replace(record.message, attempt=record.attempt, ts=when)
    with store.agent_dir(message.to) as agent:
        # The trigger fires again even if the agent never read the first one.
        agent.unlink(layout.PENDING, missing_ok=True)
    deliver(store, {message.to: [message]})
    return message


def _dead_letter_one(store: Store, record: Record, now: float) -> list[Message]:
    """Final state: dead_letter/, with the sender and the escalation agent told once."""
    m = record.message
    resuming = record.escalation_id is not None
    if not resuming:
        record.reason = f"not acknowledged after {record.attempt} deliver{'y' if record.attempt == 1 else 'ies'}"
        record.dead_at = iso(now)
        record.escalation_id = new_ulid()
        escalate_to = load_config(store).delivery.escalate_to
        record.told = [name for name in dict.fromkeys([m.from_, escalate_to]) if name and store.is_agent(name)]
        write_record(store, layout.OWED, record)
    assert record.escalation_id is not None and record.dead_at is not None
    sent = []
    for name in record.told:
        if resuming and holds_since(store, name, record.escalation_id, record.dead_at):
            continue  # an interrupted sweep already told this one
        escalation = _escalation(record, name)
        deliver(store, {name: [escalation]})
        sent.append(escalation)
    name = record_name(m.to, m.id)
    move(store, layout.OWED, layout.DEAD_LETTER, name, now)
    store.sync.dir(store.top(layout.OWED).fd)
    store.sync.dir(store.top(layout.DEAD_LETTER).fd)
    return sent


def _escalation(record: Record, to: str) -> Message:
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

