"""Dead letters: messages whose every delivery went unacknowledged (`dlq list/show/retry/drop`).

A record reaches dead_letter/ from the sweep (relayd.delivery.sweep). `dlq retry` rewrites
it where it lies and renames it back into owed/ with the full number of redeliveries, then
delivers the message again (`relayd.inbox.append.deliver`); `dlq drop` deletes it. Rotated
inbox files that held unread mail also lie in dead_letter/ (relayd.inbox.append); they are
listed, never retried.
"""

from __future__ import annotations

import msgspec

from .. import layout
from ..errors import NotFound, UsageError
from ..inbox.append import deliver
from ..records import Message, check_agent_name
from ..registry import operation
from ..store import Store
from .record import Record, check_id, iso, move, read_record, split_name, write_record


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


def _summary(record: Record) -> DeadLetter:
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
        parts = split_name(name)
        if parts is None:
            if name.endswith(".jsonl") and not name.startswith("."):
                rotated.append(name)
            continue
        if p.agent is not None and parts[0] != p.agent:
            continue
        record = read_record(store, layout.DEAD_LETTER, name)
        if record is not None:
            letters.append(_summary(record))
    letters.sort(key=lambda d: (d.dead_at or "", d.id))
    return DlqListResult(dead_letters=letters, rotated_files=rotated)


class DlqParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    to: str | None = None  # needed only when one id was dead-lettered for several recipients


def _find_dead(store: Store, p: DlqParams) -> tuple[str, Record]:
    message_id = check_id(p.id)
    if p.to is not None:
        check_agent_name(p.to, "recipient")
    matches = []
    for name in store.top(layout.DEAD_LETTER).listdir():
        parts = split_name(name)
        if parts is not None and parts[1] == message_id and (p.to is None or parts[0] == p.to):
            matches.append((parts[0], name))
    if not matches:
        raise NotFound(f"no dead letter {message_id}{' for ' + p.to if p.to else ''}; 'relayctl dlq list' shows them", id=message_id)
    if len(matches) > 1:
        raise UsageError(f"{message_id} was dead-lettered for {', '.join(sorted(t for t, _ in matches))}: say which with --to", id=message_id)
    name = matches[0][1]
    record = read_record(store, layout.DEAD_LETTER, name)
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
        record.delivered_at.append(iso(now))
        record.retried_at.append(iso(now))
        record.due = now + record.next_wait(store.rand())
        record.reason = record.dead_at = record.escalation_id = None
        record.told = []
        # Rewritten where it lies, then renamed: a crash leaves it dead-lettered or owed, never both.
        write_record(store, layout.DEAD_LETTER, record)
        move(store, layout.DEAD_LETTER, layout.OWED, name, record.due)
        store.sync.dir(store.top(layout.DEAD_LETTER).fd)
        message = msgspec.structs.replace(m, attempt=record.attempt, ts=record.delivered_at[-1])
        with store.agent_dir(m.to) as agent:
            agent.unlink(layout.PENDING, missing_ok=True)
        deliver(store, {m.to: [message]})
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

