"""Many processes appending to one inbox at once, the way a team of agents does."""

from __future__ import annotations

import msgspec
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from relayd.inbox.read import read_all
from relayd import ops
from relayd.records import message_decoder
from relayd.store import Store
from support.paths import SUPPORT

WRITER = str(SUPPORT / "store_writer.py")
PROCESSES = 20
SENDS = 1000


@pytest.mark.slow
def test_twenty_processes_thousand_sends_each_into_one_inbox(store_dir: Path) -> None:
    senders = [f"writer-{n:02d}" for n in range(PROCESSES)]
    with Store(str(store_dir)) as store:
        for name in ["inbox-owner", *senders]:
            ops.call(store, "register", {"name": name})

    # Durable sends (fsync on, the default), all processes started before any finishes.
    procs = [
        subprocess.Popen(
            [sys.executable, WRITER, str(store_dir), name, "inbox-owner", str(SENDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in senders
    ]
    acknowledged: dict[str, list[str]] = {}
    for name, proc in zip(senders, procs):
        out, err = proc.communicate(timeout=100)
        assert proc.returncode == 0, err
        acknowledged[name] = [line.split()[0] for line in out.splitlines()]
        assert len(acknowledged[name]) == SENDS

    with Store(str(store_dir)) as store:
        result = msgspec.to_builtins(read_all(store, "inbox-owner"))
    messages = result["messages"]
    assert result["corrupt"] == []
    assert len(messages) == PROCESSES * SENDS
    ids = [m["id"] for m in messages]
    assert len(set(ids)) == len(ids), "duplicate message ids"

    seen: dict[str, list[int]] = defaultdict(list)
    seen_ids: dict[str, list[str]] = defaultdict(list)
    for m in messages:
        sender, seq, _ = m["body"].split(" ", 2)
        assert m["from"] == sender
        seen[sender].append(int(seq))
        seen_ids[sender].append(m["id"])
    for name in senders:
        assert seen[name] == list(range(SENDS)), f"{name}'s messages are missing or out of order"
        assert seen_ids[name] == acknowledged[name]

    # Every line on disk is one complete record: nothing glued or torn.
    raw = (store_dir / "agents" / "inbox-owner" / "inbox.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert len(lines) == PROCESSES * SENDS
    for line in lines:
        message_decoder.decode(line)
    assert os.stat(store_dir / "agents" / "inbox-owner" / "inbox.jsonl").st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_a_reader_marking_read_while_writers_rotate_sees_each_message_at_most_once_in_order(store_dir: Path) -> None:
    """Rotation and mark-read race under the inbox lock: the reader must never get a message
    twice, out of its sender's order, or corrupt."""
    senders = [f"rot-{n}" for n in range(4)]
    with Store(str(store_dir)) as store:
        for name in ["reader", *senders]:
            ops.call(store, "register", {"name": name})
    procs = [
        subprocess.Popen(
            [sys.executable, WRITER, str(store_dir), name, "reader", "600", "200", str(2048)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in senders
    ]
    delivered: list[dict] = []
    with Store(str(store_dir)) as store:
        while any(proc.poll() is None for proc in procs):
            result = ops.call(store, "read", {"agent": "reader", "unread": True, "last": 7, "mark_read": True})
            assert result["corrupt"] == []
            delivered += result["messages"]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
        while batch := ops.call(store, "read", {"agent": "reader", "unread": True, "last": 0, "mark_read": True})["messages"]:
            delivered += batch
    ids = [m["id"] for m in delivered]
    assert len(ids) == len(set(ids)), "a message was delivered twice"
    last_seq: dict[str, int] = {}
    for m in delivered:
        sender, seq, _ = m["body"].split(" ", 2)
        assert int(seq) > last_seq.get(sender, -1), f"{sender}'s messages arrived out of order"
        last_seq[sender] = int(seq)
    assert (store_dir / "agents" / "reader" / "inbox.jsonl.1").exists(), "the inbox never rotated"
    # How much a lagging reader loses to rotation depends on the machine's load; that it
    # loses only whole, older messages is what the checks above hold.
    assert delivered
