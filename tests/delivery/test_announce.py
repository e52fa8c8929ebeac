"""No message without its announcement (relayd.delivery.announce): a line a sender stored in an
inbox but was killed before announcing is found and announced by the redelivery sweep
(direct mode) and by relayd when it starts. A killed sender is reproduced exactly: the
inbox append of a send (relayd.inbox.append.Appends) kept without the event-log append that
follows it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from relayd import ops
from relayd.inbox.append import Appends
from relayd.inbox.send import SendParams, build_messages
from relayd.store import Store
from support.relayd_proc import Daemon


@pytest.fixture
def store(store_dir: Path):
    with Store(str(store_dir), fsync=False) as opened:
        ops.call(opened, "init", {})
        for name in ("alice", "bob"):
            ops.call(opened, "register", {"name": name})
        yield opened


def send(store: Store, body: str) -> str:
    return ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": body})["messages"][0]["id"]


def killed_mid_send(store: Store, body: str) -> str:
    """The inbox append of a send, then nothing: its sender died before the event."""
    messages = build_messages(store, SendParams(agent="alice", to=["bob"], body=body))
    with Appends(store) as appends:
        appends.lock("bob")
        appends.append("bob", messages)
        appends.commit([])  # kept without its event: the sender died here
    return messages[0].id


def announced(store_dir: Path) -> list[str]:
    lines = (store_dir / "events.jsonl").read_text().splitlines()
    return [e["message_id"] for e in map(json.loads, lines) if e.get("action") == "message" and e.get("agent") == "bob"]


def test_the_sweep_announces_a_line_left_without_its_event_once(store: Store, store_dir: Path) -> None:
    first = send(store, "one")
    lost = killed_mid_send(store, "two")
    later = send(store, "three")  # the lost line is older than the log's last event
    assert announced(store_dir) == [first, later]

    swept = ops.call(store, "redeliver", {})
    assert swept["announced"] == [{"id": lost, "to": "bob"}]
    assert [m["id"] for m in swept["messages"]] == [lost]  # so a direct-mode caller notifies bob
    assert sorted(announced(store_dir)) == sorted([first, lost, later])
    assert ops.call(store, "redeliver", {})["announced"] == []  # never twice


def test_later_sweeps_read_only_what_is_new_and_still_find_a_lost_line(store: Store, store_dir: Path) -> None:
    send(store, "before")
    assert ops.call(store, "redeliver", {})["announced"] == []
    assert (store_dir / "announced.json").exists()
    lost = killed_mid_send(store, "lost")
    send(store, "after")
    assert ops.call(store, "redeliver", {})["announced"] == [{"id": lost, "to": "bob"}]
    assert ops.call(store, "redeliver", {})["announced"] == []


def test_a_send_that_commits_while_the_sweep_runs_is_not_announced_again(store: Store, store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep reads the log, then each inbox under its lock; a send committed between
    the two (relayd sending while its first sweep runs) has its line in the inbox and its
    event past what the sweep read. It was announced a second time, so subscribers got it
    twice (tests/torture, the stalled-subscriber round)."""
    from relayd.delivery import announce

    ops.call(store, "redeliver", {})
    lost = killed_mid_send(store, "lost")
    during: list[str] = []
    read_log = announce._announced_since

    def then_a_send(*args):
        seen = read_log(*args)
        during.append(send(store, "sent meanwhile"))
        return seen

    monkeypatch.setattr(announce, "_announced_since", then_a_send)
    assert ops.call(store, "redeliver", {})["announced"] == [{"id": lost, "to": "bob"}]
    assert announced(store_dir).count(during[0]) == 1
    monkeypatch.undo()
    assert ops.call(store, "redeliver", {})["announced"] == []


def test_a_damaged_marks_file_checks_back_as_far_as_the_log_goes(store: Store, store_dir: Path) -> None:
    ops.call(store, "redeliver", {})
    lost = killed_mid_send(store, "lost")
    (store_dir / "announced.json").write_text("{not json")
    assert ops.call(store, "redeliver", {})["announced"] == [{"id": lost, "to": "bob"}]


@pytest.mark.slow
def test_relayd_announces_on_start_what_a_killed_sender_left(relay_env: dict[str, str], relayctl, store_dir: Path) -> None:
    relayctl("init")
    relayctl("register", "alice")
    relayctl("register", "bob")
    relayctl("send", "bob", "first", agent="alice")
    with Store(str(store_dir)) as store:
        lost = killed_mid_send(store, "lost")
    relayctl("send", "bob", "later", agent="alice")
    daemon = Daemon(relay_env).start()
    try:
        deadline = time.monotonic() + 30
        # (relayd logs it once its sweep, in a worker thread, has returned: just after the event)
        while lost not in announced(store_dir) or "announced a message stored without its event" not in daemon.log():
            assert time.monotonic() < deadline, "relayd never announced the lost line"
            time.sleep(0.05)
        assert json.loads(relayctl("--json", "redeliver").stdout)["announced"] == []
    finally:
        daemon.kill()
    assert announced(store_dir).count(lost) == 1
