"""Acknowledging owed messages (`ack`), and forgetting old acknowledgements.

An ack takes the records sends stored since the last sweep (`owed.absorb`), then moves each
acknowledged record owed/ -> acked/ by rename, or, for a parked one, writes it to acked/ and
then settles its parked line: a record is in exactly one state whatever crashes. It holds
`delivery.lock` throughout, as the sweep does.
"""

from __future__ import annotations

import os
from typing import Literal

import msgspec

from .. import layout
from ..errors import UsageError
from ..records import check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import parse_duration
from . import owed, parked
from .record import Record, check_id, move, now_syncer, read_record, record_name, split_name, write_record
from ..config import load_config


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
    ids = [check_id(message_id) for message_id in dict.fromkeys(p.ids)]
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    answers = []
    settled = []
    with store.root_dir().locked(layout.DELIVERY_LOCK):
        owed.absorb(store)  # records sends stored since the last sweep
        waiting = parked.find(store, p.agent, [i for i in ids if not store.top(layout.OWED).exists(record_name(p.agent, i))])
        for message_id in ids:
            answer = _ack_one(store, p.agent, message_id, waiting.get(message_id))
            answers.append(answer)
            if answer.outcome == "acked":
                settled.append(answer)
        if settled:
            store.sync.dir(store.top(layout.OWED).fd)
            store.sync.dir(store.top(layout.ACKED).fd)
        # Acknowledged parked records are settled in their files only now that acked/ holds them.
        by_file: dict[str, set[tuple[str, str]]] = {}
        for answer in settled:
            if answer.id in waiting:
                by_file.setdefault(waiting[answer.id][0], set()).add((p.agent, answer.id))
        if by_file:  # acked/'s entries durable first (under relayd its fsync above only joined the round)
            now_syncer(store).dir(store.top(layout.ACKED).fd)
        for name, keys in by_file.items():
            parked.settle(store, name, keys)
    store.emit(*(store.event("inbox", action="ack", agent=p.agent, message_id=a.id) for a in settled))
    return AckResult(results=answers)


def _ack_one(store: Store, agent: str, message_id: str, waiting: tuple[str, Record] | None) -> AckAnswer:
    name = record_name(agent, message_id)
    record = read_record(store, layout.OWED, name)
    if record is not None:
        if record.escalation_id is not None:
            return AckAnswer(id=message_id, outcome="dead_lettered")  # caught half way there: too late
        move(store, layout.OWED, layout.ACKED, name, store.clock())
        return AckAnswer(id=message_id, outcome="acked", attempt=record.attempt)
    if waiting is not None and not any(store.top(f).exists(name) for f in (layout.ACKED, layout.DEAD_LETTER)):
        record = waiting[1]  # written to acked/ first; the caller then settles its parked line
        write_record(store, layout.ACKED, record, mtime=store.clock())
        return AckAnswer(id=message_id, outcome="acked", attempt=record.attempt)
    state = owed.states(store, agent, [message_id]).get(message_id)
    if state == layout.ACKED:
        return AckAnswer(id=message_id, outcome="already_acked")
    if state == layout.DEAD_LETTER:
        return AckAnswer(id=message_id, outcome="dead_lettered")
    for folder in (layout.OWED, layout.ACKED, layout.DEAD_LETTER):
        for other in store.top(folder).listdir():
            parts = split_name(other)
            if parts is not None and parts[1] == message_id and parts[0] != agent:
                return AckAnswer(id=message_id, outcome="not_yours", owner=parts[0])
    for owner in sorted(parked.owners(store, message_id) - {agent}):
        return AckAnswer(id=message_id, outcome="not_yours", owner=owner)
    return AckAnswer(id=message_id, outcome="not_owed")



def forget_old_acks(store: Store, keep: str | None = None) -> int:
    """Drop acknowledgements older than `keep` (config.json delivery.keep_acked, 7d)."""
    if keep is None:
        keep = load_config(store).delivery.keep_acked
    horizon = store.clock() - parse_duration(keep).total_seconds()
    folder = store.top(layout.ACKED)
    dropped = 0
    with os.scandir(folder.fd) as entries:
        for entry in entries:
            if split_name(entry.name) is None:
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime < horizon:
                    dropped += folder.unlink(entry.name, missing_ok=True)
            except FileNotFoundError:
                continue
    return dropped

