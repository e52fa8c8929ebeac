"""Many processes appending to one inbox at once, the way a team of agents does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from relayd import ops
from relayd.records import message_decoder
from relayd.store import Store

WRITER = str(Path(__file__).with_name("store_writer.py"))
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
        result = ops.call(store, "read", {"agent": "inbox-owner", "last": 0})
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
