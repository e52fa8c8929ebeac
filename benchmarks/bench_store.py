"""The store in direct mode (no daemon): send cost, many writers, read scaling.

Rows:
* in-process `send` (fsync on), median and p99;
* 20 processes x 1000 sends into one inbox, fsync on and off (timed from a common start
  signal after every process has imported, so interpreter start-up is not counted);
* `read --unread` of the same 10 unread messages in an inbox of 10 and of 1,000,000.
"""

from __future__ import annotations

import msgspec
import os
import shutil
import subprocess
import sys
import time

from relayd.inbox.read import read_all
from relayd import layout, ops
from relayd.fsio import append_lines
from relayd.records import Cursor, Message, json_encoder
from relayd.store import Store
from relayd.ulid import new_ulid

from .common import PYTHON, Row, child_env, median_ms, p99_ms, scratch_dir, time_calls

AREA = "store"

# Each writer imports, says it is ready, waits for the go line on stdin, then sends.
WRITER = """
import sys
from relayd import ops
from relayd.store import Store
store_dir, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store(store_dir, rotate_bytes=1 << 40)
print("ready", flush=True)
sys.stdin.readline()
for n in range(count):
    ops.call(store, "send", {"agent": name, "to": ["sink"], "body": f"{name} {n}"})
"""


def _team(store_dir: str, names: list[str], fsync: bool = False) -> None:
    with Store(store_dir, fsync=fsync) as store:
        for name in names:
            ops.call(store, "register", {"name": name})


def bench_send_in_process(quick: bool) -> list[Row]:
    root = scratch_dir()
    try:
        store_dir = os.path.join(root, "store")
        _team(store_dir, ["alice", "bob"])
        with Store(store_dir, fsync=True) as store:
            params = {"agent": "alice", "to": ["bob"], "body": "Bead bd-42 complete. All tests pass."}
            samples = time_calls(lambda: ops.call(store, "send", params), 300 if quick else 3000)
            # What relayctl sends: with a client-chosen id, checked against the inbox's tail.
            with_id = time_calls(lambda: ops.call(store, "send", dict(params, id=new_ulid())), 300 if quick else 3000)
        return [
            Row(AREA, "direct send in-process, durable: median", round(median_ms(samples), 3), "ms", note="fsync of inbox and event log per send; no daemon"),
            Row(AREA, "direct send in-process, durable: p99", round(p99_ms(samples), 3), "ms"),
            Row(AREA, "direct send in-process with an id (dedup check), durable: median", round(median_ms(with_id), 3), "ms", note="the inbox tail back to the id's time is scanned"),
            Row(AREA, "direct send in-process with an id (dedup check), durable: p99", round(p99_ms(with_id), 3), "ms"),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _many_writers(processes: int, sends: int, fsync: bool) -> tuple[float, int, int]:
    root = scratch_dir()
    try:
        store_dir = os.path.join(root, "store")
        names = [f"w{n:02d}" for n in range(processes)]
        _team(store_dir, ["sink", *names])
        env = child_env(store_dir, RELAY_FSYNC="1" if fsync else "0")
        procs = [
            subprocess.Popen([PYTHON, "-c", WRITER, store_dir, name, str(sends)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for name in names
        ]
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            if proc.wait(timeout=600) != 0:
                raise RuntimeError("a writer failed")
        elapsed = time.perf_counter() - start
        with Store(store_dir) as store:
            result = msgspec.to_builtins(read_all(store, "sink"))
        ids = {m["id"] for m in result["messages"]}
        lost = processes * sends - len(ids)
        return elapsed, lost, len(result["corrupt"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_many_writers(quick: bool) -> list[Row]:
    processes, sends = 20, (100 if quick else 1000)
    rows = []
    for fsync in (True, False):
        elapsed, lost, corrupt = _many_writers(processes, sends, fsync)
        label = "durable" if fsync else "fsync off (RELAY_FSYNC=0)"
        rows.append(
            Row(
                AREA,
                f"{processes} processes x {sends} direct sends, one inbox, {label}",
                round(elapsed, 2),
                "s",
                target="<= 1 s, 0 lost, 0 corrupt" if fsync and not quick else "",
                ok=(elapsed <= 1.0 and lost == 0 and corrupt == 0) if fsync and not quick else None,
                note=f"{lost} lost, {corrupt} corrupt; timed from a common start after import; no daemon (no group commit)",
            )
        )
    return rows


def _fill_inbox(store: Store, name: str, total: int, unread: int) -> None:
    """`total` messages written as one append with fsync off; the cursor left before the last `unread`."""
    stamp = "2026-11-21T00:00:00.000Z"
    lines = [
        json_encoder.encode(Message(id=new_ulid(), ts=stamp, from_="alice", to=name, subject=f"message {n}", body=f"message {n} of {total}")) + b"\n"
        for n in range(total)
    ]
    read_bytes = sum(len(line) for line in lines[: total - unread])
    with store.agent_dir(name) as agent, agent.locked(layout.INBOX_LOCK):
        fd = agent.open(layout.INBOX, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            append_lines(fd, b"".join(lines), "bench inbox")
            ino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        cursor = Cursor(offset=read_bytes, ino=ino) if read_bytes else Cursor()
        agent.replace(layout.CURSOR, json_encoder.encode(cursor) + b"\n", None)


def bench_read_scaling(quick: bool) -> list[Row]:
    big = 100_000 if quick else 1_000_000
    root = scratch_dir()
    try:
        medians = {}
        for total in (10, big):
            store_dir = os.path.join(root, f"store-{total}")
            _team(store_dir, ["alice", "reader"])
            with Store(store_dir, fsync=False, rotate_bytes=1 << 40) as store:
                _fill_inbox(store, "reader", total, 10)
                size = os.path.getsize(os.path.join(store_dir, layout.AGENTS, "reader", layout.INBOX))
                params = {"agent": "reader", "unread": True, "last": 20}
                assert len(ops.call(store, "read", params)["messages"]) == 10
                samples = time_calls(lambda: ops.call(store, "read", params), 200 if quick else 1000)
            medians[total] = (median_ms(samples), size)
        ratio = medians[big][0] / medians[10][0]
        return [
            Row(AREA, "read --unread (10 unread), inbox of 10", round(medians[10][0], 3), "ms", note="in-process median"),
            Row(AREA, f"read --unread (10 unread), inbox of {big:,}", round(medians[big][0], 3), "ms", note=f"{medians[big][1] / 2**20:.0f} MiB inbox written as one append with fsync off, rotation disabled"),
            Row(AREA, f"read --unread ratio, {big:,} vs 10", round(ratio, 2), "x", target="<= 1.5", ok=ratio <= 1.5 if not quick else None),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    for bench in (bench_send_in_process, bench_many_writers, bench_read_scaling):
        print(f"  {bench.__name__} ...", file=sys.stderr, flush=True)
        rows.extend(bench(quick))
    return rows
