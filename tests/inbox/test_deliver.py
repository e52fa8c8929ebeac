"""Every writer emits its arrival while it holds the inbox lock (relayd.inbox.append.deliver).

relayd publishes an arrival from the event log; a follower woken by it reads the inbox. If a
writer emitted after releasing the lock, a reader could see the event before the line is
there, or (killed in between) a line could stay without its event. The check is made at the
moment each arrival is emitted: another open file description of the recipient's
`inbox.lock` must fail to take the lock, because the writer still holds it. Each writer is
driven in-process on a real store: send, a batch of sends, the redelivery sweep, an
escalation to the dead-letter agent, `dlq retry`, a bounce, the bridge receiver, and an
IGNITE file, which arrives as a send.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Iterator

import anyio
import msgspec
import pytest

from support.ack_team import Clock, ack_team
from relayd import layout, ops
from relayd.delivery.receipts import announced
from relayd.inbox.read import read_all
from relayd.records import Event, Message, json_encoder
from relayd.store import Store
from relayd.ulid import new_ulid


class Arrivals:
    """Wraps a store's `emit`: for each arrival, whether its inbox was locked at that moment."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.seen: list[tuple[str, str, bool]] = []  # (recipient, message id, inbox locked)
        self.emit = store.emit
        store.emit = self  # type: ignore[method-assign]

    def __call__(self, *events: Event, durable: bool = True) -> None:
        for event in events:
            if event.topic == "inbox" and event.action == "message":
                self.seen.append((event.agent, event.message_id, self._locked(event.agent)))  # type: ignore[arg-type]
        self.emit(*events, durable=durable)

    def _locked(self, agent: str) -> bool:
        fd = os.open(os.path.join(self.store.root, layout.AGENTS, agent, layout.INBOX_LOCK), os.O_RDONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def take(self) -> list[tuple[str, str, bool]]:
        seen, self.seen = self.seen, []
        return seen


@pytest.fixture
def store(store_dir: Path) -> Iterator[Store]:
    with ack_team(store_dir, Clock()) as opened:  # the clock is moved through store.clock
        yield opened


@pytest.fixture
def arrivals(store: Store) -> Arrivals:
    return Arrivals(store)


def test_a_send_and_a_batch_of_sends(store: Store, arrivals: Arrivals) -> None:
    sent = ops.call(store, "send", {"agent": "alice", "to": ["bob", "leader"], "body": "hi"})["messages"]
    assert arrivals.take() == [(m["to"], m["id"], True) for m in sent]
    op = ops.lookup("send")
    batch = ops.run_batch(store, op, [ops.decode_params(op, {"agent": "alice", "to": ["bob"], "body": str(n)}) for n in range(3)])
    assert arrivals.take() == [("bob", r.messages[0].id, True) for r in batch]


def test_a_redelivery_an_escalation_and_a_dlq_retry(store: Store, arrivals: Arrivals) -> None:
    [m] = ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "owed", "ack": True, "ack_wait": "1s", "max_deliver": 1})["messages"]
    arrivals.take()
    store.clock.now += 3600  # type: ignore[attr-defined]
    assert ops.call(store, "redeliver", {})["redelivered"] == [{"id": m["id"], "to": "bob", "attempt": 2, "of": 2}]
    assert arrivals.take() == [("bob", m["id"], True)]
    store.clock.now += 3600  # type: ignore[attr-defined]
    swept = ops.call(store, "redeliver", {})
    escalations = [(e["to"], e["id"], True) for e in swept["messages"]]
    assert swept["dead_lettered"] and sorted(to for to, _, _ in escalations) == ["alice", "leader"]  # the sender and the escalation agent
    assert arrivals.take() == escalations
    ops.call(store, "dlq_retry", {"id": m["id"]})
    assert arrivals.take() == [("bob", m["id"], True)]


def test_a_bounce(store: Store, arrivals: Arrivals) -> None:
    ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "unread"})
    arrivals.take()
    announced(store, [{"agent": "bob", "method": "tmux", "ok": False, "error": "no such pane"}])
    [bounce] = [m for m in read_all(store, "alice").messages if "bounce" in m.tags]
    assert arrivals.take() == [("alice", bounce.id, True)]


class _Mail:
    """A JetStream message as the receiver sees it: subject, data, ack."""

    def __init__(self, sender_host: str, message: Message) -> None:
        self.subject = f"relay.mail.here.{sender_host}"
        self.data = json_encoder.encode(message)
        self.acked = False

    async def ack(self) -> None:
        self.acked = True

    async def nak(self, delay: float = 0) -> None:
        raise AssertionError("the receiver refused the batch")


def test_the_bridge_receiver(store: Store, arrivals: Arrivals) -> None:
    from relayd.bridge.receiver import Receiver

    async def durable() -> None:
        pass

    async def sender_host(name: str) -> str | None:
        return "there" if name == "carol" else None

    mail = [Message(id=new_ulid(), ts="2030-03-17T17:46:40.000Z", from_="carol", to=to, subject="from afar", body="hello") for to in ("bob", "leader")]
    batch = [_Mail("there", m) for m in mail]
    anyio.run(Receiver(store, "here", durable, sender_host).deliver, batch)
    assert all(b.acked for b in batch)
    assert arrivals.take() == [(m.to, m.id, True) for m in mail]


def test_an_ignite_file(store: Store, arrivals: Arrivals, short_tmp: Path) -> None:
    from relayd.ignite import mime
    from relayd.ignite.queue import QueueMonitor
    from relayd.owing import Policy

    queue = short_tmp / "queue"
    (queue / "bob" / "processed").mkdir(parents=True)
    mime.write_atomic(str(queue / "bob" / "task_assignment_1770263544123456.mime"), mime.build(from_="alice", to=["bob"], type_="task_assignment", body="title: a file\n"))
    monitor = QueueMonitor(
        str(queue),
        send=lambda params: ops.call(store, "send", params),
        is_agent=store.is_agent,
        inbox=lambda name: [msgspec.to_builtins(m) for m in read_all(store, name).messages],
        policy=Policy(60.0, 60.0, 1),
        clock=lambda: store.clock() + 3600,  # long after the file was written: it is settled
    )
    assert monitor.run_once().delivered
    [m] = read_all(store, "bob").messages
    assert arrivals.take() == [("bob", m.id, True)]
