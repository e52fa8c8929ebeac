"""An IGNITE queue directory and a team that serves it, shared by the queue's tests: the
fixtures `team` and `queue` (import them by name into a test module), files dropped the way
IGNITE's agents write them, a monitor on an injected clock, and an agent's inbox as dicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relayd.client.full import Client
from relayd.ignite.queue import QueueMonitor, monitor_for
from relayd.inbox.read import read_all

from .recording_pane import TRIGGER

START = 1_800_000_000.0
TIMEOUT = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def team(relayctl, store_dir: Path) -> None:
    relayctl.setup("init", preset="ignite", workers=2)
    config = json.loads((store_dir / "config.json").read_text())
    config["delivery"].update({"ack_wait": "10s", "cap": "300s", "max_deliver": 3})
    config["notify"] = {"trigger": TRIGGER}
    (store_dir / "config.json").write_text(json.dumps(config))


@pytest.fixture
def queue(short_tmp: Path) -> Path:
    root = short_tmp / "workspace" / "queue"
    for agent in ("leader", "coordinator", "ignitian_1", "ignitian_2"):
        (root / agent / "processed").mkdir(parents=True)
    return root


def drop(relayctl, queue: Path, agent: str, name: str, body: str = 'task_id: "task_001"\ntitle: "Write the parser"\n', **flags: str) -> Path:
    """A file written the way IGNITE agents write them: build -o into the agent's queue."""
    path = queue / agent / name
    args = ["mime", "build", "--from", flags.get("sender", "coordinator"), "--to", agent, "--type", name.rsplit("_", 1)[0], "--priority", flags.get("priority", "high"), "--body", body, "-o", str(path)]
    relayctl(*args)
    return path


def make_monitor(relay_env: dict[str, str], queue: Path, clock: Clock, client: Client | None = None) -> QueueMonitor:
    client = client or Client(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"])
    monitor = monitor_for(client, str(queue), timeout=TIMEOUT)
    monitor.clock = clock
    monitor.rand = lambda: 0.5
    return monitor


def inbox(relay_env: dict[str, str], agent: str) -> list[dict]:
    with Client(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"]) as client:
        return [dict(id=m.id, to=m.to, tags=m.tags, subject=m.subject, body=m.body, type=m.type, priority=m.priority, from_=m.from_) for m in read_all(client.store(), agent).messages]
