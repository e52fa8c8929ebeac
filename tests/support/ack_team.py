"""A store for the delivery tests: an injected clock, seeded jitter, and a team of `alice`,
`bob` and `leader`, the escalation agent (a test support module, not a test)."""

from __future__ import annotations

import json
import random
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from relayd import ops
from relayd.store import Store


class Clock:
    def __init__(self, start: float = 1_900_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@contextmanager
def ack_team(store_dir: Path, clock: Clock) -> Iterator[Store]:
    with Store(str(store_dir), fsync=False, clock=clock, rand=random.Random(7).random) as opened:
        ops.call(opened, "init", {})
        for name in ("alice", "bob", "leader"):
            ops.call(opened, "register", {"name": name})
        (store_dir / "config.json").write_text(json.dumps({"delivery": {"escalate_to": "leader"}}))
        yield opened
