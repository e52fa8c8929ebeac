"""At-least-once delivery: acks, redelivery with full-jitter backoff, dead letters, escalation.

The exact tests drive the store with an injected clock and a seeded jitter source, so every
redelivery moment is known in advance; the command-line tests run relayctl's commands through
relayd's server in this process (support.inproc), its store on such a clock, into a real
tmux pane; the crash tests SIGKILL real relayd and relayctl processes at random points.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from relayd import layout, ops
from relayd.delivery import owed, parked
from relayd.delivery.record import new_record, read_record, write_record
from relayd.owing import policy_for
from relayd.errors import UsageError
from relayd.inbox.read import read_all
from relayd.store import Store
from support import inproc
from support.ack_team import Clock, ack_team
from support.relayd_proc import Daemon

ANOTHER_ULID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(store_dir: Path, clock: Clock):
    """A store with an injected clock and seeded jitter; `leader` is the escalation agent."""
    with ack_team(store_dir, clock) as opened:
        yield opened


def copies(store: Store, agent: str, message_id: str) -> list[int]:
    """The attempt numbers of the lines carrying `message_id` in the agent's inbox, in order."""
    return [m.attempt for m in read_all(store, agent).messages if m.id == message_id]


def where(store_dir: Path, to: str, message_id: str) -> list[str]:
    """The states holding the record: its files, and owed while its inbox line waits for the
    sweep or it is parked until its due minute (relayd.delivery.parked); a line or a parked copy counts
    only where no folder holds the record, so each counts once."""
    name = f"{to}.{message_id}.json"
    found = [state for state in (layout.OWED, layout.ACKED, layout.DEAD_LETTER) if (store_dir / state / name).exists()]
    if not found:
        with Store(str(store_dir)) as store:
            if (to, message_id) in owed.unabsorbed(store) or parked.is_parked(store, to, message_id):
                found.append(layout.OWED)
    return found


def send_owed(store: Store, **extra) -> str:
    params = {"agent": "alice", "to": ["bob"], "body": "deploy at 14:00", "ack": True, **extra}
    return ops.call(store, "send", params)["messages"][0]["id"]


def test_an_unacknowledged_message_is_delivered_1_plus_max_deliver_times_at_its_backoff_moments(store: Store, clock: Clock, store_dir: Path) -> None:
    start = clock.now
    message_id = send_owed(store, ack_wait="10s", max_deliver=3)
    # The same seeded jitter the store uses: wait after delivery n = r * min(cap, 10 * 2**(n-1)).
    jitter = random.Random(7).random
    moments, at = [], start
    for delivered in range(1, 5):
        at += jitter() * min(300.0, 10.0 * 2 ** (delivered - 1))
        moments.append(at)

    for attempt, moment in zip(range(2, 6), moments):
        clock.now = moment - 0.001
        swept = ops.call(store, "redeliver", {})
        assert swept["redelivered"] == [] and swept["dead_lettered"] == []
        clock.now = moment
        swept = ops.call(store, "redeliver", {})
        if attempt <= 4:
            assert swept["redelivered"] == [{"id": message_id, "to": "bob", "attempt": attempt, "of": 4}]
            assert [m["attempt"] for m in swept["messages"]] == [attempt]
        else:
            assert swept["redelivered"] == []
            assert swept["dead_lettered"] == [{"id": message_id, "to": "bob", "attempts": 4, "told": ["alice", "leader"]}]

    assert copies(store, "bob", message_id) == [1, 2, 3, 4]
    assert where(store_dir, "bob", message_id) == [layout.DEAD_LETTER]
    for told in ("alice", "leader"):
        escalations = [m for m in read_all(store, told).messages if m.type == "escalation"]
        assert len(escalations) == 1 and message_id in escalations[0].body and escalations[0].from_ == "relay"
    letter = ops.call(store, "dlq_show", {"id": message_id})
    assert letter["attempts"] == 4 and len(letter["delivered_at"]) == 4 and "not acknowledged after 4 deliveries" in letter["reason"]

    clock.now += 10_000  # nothing further happens, however long we wait
    assert ops.call(store, "redeliver", {})["messages"] == []
    assert copies(store, "bob", message_id) == [1, 2, 3, 4]


def test_an_acknowledged_message_is_never_delivered_again(store: Store, clock: Clock, store_dir: Path) -> None:
    message_id = send_owed(store)
    read = ops.call(store, "read", {"agent": "bob", "unread": True, "mark_read": True})
    assert read["delivery"] == {message_id: "owed"}  # reading alone does not settle it
    assert ops.call(store, "ack", {"agent": "bob", "ids": [message_id]})["results"] == [{"id": message_id, "outcome": "acked", "attempt": 1}]
    for _ in range(20):
        clock.now += 60
        assert ops.call(store, "redeliver", {})["messages"] == []
    assert copies(store, "bob", message_id) == [1]
    assert where(store_dir, "bob", message_id) == [layout.ACKED]
    assert ops.call(store, "read", {"agent": "bob"})["delivery"] == {message_id: "acked"}


def test_a_late_ack_of_an_earlier_attempt_settles_it_unless_it_is_a_dead_letter(store: Store, clock: Clock, store_dir: Path) -> None:
    late = send_owed(store, max_deliver=2)
    too_late = send_owed(store, max_deliver=1)
    while len(copies(store, "bob", late)) < 3:
        clock.now += 1
        ops.call(store, "redeliver", {})
    # The ack names the id, not an attempt: acking what attempt 1 carried settles attempt 3.
    [answer] = ops.call(store, "ack", {"agent": "bob", "ids": [late]})["results"]
    assert answer == {"id": late, "outcome": "acked", "attempt": 3}
    while where(store_dir, "bob", too_late) != [layout.DEAD_LETTER]:
        clock.now += 1
        ops.call(store, "redeliver", {})
    assert ops.call(store, "ack", {"agent": "bob", "ids": [too_late]})["results"] == [{"id": too_late, "outcome": "dead_lettered"}]
    assert where(store_dir, "bob", too_late) == [layout.DEAD_LETTER]


def test_ack_answers_are_distinct_and_idempotent(store: Store) -> None:
    mine = send_owed(store)
    plain = ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "no ack asked"})["messages"][0]["id"]
    results = ops.call(store, "ack", {"agent": "bob", "ids": [mine, mine, plain, ANOTHER_ULID]})["results"]
    assert [(r["id"], r["outcome"]) for r in results] == [(mine, "acked"), (plain, "not_owed"), (ANOTHER_ULID, "not_owed")]
    assert ops.call(store, "ack", {"agent": "bob", "ids": [mine]})["results"][0]["outcome"] == "already_acked"
    assert ops.call(store, "ack", {"agent": "leader", "ids": [mine]})["results"] == [{"id": mine, "outcome": "not_yours", "owner": "bob"}]
    with pytest.raises(UsageError, match="not a message id"):
        ops.call(store, "ack", {"agent": "bob", "ids": ["../../etc/passwd"]})
    with pytest.raises(UsageError, match="at least one"):
        ops.call(store, "ack", {"agent": "bob", "ids": []})


def test_dlq_retry_makes_a_fresh_owed_message_that_can_be_acknowledged(store: Store, clock: Clock, store_dir: Path) -> None:
    message_id = send_owed(store, max_deliver=1)
    while where(store_dir, "bob", message_id) != [layout.DEAD_LETTER]:
        clock.now += 5
        ops.call(store, "redeliver", {})
    assert [d["id"] for d in ops.call(store, "dlq_list", {})["dead_letters"]] == [message_id]
    retried = ops.call(store, "dlq_retry", {"id": message_id})
    assert retried["messages"][0]["attempt"] == 3 and retried["of"] == 4
    assert where(store_dir, "bob", message_id) == [layout.OWED]
    assert ops.call(store, "dlq_list", {})["dead_letters"] == []
    clock.now += 1000
    assert ops.call(store, "redeliver", {})["redelivered"] == [{"id": message_id, "to": "bob", "attempt": 4, "of": 4}]
    assert ops.call(store, "ack", {"agent": "bob", "ids": [message_id]})["results"][0]["outcome"] == "acked"
    assert copies(store, "bob", message_id) == [1, 2, 3, 4]
    assert len([m for m in read_all(store, "alice").messages if m.type == "escalation"]) == 1
    with pytest.raises(Exception, match="no dead letter"):
        ops.call(store, "dlq_drop", {"id": message_id})


def test_a_send_that_died_before_its_append_owes_nothing(store: Store, clock: Clock, store_dir: Path, monkeypatch) -> None:
    import relayd.inbox.append

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # stands in for kill -9 before the inbox append

    monkeypatch.setattr(relayd.inbox.append.Appends, "append", crash)  # send's inbox append
    with pytest.raises(KeyboardInterrupt):
        send_owed(store)
    monkeypatch.undo()
    assert owed.unabsorbed(store) == {} and read_all(store, "bob").messages == []
    clock.now += 10
    assert ops.call(store, "redeliver", {})["owed"] == 0
    assert os.listdir(store_dir / layout.OWED) == [] and read_all(store, "bob").messages == []


# -- the inbox line is the record: absorbed by the sweep, handed over at rotation ------------

_KILLED_BETWEEN_THE_APPENDS = """
import os, signal, sys
from relayd import ops
from relayd.store import Store

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # after the inbox append, before the event log's

Store.emit = die
with Store(sys.argv[1]) as store:
    ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "killed mid-send", "ack": True, "ack_wait": "1s", "max_deliver": 5})
"""


def test_kill_9_between_the_inbox_append_and_the_event_owes_the_message_once_with_its_terms(store: Store, store_dir: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _KILLED_BETWEEN_THE_APPENDS, str(store_dir)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    [(to, message_id)] = owed.unabsorbed(store)
    assert to == "bob" and copies(store, "bob", message_id) == [1] and where(store_dir, "bob", message_id) == [layout.OWED]
    assert ops.call(store, "status", {})["delivery"]["owed"] == 1
    # The sweep announces the line that has no event, absorbs it, and (the test's clock is
    # years past the send's due time) delivers it again, once.
    swept = ops.call(store, "redeliver", {})
    assert swept["announced"] == [{"id": message_id, "to": "bob"}] and swept["owed"] == 1
    assert swept["redelivered"] == [{"id": message_id, "to": "bob", "attempt": 2, "of": 6}]  # the send's own terms
    assert read_record(store, layout.OWED, f"bob.{message_id}.json").base == 1.0  # type: ignore[union-attr]
    ops.call(store, "redeliver", {})
    assert copies(store, "bob", message_id) == [1, 2]
    assert ops.call(store, "ack", {"agent": "bob", "ids": [message_id]})["results"][0]["outcome"] == "acked"
    assert where(store_dir, "bob", message_id) == [layout.ACKED]


def test_an_ack_send_writes_and_fsyncs_the_very_files_a_plain_send_does(store: Store, store_dir: Path, monkeypatch) -> None:
    """What makes --ack cost what a plain send costs: no file, write or fsync of its own."""
    from relayd.fsio import NoSync

    class Recording(NoSync):
        def __init__(self) -> None:
            self.synced: list[str] = []

        def file(self, fd: int) -> None:
            self.synced.append(os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), store_dir))

        dir = file

    def one_send(**extra) -> tuple[list[str], list[str]]:
        before = {p: p.stat().st_size for p in store_dir.rglob("*") if p.is_file()}
        monkeypatch.setattr(store, "sync", Recording())
        send_owed(store, **extra)
        synced = store.sync.synced  # type: ignore[attr-defined]
        monkeypatch.undo()
        after = {p: p.stat().st_size for p in store_dir.rglob("*") if p.is_file()}
        return sorted(str(p.relative_to(store_dir)) for p in after if before.get(p) != after[p]), synced

    one_send(ack=False)  # the first send to bob creates its lock files
    plain, with_ack = one_send(ack=False), one_send()
    assert with_ack == plain and plain[0] == ["agents/bob/inbox.jsonl", "events.jsonl"]
    line = json.loads((store_dir / "agents/bob/inbox.jsonl").read_bytes().splitlines()[-1])
    assert line["ack"] is True and set(line["owed"]) == {"due", "base", "cap", "max_deliver"}
    shown = ops.call(store, "read", {"agent": "bob"})["messages"][-1]
    assert shown["id"] == line["id"] and "owed" not in shown  # readers see the message, not its terms


def test_a_torn_inbox_line_owes_nothing_and_the_next_send_repairs_the_tail(store: Store, clock: Clock, store_dir: Path) -> None:
    kept = send_owed(store)
    inbox = store_dir / "agents/bob/inbox.jsonl"
    whole = inbox.read_bytes()
    torn = send_owed(store)
    # kill -9 in the middle of the second send's append: half its line, no newline.
    with open(inbox, "r+b") as f:
        f.truncate(len(whole) + (inbox.stat().st_size - len(whole)) // 2)
    assert set(owed.unabsorbed(store)) == {("bob", kept)}
    ops.call(store, "redeliver", {})  # absorbs up to the torn tail, not into it
    later = send_owed(store)
    assert set(owed.unabsorbed(store)) == {("bob", later)}
    assert all(json.loads(line) for line in inbox.read_bytes().splitlines())  # the torn half was cut back
    ops.call(store, "redeliver", {})
    assert sorted(os.listdir(store_dir / layout.OWED)) == sorted(f"bob.{i}.json" for i in (kept, later))
    assert where(store_dir, "bob", torn) == [] and owed.unabsorbed(store) == {}


@pytest.mark.parametrize("others", [0, owed._LIST_OVER], ids=["few-lines", "many-lines"])
def test_absorbing_is_idempotent_and_never_revives_a_settled_record(store: Store, clock: Clock, store_dir: Path, others: int) -> None:
    others_ids = [send_owed(store, ack_wait="1h", max_deliver=100) for _ in range(others)]
    acked, dead = send_owed(store), send_owed(store, max_deliver=1)
    assert ops.call(store, "ack", {"agent": "bob", "ids": [acked]})["results"][0]["outcome"] == "acked"  # an ack absorbs first
    for _ in range(3):
        clock.now += 100
        ops.call(store, "redeliver", {})
    assert where(store_dir, "bob", acked) == [layout.ACKED] and where(store_dir, "bob", dead) == [layout.DEAD_LETTER]
    (store_dir / layout.DELIVERY_ABSORBED).unlink()  # as if every sweep so far died before writing down how far it got
    ops.call(store, "redeliver", {})
    assert where(store_dir, "bob", acked) == [layout.ACKED] and where(store_dir, "bob", dead) == [layout.DEAD_LETTER]
    assert copies(store, "bob", acked) == [1] and copies(store, "bob", dead) == [1, 2]
    assert all(where(store_dir, "bob", i) == [layout.OWED] for i in others_ids)
    assert ops.call(store, "status", {})["delivery"]["owed"] == len(others_ids)  # each once, however often absorbed


@pytest.mark.slow
@pytest.mark.parametrize("point", ["absorbed, mark not moved", "parked again, owed file not removed", "unparked, parked file not removed"])
def test_status_counts_each_owed_message_once_while_a_sweep_moves_it(store: Store, clock: Clock, store_dir: Path, monkeypatch, point: str) -> None:
    """A sweep writes a record's new place before it leaves the old one; `relayctl status`
    asked in between (another process, or relayd's loop while its sweeper thread works) still
    counts every owed message once."""
    import threading

    soon = [send_owed(store, ack_wait="5s", max_deliver=3) for _ in range(3)]
    later = [send_owed(store, ack_wait="1h", max_deliver=3) for _ in range(4)]
    expected = len(soon) + len(later)
    if point != "absorbed, mark not moved":
        ops.call(store, "redeliver", {})  # absorbed: `soon` in owed/, `later` parked
        clock.now += 2 * 3600  # every record due: `later` leaves due/, and all are parked again
    counted: list[int] = []

    def count_meanwhile() -> None:
        with Store(str(store_dir)) as other:
            counted.append(ops.call(other, "status", {})["delivery"]["owed"])

    def at_the_point(original):
        def wrapped(*args, **kwargs):
            result = original(*args, **kwargs)
            counter = threading.Thread(target=count_meanwhile)
            counter.start()
            counter.join(0.5)  # it may wait for the sweep: counted again below
            holders.append(counter)
            return result

        return wrapped

    holders: list[threading.Thread] = []
    if point == "absorbed, mark not moved":
        monkeypatch.setattr(owed, "into_owed", at_the_point(owed.into_owed))
    elif point == "parked again, owed file not removed":
        monkeypatch.setattr(parked, "park", at_the_point(parked.park))
    else:
        monkeypatch.setattr(parked, "into_owed", at_the_point(owed.into_owed))
    swept = ops.call(store, "redeliver", {})
    monkeypatch.undo()
    for counter in holders:
        counter.join(10)
    assert point == "absorbed, mark not moved" or len(swept["redelivered"]) == expected
    assert holders and counted and all(n == expected for n in counted), counted
    assert ops.call(store, "status", {})["delivery"]["owed"] == expected


def test_a_failed_send_owes_nothing_where_its_append_was_taken_back(store: Store, store_dir: Path, monkeypatch) -> None:
    import relayd.inbox.append
    from relayd.errors import StoreError

    real_append = relayd.inbox.append.Appends.append

    def full(self, recipient, messages):
        if recipient == "leader":
            raise StoreError("inbox.jsonl: No space left on device")  # after bob's append was written
        real_append(self, recipient, messages)

    monkeypatch.setattr(relayd.inbox.append.Appends, "append", full)
    with pytest.raises(StoreError):
        ops.call(store, "send", {"agent": "alice", "to": ["bob", "leader"], "body": "to both", "ack": True})
    monkeypatch.undo()
    assert read_all(store, "bob").messages == [] and owed.unabsorbed(store) == {}
    ops.call(store, "redeliver", {})
    assert os.listdir(store_dir / layout.OWED) == []


def test_records_of_older_stores_are_honoured(store: Store, clock: Clock, store_dir: Path) -> None:
    """Stores written before hold one file per owed record, or an `owed` line in the delivery log
    with the log's mark as "<inode> <offset>", and inbox lines without terms: swept, acked, tracked as before."""
    from relayd.inbox.append import deliver
    from relayd.records import Message

    policy = policy_for(store, None, None)
    filed, logged = (Message(id=i, ts="2030-03-17T17:46:40.000Z", from_="alice", to="bob", subject=i[-4:], body="old", ack=True, attempt=1) for i in (ANOTHER_ULID, "01ARZ3NDEKTSV4RRFFQ69G5FAW"))
    deliver(store, {"bob": [filed, logged]})
    with store.root_dir().locked(layout.DELIVERY_LOCK):
        owed.absorb(store)  # (the inbox lines hold no terms: nothing to absorb from them)
    write_record(store, layout.OWED, new_record(store, filed, policy))
    size = (store_dir / layout.DELIVERY_LOG).stat().st_size if (store_dir / layout.DELIVERY_LOG).exists() else 0
    owed.open_records(store, [new_record(store, logged, policy)])
    (store_dir / layout.DELIVERY_ABSORBED).write_text(f"{(store_dir / layout.DELIVERY_LOG).stat().st_ino} {size}\n")
    assert ops.call(store, "status", {})["delivery"]["owed"] == 2
    clock.now += 10
    assert sorted(r["id"] for r in ops.call(store, "redeliver", {})["redelivered"]) == sorted([filed.id, logged.id])
    assert all(r["outcome"] == "acked" for r in ops.call(store, "ack", {"agent": "bob", "ids": [filed.id, logged.id]})["results"])
    assert ops.call(store, "track", {"id": logged.id})["recipients"][0]["ack"] == "acked"
    assert where(store_dir, "bob", filed.id) == where(store_dir, "bob", logged.id) == [layout.ACKED]


def test_an_inbox_rotated_twice_before_any_sweep_loses_no_record(store_dir: Path, clock: Clock) -> None:
    """Each rotation drops the older `.1`: its owed lines no sweep took yet are handed to the
    delivery log first, so the sweep finds every record, however late it runs."""
    with Store(str(store_dir), fsync=False, clock=clock, rand=random.Random(7).random, rotate_bytes=4096) as small:
        ops.call(small, "init", {})
        for name in ("alice", "bob"):
            ops.call(small, "register", {"name": name})
        sent = []
        for round_ in range(6):
            sent.append(send_owed(small, ack_wait="1s", max_deliver=1))
            for _ in range(15):  # ~200 bytes each: a rotation every two rounds or so
                ops.call(small, "send", {"agent": "alice", "to": ["bob"], "body": f"chatter {round_} " + "x" * 100})
        assert not any(m.id == sent[0] for m in read_all(small, "bob").messages)  # its file is gone
        assert set(owed.unabsorbed(small)) == {("bob", i) for i in sent}
        assert ops.call(small, "status", {})["delivery"]["owed"] == len(sent)
        clock.now += 10
        swept = ops.call(small, "redeliver", {})
        assert sorted(r["id"] for r in swept["redelivered"]) == sorted(sent)
        assert all(where(store_dir, "bob", i) == [layout.OWED] for i in sent)


def test_the_delivery_log_rotates_once_absorbed_and_receipts_are_read_from_both(store_dir: Path, clock: Clock) -> None:
    with Store(str(store_dir), fsync=False, clock=clock, rotate_bytes=2048) as small:
        ops.call(small, "init", {})
        for name in ("alice", "bob"):
            ops.call(small, "register", {"name": name})
        message_id = ops.call(small, "send", {"agent": "alice", "to": ["bob"], "body": "hello"})["messages"][0]["id"]
        ops.call(small, "announced", {"agent": "bob", "how": "hook"})
        for _ in range(40):
            ops.call(small, "announced", {"agent": "alice", "how": "channel"})  # ~100 bytes each, past 2 KiB
        ops.call(small, "redeliver", {})  # absorbed to its end: rotated
        log, rotated = store_dir / layout.DELIVERY_LOG, store_dir / layout.DELIVERY_LOG_ROTATED
        assert rotated.exists() and not log.exists()
        ops.call(small, "announced", {"agent": "alice", "how": "channel"})  # a new log
        assert log.stat().st_size < 200
        way = ops.call(small, "track", {"id": message_id})["recipients"][0]
        assert way["announced"]["how"] == "hook"  # found in the rotated log
        first_rotated = rotated.stat().st_ino
        for _ in range(40):
            ops.call(small, "announced", {"agent": "alice", "how": "channel"})
        ops.call(small, "redeliver", {})
        assert rotated.stat().st_ino != first_rotated and not log.exists()


def test_an_idle_sweep_reads_no_inbox(store: Store, clock: Clock, store_dir: Path, monkeypatch) -> None:
    """Cost: the sweep reads an inbox only past the point it absorbed (a stat says there is
    nothing new), and opens due records only."""
    owed_ids = [send_owed(store, ack_wait="1h") for _ in range(5)]
    for _ in range(50):
        ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "chatter"})
    assert ops.call(store, "redeliver", {})["owed"] == len(owed_ids)
    import relayd.delivery.sweep
    import relayd.fsio
    import relayd.inbox.read

    opened = []
    monkeypatch.setattr(relayd.inbox.read, "snapshot", lambda agent: opened.append(agent) or (_ for _ in ()).throw(AssertionError("inbox read")))
    monkeypatch.setattr(relayd.fsio.Dir, "open_reading", lambda folder, name: opened.append(name) or (_ for _ in ()).throw(AssertionError(f"{name} read")))
    monkeypatch.setattr(relayd.delivery.sweep, "read_record", lambda *a: opened.append(a) or (_ for _ in ()).throw(AssertionError("record read")))
    monkeypatch.setattr(parked, "_lines", lambda *a: opened.append(a) or (_ for _ in ()).throw(AssertionError("parked file read")))
    # relayd's sweep, every second after its first (which also announces what has no event)
    assert ops.call(store, "redeliver", {"announce": False})["owed"] == len(owed_ids)
    assert opened == []


def test_records_due_later_are_parked_by_minute_and_come_back_at_their_moment(store: Store, clock: Clock, store_dir: Path) -> None:
    """A record not due within the current minute is a line of due/<minute>.jsonl, not a file
    of owed/: acknowledged from there, counted, tracked, and moved to owed/ when its minute begins."""
    early, later = send_owed(store, ack_wait="1h", max_deliver=1), send_owed(store, ack_wait="1h", max_deliver=1)
    swept = ops.call(store, "redeliver", {})
    assert swept["owed"] == 2 and os.listdir(store_dir / layout.OWED) == [] and len(os.listdir(store_dir / layout.DUE)) >= 1
    assert ops.call(store, "status", {})["delivery"]["owed_by_agent"] == {"bob": 2}
    assert ops.call(store, "read", {"agent": "bob"})["delivery"] == {early: "owed", later: "owed"}
    assert ops.call(store, "ack", {"agent": "leader", "ids": [early]})["results"] == [{"id": early, "outcome": "not_yours", "owner": "bob"}]
    assert ops.call(store, "ack", {"agent": "bob", "ids": [early]})["results"] == [{"id": early, "outcome": "acked", "attempt": 1}]
    assert where(store_dir, "bob", early) == [layout.ACKED] and ops.call(store, "track", {"id": early})["recipients"][0]["ack"] == "acked"
    assert early not in [r.message.id for r in parked.every(store)]  # its parked line is settled
    record = owed.unabsorbed(store) or {}
    assert record == {}
    due_at = [r.due for r in parked.every(store)]
    assert len(due_at) == 1 and swept["next_due"] is not None
    clock.now = due_at[0] - 0.001  # its minute has begun (into owed/), its moment not yet
    assert ops.call(store, "redeliver", {})["redelivered"] == [] and os.listdir(store_dir / layout.OWED) == [f"bob.{later}.json"]
    assert f"{parked.minute(due_at[0])}.jsonl" not in os.listdir(store_dir / layout.DUE)  # emptied into owed/, removed
    clock.now = due_at[0]
    assert ops.call(store, "redeliver", {})["redelivered"] == [{"id": later, "to": "bob", "attempt": 2, "of": 2}]
    # Its next wait is an hour or so again: parked again, not left in owed/.
    assert os.listdir(store_dir / layout.OWED) == [] and where(store_dir, "bob", later) == [layout.OWED]
    clock.now += 3 * 3600
    assert ops.call(store, "redeliver", {})["dead_lettered"][0]["id"] == later
    assert where(store_dir, "bob", later) == [layout.DEAD_LETTER] and ops.call(store, "redeliver", {})["owed"] == 0


# -- the CLI, with relayd up and down -------------------------------------------------------


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_the_whole_story_from_the_command_line(relayctl, relay_env, store_dir: Path, with_daemon: bool) -> None:
    """relayctl's own commands, through relayd (its server in this process, its store on a
    clock the test moves on: each redelivery comes when the test says) or without it (the
    real clock, short waits: nothing redelivers but the test's `redeliver`)."""
    relayctl("init")
    for name in ("alice", "bob"):
        relayctl("register", name)
    clock = Clock(time.time())
    with inproc.in_a_thread(str(store_dir), relay_env["RELAY_SOCKET"], clock=clock) if with_daemon else contextlib.nullcontext() as relayd:

        def later() -> None:
            """Past the longest wait the message may have (1 s, or 10 ms, doubling: at most 8 s or 80 ms)."""
            if with_daemon:
                clock.now += 3600
            else:
                time.sleep(0.1)

        sent = relayctl("--json", "send", "bob", "must arrive", "--ack", "--ack-wait", "1s" if with_daemon else "10ms", "--max-deliver", "3", agent="alice")
        assert (relayd is not None and relayd.server.requests > 0) is with_daemon  # through relayd, or in direct mode
        message_id = json.loads(sent.stdout)["id"]
        shown = relayctl("read", "--unread", "--mark-read", agent="bob").stdout
        assert f"[attempt 1, owed: relayctl ack {message_id}]" in shown
        for attempt in (2, 3, 4):
            later()
            assert json.loads(relayctl("--json", "redeliver").stdout)["redelivered"] == [{"id": message_id, "to": "bob", "attempt": attempt, "of": 4}]
        later()
        assert [d["id"] for d in json.loads(relayctl("--json", "redeliver").stdout)["dead_lettered"]] == [message_id]
        assert "1 dead letters" in relayctl("status").stdout
        listed = relayctl("dlq", "list").stdout
        assert message_id in listed and "alice → bob" in listed and "(4 attempts)" in listed
        told = json.loads(relayctl("--json", "read", "--unread", agent="alice").stdout)
        assert [m["type"] for m in told] == ["escalation"] and message_id in told[0]["body"]

        late = relayctl("ack", message_id, agent="bob", check=False)
        assert late.returncode == 1 and late.stderr.strip() == f"error: {message_id}: too late: it is a dead letter now (relayctl dlq show ID)"
        assert "attempt 5" in relayctl("dlq", "retry", message_id).stdout
        acked = relayctl("ack", message_id, agent="bob")
        assert acked.stdout.strip().startswith(f"{message_id}: acknowledged")
        assert relayctl("ack", message_id, agent="bob").stdout.strip() == f"{message_id}: already acknowledged"

        def attempts() -> list[int]:
            return [m["attempt"] for m in json.loads(relayctl("--json", "read", "--last", "0", agent="bob").stdout) if m["id"] == message_id]

        assert attempts() == [1, 2, 3, 4, 5]
        later()
        assert json.loads(relayctl("--json", "redeliver").stdout)["redelivered"] == []
        assert attempts() == [1, 2, 3, 4, 5]  # acknowledged: nothing more comes
        assert json.loads(relayctl("--json", "status").stdout)["delivery"]["owed"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["send", "bob", "x", "--ack", "--max-deliver", "0"], "error: max-deliver must be 1-100 redeliveries, not 0"),
        (["send", "bob", "x", "--ack", "--ack-wait", "0s"], "error: ack-wait must be longer than 0, not '0s'"),
        (["send", "bob", "x", "--ack", "--ack-wait", "-5s"], "error: not a duration: '-5s' (use e.g. 30s, 5m, 1h30m, 2d)"),
        (["send", "bob", "x", "--ack-wait", "5s"], "error: --ack-wait and --max-deliver go with --ack"),
        (["ack", "nonsense"], "error: not a message id: 'nonsense' (ids are 26-character ULIDs, as 'relayctl read' shows them)"),
        (["dlq", "show", ANOTHER_ULID], f"error: no dead letter {ANOTHER_ULID}; 'relayctl dlq list' shows them"),
        (["dlq", "retry", "x"], "error: not a message id: 'x' (ids are 26-character ULIDs, as 'relayctl read' shows them)"),
    ],
)
def test_bad_input_gets_one_line_and_a_non_zero_exit(relayctl, store_dir: Path, args: list[str], message: str) -> None:
    relayctl("init")
    relayctl("register", "alice")
    relayctl("register", "bob")
    before = sorted(p.name for p in (store_dir / "agents" / "bob").iterdir())
    proc = relayctl(*args, agent="alice", check=False)
    assert proc.returncode != 0 and proc.stderr.strip() == message and proc.stdout == ""
    assert sorted(p.name for p in (store_dir / "agents" / "bob").iterdir()) == before
    assert os.listdir(store_dir / layout.OWED) == []


@pytest.mark.slow
def test_redelivery_fires_the_tmux_trigger_again_until_the_ack(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    """relayd (its server and notifier in this process, on a clock the test moves on) types a
    trigger into the pane for each delivery the agent does not acknowledge, and none after."""
    from support.recording_pane import TRIGGER, Tmux

    tmux = Tmux(short_tmp)
    clock = Clock(time.time())
    try:
        relayctl("init")
        (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
        relayctl("register", "sender")
        relayctl("register", "busy", "--notify", f"tmux:{tmux.socket}:{tmux.pane}")
        with inproc.in_a_thread(str(store_dir), relay_env["RELAY_SOCKET"], notify=True, clock=clock):
            message_id = json.loads(relayctl("--json", "send", "busy", "SECRET deploy", "--ack", "--ack-wait", "200ms", "--max-deliver", "5", agent="sender").stdout)["id"]

            def triggers() -> int:
                # Read the pane's output directly: typing a sentinel could interleave with a
                # trigger being typed at the same moment.
                return tmux.received.read_text().splitlines().count(TRIGGER)

            _until(lambda: triggers() == 1, "the first trigger")
            # The agent never reads: once its wait has passed, each sweep presents the next
            # attempt and the trigger fires again.
            for attempt in (2, 3):
                clock.now += 3600
                assert json.loads(relayctl("--json", "redeliver").stdout)["redelivered"] == [{"id": message_id, "to": "busy", "attempt": attempt, "of": 6}]
                _until(lambda: triggers() == attempt, f"the trigger for attempt {attempt}")
            relayctl("ack", message_id, agent="busy")
            clock.now += 3600
            assert json.loads(relayctl("--json", "redeliver").stdout)["redelivered"] == []  # after the ack nothing comes
            assert (copies_cli(relayctl, message_id), triggers()) == (3, 3)
            assert "SECRET" not in tmux.received.read_text()
    finally:
        tmux.close()


def copies_cli(relayctl, message_id: str) -> int:
    return sum(1 for m in json.loads(relayctl("--json", "read", "--last", "0", agent="busy").stdout) if m["id"] == message_id)


def _until(condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# -- crashes and races -------------------------------------------------------------------------


def _check_every_owed_message_in_exactly_one_state(store_dir: Path, sent: list[str]) -> Counter:
    """The checker: every id sent with ack is in exactly one state, no attempt was delivered
    twice, and every dead letter's sender was told exactly once."""
    states: Counter = Counter()
    for message_id in sent:
        found = where(store_dir, "bob", message_id)
        assert len(found) == 1, f"{message_id} is in {found}"
        states[found[0]] += 1
    with Store(str(store_dir)) as store:
        lines = [(m.id, m.attempt) for m in read_all(store, "bob").messages]
        assert len(lines) == len(set(lines)), [x for x, n in Counter(lines).items() if n > 1]
        escalations = Counter(m.body.split()[1] for m in read_all(store, "alice").messages if m.type == "escalation")
    dead = [message_id for message_id in sent if where(store_dir, "bob", message_id) == [layout.DEAD_LETTER]]
    # A sweep killed after telling the sender but before its rename leaves the record in owed/
    # with its escalation id set: dead-lettered as far as anyone can ack, finished by the next sweep.
    with Store(str(store_dir)) as store:
        halfway = [m for m in sent if (r := read_record(store, layout.OWED, f"bob.{m}.json")) is not None and r.escalation_id]
    assert set(dead) <= set(escalations) <= set(dead) | set(halfway) and set(escalations.values()) <= {1}
    return states


@pytest.mark.slow
def test_kill_9_of_relayd_and_of_direct_sweeps_leaves_every_message_in_exactly_one_state(relayctl, relay_env, store_dir: Path) -> None:
    rng = random.Random(2026)
    relayctl("init")
    for name in ("alice", "bob"):
        relayctl("register", name)
    sent = []
    for _ in range(40):
        proc = relayctl("--json", "send", "bob", "must arrive", "--ack", "--ack-wait", "30ms", "--max-deliver", "2", agent="alice")
        sent.append(json.loads(proc.stdout)["id"])
    acked = set(rng.sample(sent, 10))
    relayctl("ack", *sorted(acked), agent="bob")
    for round_ in range(12):
        victims = []
        if round_ % 2 == 0:
            victims.append(Daemon(relay_env, "--redeliver-interval", "5ms").start())
        else:
            for _ in range(3):
                victims.append(subprocess.Popen([sys.executable, "-m", "relayctl", "redeliver"], env=relay_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(rng.uniform(0.05, 0.4))
        for victim in victims:
            victim.kill() if isinstance(victim, Daemon) else (victim.send_signal(signal.SIGKILL), victim.wait())
        _check_every_owed_message_in_exactly_one_state(store_dir, sent)
    # Let everything run out: each message ends acknowledged or dead-lettered.
    deadline = time.monotonic() + 60
    while relayctl.setup("redeliver")["owed"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    states = _check_every_owed_message_in_exactly_one_state(store_dir, sent)
    assert states == Counter({layout.ACKED: 10, layout.DEAD_LETTER: 30})


class Sweeps:
    """relayd redelivering every 2 ms and direct-mode sweeps of the same store racing it."""

    SWEEPER = "import sys, time\nfrom relayd import ops\nfrom relayd.store import Store\nstore = Store(sys.argv[1])\nfor _ in range(int(sys.argv[2])):\n    ops.call(store, 'redeliver', {})\n    time.sleep(0.002)\n"

    def __init__(self, relayctl, relay_env: dict[str, str], store_dir: Path) -> None:
        self.relayctl = relayctl
        self.env = relay_env
        self.store_dir = store_dir
        self.daemon = Daemon(relay_env, "--redeliver-interval", "2ms")

    def start_relayd(self) -> None:
        self.daemon.start()

    def direct(self, processes: int, rounds: int) -> list[subprocess.Popen]:
        """Processes each running `rounds` direct-mode sweeps, 2 ms apart."""
        return [
            subprocess.Popen([sys.executable, "-c", self.SWEEPER, str(self.store_dir), str(rounds)], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(processes)
        ]

    def settle(self) -> None:
        """Wait until nothing is owed any more (each message acknowledged or dead-lettered), then stop relayd."""
        deadline = time.monotonic() + 60
        while self.relayctl.setup("status")["delivery"]["owed"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        self.daemon.kill()


@pytest.fixture
def sweeps(relayctl, relay_env: dict[str, str], store_dir: Path) -> Iterator[Sweeps]:
    """alice and bob in a fresh store, and `Sweeps` to race over it (relayd is stopped at the end)."""
    relayctl.setup("init")
    for name in ("alice", "bob"):
        relayctl.setup("register", name=name)
    racing = Sweeps(relayctl, relay_env, store_dir)
    try:
        yield racing
    finally:
        racing.daemon.kill()


@pytest.mark.slow
def test_relayd_and_direct_sweeps_racing_never_deliver_one_attempt_twice(relayctl, sweeps: Sweeps, store_dir: Path) -> None:
    sent = [json.loads(relayctl("--json", "send", "bob", "race", "--ack", "--ack-wait", "20ms", "--max-deliver", "3", agent="alice").stdout)["id"] for _ in range(30)]
    sweeps.start_relayd()
    for racer in sweeps.direct(processes=3, rounds=300):
        _, errors = racer.communicate(timeout=120)
        assert racer.returncode == 0, errors
    sweeps.settle()
    states = _check_every_owed_message_in_exactly_one_state(store_dir, sent)
    assert states == Counter({layout.DEAD_LETTER: 30})
    with Store(str(store_dir)) as store:
        assert Counter(m.id for m in read_all(store, "bob").messages) == Counter({message_id: 4 for message_id in sent})


@pytest.mark.slow
def test_sends_logging_records_while_sweeps_absorb_them_owe_each_message_once(sweeps: Sweeps, relay_env, store_dir: Path) -> None:
    """Direct-mode senders append records to the delivery log while relayd and direct sweeps
    absorb it: every message ends in exactly one state, each attempt delivered once."""
    sender = (
        "import json, sys\nfrom relayd import ops\nfrom relayd.store import Store\nstore = Store(sys.argv[1])\n"
        "ids = [ops.call(store, 'send', {'agent': 'alice', 'to': ['bob'], 'body': 'b', 'ack': True, 'ack_wait': '20ms', 'max_deliver': 2})['messages'][0]['id'] for _ in range(25)]\n"
        "print(json.dumps(ids))\n"
    )
    sweeps.start_relayd()
    racers = sweeps.direct(processes=2, rounds=200)
    senders = [subprocess.Popen([sys.executable, "-c", sender, str(store_dir)], env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    sent = []
    for proc in senders + racers:
        out, errors = proc.communicate(timeout=120)
        assert proc.returncode == 0, errors
        if proc in senders:
            sent += json.loads(out)
    sweeps.settle()
    assert len(sent) == 75
    states = _check_every_owed_message_in_exactly_one_state(store_dir, sent)
    assert states == Counter({layout.DEAD_LETTER: 75})
    with Store(str(store_dir)) as store:
        assert Counter(m.id for m in read_all(store, "bob").messages) == Counter({message_id: 3 for message_id in sent})


_KILLED_WHILE_PARKED = """
import os, signal, sys
from relayd import ops
from relayd.delivery import parked
from relayd.store import Store

point, now, message_id = sys.argv[2], float(sys.argv[3]), sys.argv[4]
real_park, real_settle = parked.park, parked.settle

def park_then_die(store, records, when):
    soon = real_park(store, records, when)
    if len(soon) < len(records):  # a record parked again: killed before its owed/ file goes
        os.kill(os.getpid(), signal.SIGKILL)
    return soon

def die_before_settling(*args):
    os.kill(os.getpid(), signal.SIGKILL)  # acked/ holds the record; its parked line stays

parked.park = park_then_die if point == "redelivery" else real_park
parked.settle = die_before_settling
with Store(sys.argv[1], clock=lambda: now, rand=lambda: 1.0) as store:
    if point == "redelivery":
        ops.call(store, "redeliver", {})
    else:
        ops.call(store, "ack", {"agent": "bob", "ids": [message_id]})
"""


@pytest.mark.parametrize("point", ["redelivery", "ack"])
def test_kill_9_between_a_parked_copy_and_its_state_file_leaves_one_state_and_no_repeat(store: Store, clock: Clock, store_dir: Path, point: str) -> None:
    """A redelivery parks the record, then removes its owed/ file; an ack writes acked/, then
    settles the parked line: SIGKILL between the two leaves the folder's state, which wins."""
    store.rand = lambda: 1.0  # every wait its full length: an hour, then two
    message_id = send_owed(store, ack_wait="1h", max_deliver=3)
    ops.call(store, "redeliver", {})  # parked for its due minute
    [first_due] = [r.due for r in parked.every(store)]
    when = first_due if point == "redelivery" else clock.now
    proc = subprocess.run([sys.executable, "-c", _KILLED_WHILE_PARKED, str(store_dir), point, repr(when), message_id], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    if point == "ack":
        assert where(store_dir, "bob", message_id) == [layout.ACKED]
        assert [r.message.id for r in parked.every(store)] == [message_id]  # the parked line the kill left
        clock.now = first_due + 10_000
        assert ops.call(store, "redeliver", {})["messages"] == []  # its minute came: the folder wins, nothing delivered
        assert ops.call(store, "status", {})["delivery"]["owed"] == 0 and os.listdir(store_dir / layout.DUE) == []
        assert copies(store, "bob", message_id) == [1]
        return
    assert copies(store, "bob", message_id) == [1, 2]
    assert where(store_dir, "bob", message_id) == [layout.OWED]  # its owed/ file (attempt 2) and a parked copy of it
    record = read_record(store, layout.OWED, f"bob.{message_id}.json")
    assert record is not None and record.attempt == 2
    clock.now = record.due - 1
    swept = ops.call(store, "redeliver", {})
    assert swept["redelivered"] == [] and copies(store, "bob", message_id) == [1, 2]  # no attempt twice
    assert swept["announced"] == []  # attempt 2's event was written with its line, under the inbox lock, before the kill
    clock.now = record.due
    assert ops.call(store, "redeliver", {})["redelivered"] == [{"id": message_id, "to": "bob", "attempt": 3, "of": 4}]
    assert ops.call(store, "ack", {"agent": "bob", "ids": [message_id]})["results"][0]["outcome"] == "acked"
    clock.now += 100_000  # every parked minute has come: nothing more
    assert ops.call(store, "redeliver", {})["messages"] == [] and ops.call(store, "redeliver", {})["owed"] == 0
    assert copies(store, "bob", message_id) == [1, 2, 3] and where(store_dir, "bob", message_id) == [layout.ACKED]
