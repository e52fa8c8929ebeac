"""A host's share of this host's disk (relayd.bridge.budget), in memory with an injected
clock: the hourly budget per sending host, the bounded record of refused mail, and what the
receiver does with a batch that passes a budget. `test_bridge_disk.py` floods a real
receiving relayd on a 48 MiB tmpfs over a real nats-server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import anyio
import pytest

from support.ack_team import Clock, ack_team
from relayd import layout
from relayd.bridge.budget import HOUR, Budget
from relayd.config import BudgetConfig
from relayd.inbox.read import read_all
from relayd.records import Message, json_encoder
from relayd.store import Store
from relayd.ulid import new_ulid

START = 1_900_000_000.0 // HOUR * HOUR + 10  # ten seconds into an hour


def test_a_host_gets_its_messages_per_hour_then_waits_for_the_next_hour() -> None:
    clock = Clock(START)
    budget = Budget(BudgetConfig(messages_per_hour=3), clock)
    assert [budget.take("evil", 100) for _ in range(5)] == [True, True, True, False, False]
    assert budget.take("alpha", 100)  # every host has its own
    assert budget.wait() == HOUR - 10
    clock.now += HOUR - 10 - 0.5
    assert not budget.take("evil", 100) and budget.wait() == 1.0  # never a busy loop of redeliveries
    clock.now += 0.5  # the next hour
    assert budget.take("evil", 100)
    shown = budget.status()["evil"]
    assert shown["this_hour"]["messages"] == 1 and shown["stored"] == 4 and shown["held"] == 3


def test_a_host_gets_its_bytes_per_hour() -> None:
    budget = Budget(BudgetConfig(mib_per_hour=1), Clock(START))
    assert [budget.take("evil", 300 << 10) for _ in range(3)] == [True, True, True]
    budget.refund("evil", 300 << 10)  # an append that failed gives its share back
    assert budget.take("evil", 300 << 10) and not budget.take("evil", 300 << 10)
    # A small one would fit, but waits behind the held one: a host's mail keeps its order.
    assert not budget.take("evil", 1 << 10)
    assert budget.status()["evil"] | {"this_hour": None} == {"this_hour": None, "stored": 3, "stored_bytes": 3 * (300 << 10), "held": 2, "refused": 0, "refused_unrecorded": 0}


def test_refusal_records_per_host_per_hour_the_rest_counted() -> None:
    clock = Clock(START)
    budget = Budget(BudgetConfig(refusals_per_hour=2), clock)
    assert [budget.refusal("evil") for _ in range(4)] == [True, True, False, False]
    assert budget.refusal("alpha")
    assert budget.first("evil", "refused") and not budget.first("evil", "refused")
    clock.now += HOUR
    assert budget.refusal("evil") and budget.first("evil", "refused")
    assert budget.status()["evil"] | {"this_hour": None} == {"this_hour": None, "stored": 0, "stored_bytes": 0, "held": 0, "refused": 5, "refused_unrecorded": 2}


class Mail:
    """A JetStream message as the receiver sees it, and what the receiver answered."""

    def __init__(self, sender_host: str, data: bytes) -> None:
        self.subject = f"relay.mail.here.{sender_host}"
        self.data = data
        self.answer: str | None = None
        self.delay: float | None = None

    async def ack(self) -> None:
        self.answer = "ack"

    async def nak(self, delay: float | None = None) -> None:
        self.answer, self.delay = "nak", delay


@pytest.fixture
def store(store_dir: Path) -> Iterator[Store]:
    with ack_team(store_dir, Clock()) as opened:
        yield opened


def receiver(store: Store, budget: Budget):
    from relayd.bridge.receiver import Receiver

    async def durable() -> None:
        pass

    async def sender_host(name: str) -> str | None:
        return {"mallory": "evil", "carol": "good"}.get(name)

    return Receiver(store, "here", durable, sender_host, budget)


def mail(sender: str, host: str, body: str = "hi") -> Mail:
    return Mail(host, json_encoder.encode(Message(id=new_ulid(), ts="2030-03-17T17:46:40.000Z", from_=sender, to="bob", subject="s", body=body)))


def test_the_receiver_stores_a_hosts_budget_and_leaves_the_rest_in_jetstream(store: Store) -> None:
    clock = Clock(START)
    got = receiver(store, Budget(BudgetConfig(messages_per_hour=2), clock))
    batch = [mail("mallory", "evil", f"e{n}") for n in range(5)] + [mail("carol", "good", "from a good host")]
    anyio.run(got.deliver, batch)
    assert [m.body for m in read_all(store, "bob").messages] == ["e0", "e1", "from a good host"]
    assert [m.answer for m in batch] == ["ack", "ack", "nak", "nak", "nak", "ack"]
    assert {m.delay for m in batch[2:5]} == {HOUR - 10}  # redelivered by JetStream when the next hour starts
    clock.now += HOUR - 10
    anyio.run(got.deliver, batch[2:5])  # JetStream's redelivery
    assert [m.body for m in read_all(store, "bob").messages][-2:] == ["e2", "e3"]
    assert got.budget.status()["evil"]["held"] == 4 and got.delivered == 5


def undeliverable(store: Store) -> list[Path]:
    folder = Path(store.root) / layout.BRIDGE
    return [folder / name for name in (layout.UNDELIVERABLE_ROTATED, layout.UNDELIVERABLE) if (folder / name).exists()]


def test_refused_mail_is_a_bounded_rotated_record_counted_per_host(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from relayd.bridge import receiver as module

    monkeypatch.setattr(module, "UNDELIVERABLE_ROTATE_BYTES", 64 << 10)
    got = receiver(store, Budget(BudgetConfig(refusals_per_hour=100), Clock(START)))
    junk = [Mail("evil", json.dumps({"id": "not-a-ulid", "body": "x" * 3000}).encode()) for _ in range(150)]
    for n in range(0, len(junk), 25):
        anyio.run(got.deliver, junk[n : n + 25])
    anyio.run(got.deliver, [Mail("good", b"not json")])
    assert all(m.answer == "ack" for m in junk)  # refused mail is not redelivered forever
    files = undeliverable(store)
    assert len(files) == 2 and all(f.stat().st_size <= (64 << 10) + 25 * 5000 for f in files)
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert records[-1]["host"] == "good"  # the other host's refusal is recorded though evil used its share
    shown = got.budget.status()
    assert (shown["evil"]["refused"], shown["evil"]["refused_unrecorded"], shown["good"]["refused"]) == (150, 50, 1)
    assert got.refused == 151
