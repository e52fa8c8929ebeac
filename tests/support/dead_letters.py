"""Dead letters longer than one protocol line, made on a store directly with an injected
clock: what the long-reply tests of relayctl, relay's client and the web view list."""

from __future__ import annotations

import random
from pathlib import Path

from relayd import ops
from relayd.store import Store

from .ack_team import Clock

BODY = 250_000  # bytes per dead letter: five of them are more than one line holds


def dead_letters(store_dir: Path, count: int) -> list[str]:
    """`count` messages of BODY bytes sent with --ack, never acknowledged, dead-lettered."""
    clock = Clock()
    with Store(str(store_dir), fsync=False, clock=clock, rand=random.Random(3).random) as store:
        ops.call(store, "init", {})
        for name in ("alice", "bob"):
            ops.call(store, "register", {"name": name})
        sent = []
        for n in range(count):
            body = f"{n}:" + "é" * (BODY // 4) + '"\\' * (BODY // 4)  # multi-byte and escaped characters
            params = {"agent": "alice", "to": ["bob"], "body": body, "ack": True, "max_deliver": 1, "ack_wait": "1s"}
            sent.append(ops.call(store, "send", params)["messages"][0]["id"])
        for _ in range(2):  # one redelivery, then the dead letter
            clock.now += 60
            swept = ops.call(store, "redeliver", {})
        assert sorted(d["id"] for d in swept["dead_lettered"]) == sorted(sent)
    return sent
