"""At-least-once delivery: what the redelivery sweep costs, and what `--ack` and receipts add to a send.

* The sweep with 100,000 owed messages (due in an hour) among 1,000,000 stored, next to the
  same 100,000 owed among 10 stored: it reads only what was stored since its marks, lists
  due/ and stats owed/ (what is due soon), so the two should match and both be small. Also the first sweep after the sends, which absorbs their 100,000 inbox lines into owed/.
* A durable send through relayd three ways, interleaved from one persistent client: plain;
  with `ack` (its owed record is its own inbox line, which carries the redelivery terms: no
  write or fsync of its own; target within 10%); and to a recipient whose arrival mechanism
  runs (`cmd:true`), so each send also leaves an announcement receipt.
* `track` (relayd.delivery.receipts) on a store whose inbox holds 1,000,000 messages of today: the
  newest message (the usual question, right after a send) and the oldest one (the whole
  inbox is newer than it, so all of it is read).
"""

from __future__ import annotations

import os
import shutil
import sys

from relayd import layout, ops
from relayd.inbox.append import deliver
from relayd.owing import Policy, owed_line
from relayd.records import Message
from relayd.store import Store
from relayd.ulid import new_ulid

from .bench_daemon import Relayd
from .bench_store import _fill_inbox, _team
from .common import Row, median_ms, scratch_dir, time_calls

AREA = "delivery"


def _owe(store: Store, count: int) -> list[str]:
    """`count` owed messages in the inbox of `owes`, as sends with ack write them, none due for
    an hour (the steady state)."""
    policy = Policy(3600.0, 3600.0, 3)
    stamp = "2026-11-21T00:00:00.000Z"
    messages = [Message(id=new_ulid(), ts=stamp, from_="alice", to="owes", subject=f"owed {n}", body="must arrive", ack=True, attempt=1) for n in range(count)]
    deliver(store, {"owes": [owed_line(store, m, policy) for m in messages]})
    return [m.id for m in messages]


def sweep_cost(quick: bool) -> list[Row]:
    stored_big = 100_000 if quick else 1_000_000
    owed_count = 10_000 if quick else 100_000
    root = scratch_dir("rbq-")
    try:
        medians, absorbing, fresh, acking = {}, {}, {}, {}
        for stored in (10, stored_big):
            store_dir = os.path.join(root, f"store-{stored}")
            _team(store_dir, ["alice", "reader", "owes"])
            with Store(store_dir, fsync=False, rotate_bytes=1 << 40, rand=lambda: 1.0) as store:
                _fill_inbox(store, "reader", stored, 10)
                ids = _owe(store, owed_count)
                absorbing[stored] = median_ms(time_calls(lambda: ops.call(store, "redeliver", {}), 1))
                result = ops.call(store, "redeliver", {})
                assert result["owed"] == owed_count and not result["redelivered"]
                samples = time_calls(lambda: ops.call(store, "redeliver", {}), 30)  # (sub-millisecond: many samples for a steady median)
                acks = iter(ids)
                acking[stored] = median_ms(time_calls(lambda: ops.call(store, "ack", {"agent": "owes", "ids": [next(acks)]}), 5))
            with Store(store_dir, fsync=False, rotate_bytes=1 << 40) as store:  # a fresh process's first sweep (e.g. relayctl redeliver)
                fresh[stored] = median_ms(time_calls(lambda: ops.call(store, "redeliver", {}), 1))
            medians[stored] = median_ms(samples)
        ratio = medians[stored_big] / medians[10]
        big = medians[stored_big]
        note = "in-process median, none due, no fsync (the store's files are what is measured)"
        return [
            Row(AREA, f"redelivery sweep, {owed_count:,} owed among {stored_big:,} stored", round(big, 2), "ms", note=note),
            Row(AREA, f"redelivery sweep, {owed_count:,} owed among 10 stored", round(medians[10], 2), "ms", note="the same sweep on a nearly empty store"),
            Row(AREA, f"sweep ratio, {stored_big:,} vs 10 stored", round(ratio, 2), "x", "~1 (independent of stored)", ratio <= 1.3 if not quick else None),
            Row(AREA, f"first sweep after {owed_count:,} sends --ack (absorbs their inbox lines, parks them by due minute)", round(absorbing[stored_big], 1), "ms", note="once; later sweeps absorb only what was stored since"),
            Row(AREA, f"redelivery sweep of a fresh process, {owed_count:,} owed", round(fresh[stored_big], 1), "ms", note="counts the parked records once (a running sweeper keeps the counts per file)"),
            Row(AREA, f"ack of one of {owed_count:,} parked records", round(acking[stored_big], 2), "ms", note="in-process median of 5; searches the parked files for the id, appends a settling line"),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ack_send_cost(quick: bool) -> list[Row]:
    from relayd.client.full import Client

    count = 300 if quick else 3000
    daemon = Relayd()
    try:
        with Client(daemon.store, daemon.socket) as client:
            client.call("version")
            client.call("register", {"name": "watched", "notify": "cmd:true"})
            plain = {"agent": "storm", "to": ["inferno"], "body": "benchmark message"}
            kinds = {
                "plain": plain,
                "ack": dict(plain, ack=True, ack_wait="1h"),
                "receipts": dict(plain, to=["watched"]),
            }
            # Interleaved call by call, so all see the same machine load (on a shared machine it
            # changes within a second); the order turns each time, so each kind follows each
            # other kind (and the command cmd:true leaves running) equally often.
            samples: dict[str, list[float]] = {kind: [] for kind in kinds}
            order = list(kinds)
            for n in range(count):
                for kind in order[n % 3 :] + order[: n % 3]:
                    samples[kind] += time_calls(lambda p=kinds[kind]: client.call("send", p), 1)
            assert client.mode == "daemon"
            owed_now = client.call("status")["delivery"]["owed"]
            assert owed_now == count, f"status counted {owed_now} owed for {count} --ack sends"
    finally:
        daemon.close()
    median = {kind: median_ms(times) for kind, times in samples.items()}
    ratio = median["ack"] / median["plain"]
    receipts_ratio = median["receipts"] / median["plain"]
    note = f"{count} sequential durable sends each, one persistent client, interleaved call by call"
    return [
        Row(AREA, "send through relayd, no ack: median", round(median["plain"], 3), "ms", note=note),
        Row(AREA, "send through relayd, --ack: median", round(median["ack"], 3), "ms", note="the owed record is the inbox line itself: no extra write or fsync"),
        Row(AREA, "send through relayd, recipient announced by cmd:true: median", round(median["receipts"], 3), "ms", note="relayd runs the command and logs a receipt after the reply"),
        Row(AREA, "send --ack vs without", round(ratio, 2), "x", "<= 1.10", ratio <= 1.10 if not quick else None),
        Row(AREA, "send with an announcement receipt vs without", round(receipts_ratio, 2), "x", note="no fsync for receipts; the command's process is the cost"),
    ]


def track_cost(quick: bool) -> list[Row]:
    from relayd.fsio import append_lines
    from relayd.records import json_encoder
    from relayd.timefmt import now_iso

    total = 100_000 if quick else 1_000_000
    root = scratch_dir("rbt-")
    try:
        store_dir = os.path.join(root, "store")
        _team(store_dir, ["alice", "reader", "owes"])
        stamp = now_iso()
        ids = [new_ulid() for _ in range(total)]
        with Store(store_dir, fsync=False, rotate_bytes=1 << 40) as store:
            payload = b"".join(
                json_encoder.encode(Message(id=i, ts=stamp, from_="alice", to="reader", subject=f"message {n}", body=f"message {n} of {total}")) + b"\n" for n, i in enumerate(ids)
            )
            with store.agent_dir("reader") as agent, agent.locked(layout.INBOX_LOCK):
                fd = agent.open(layout.INBOX, os.O_RDWR | os.O_APPEND | os.O_CREAT)
                try:
                    append_lines(fd, payload, "bench inbox")
                finally:
                    os.close(fd)
            newest = median_ms(time_calls(lambda: ops.call(store, "track", {"id": ids[-1]}), 30))
            oldest = median_ms(time_calls(lambda: ops.call(store, "track", {"id": ids[0]}), 3))
            assert ops.call(store, "track", {"id": ids[0]})["recipients"][0]["to"] == "reader"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    note = f"in-process median, {total:,} messages of today in one inbox, 3 agents"
    return [
        Row(AREA, f"track, newest of {total:,} messages", round(newest, 3), "ms", note=note),
        Row(AREA, f"track, oldest of {total:,} messages (reads the whole inbox)", round(oldest, 1), "ms", note=note),
    ]


def run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    for bench in (sweep_cost, ack_send_cost, track_cost):
        print(f"  {bench.__name__} ...", file=sys.stderr, flush=True)
        rows.extend(bench(quick))
    return rows
