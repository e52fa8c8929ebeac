"""Writers killed with SIGKILL in the middle of appending (DESIGN §2 crash rules)."""

from __future__ import annotations

import msgspec
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relayd.inbox.read import read_all
from relayd import ops
from relayd.records import message_decoder
from relayd.store import Store
from support.paths import SUPPORT

WRITER = str(SUPPORT / "store_writer.py")
ROUNDS = 6
WRITERS = 3


def _acknowledged(output: str) -> list[str]:
    """Ids the writer printed; a line cut short by the kill is not an acknowledgement."""
    lines = output.split("\n")
    complete = lines[:-1]  # the last element follows the final newline (or is a torn print)
    return [line.split()[0] for line in complete if len(line.split()) == 2]


@pytest.mark.slow
def test_sigkilled_writers_lose_no_acknowledged_send_and_leave_no_corrupt_record(store_dir: Path) -> None:
    rng = random.Random(20261121)
    senders = [f"killed-{n}" for n in range(WRITERS)]
    with Store(str(store_dir)) as store:
        for name in ["target", *senders]:
            ops.call(store, "register", {"name": name})
    inbox = store_dir / "agents" / "target" / "inbox.jsonl"

    acknowledged: list[str] = []
    torn_tails = 0
    for _ in range(ROUNDS):
        # Large bodies make each append a long write() that SIGKILL can cut short.
        procs = [
            subprocess.Popen(
                [sys.executable, WRITER, str(store_dir), name, "target", "0", str(rng.choice([64, 4_000, 100_000]))],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for name in senders
        ]
        # Each writer has a send through before the kills (on a loaded machine an interpreter
        # can take longer to start than any fixed pause), then runs on for a random while.
        first = [proc.stdout.readline() for proc in procs]
        time.sleep(rng.uniform(0, 0.3))
        for proc in rng.sample(procs, len(procs)):
            time.sleep(rng.uniform(0, 0.05))
            proc.send_signal(signal.SIGKILL)
        for proc, line in zip(procs, first):
            # The rest through the same text stream that readline() used: communicate() with a
            # timeout reads the pipe's descriptor itself and loses what readline() had buffered
            # past the first line, so the output it returned could begin in the middle of an id.
            assert proc.wait(timeout=30) == -signal.SIGKILL
            acknowledged += _acknowledged(line + proc.stdout.read())
            proc.stdout.close()
        if inbox.stat().st_size and not inbox.read_bytes().endswith(b"\n"):
            torn_tails += 1

        with Store(str(store_dir)) as store:
            result = msgspec.to_builtins(read_all(store, "target"))
        assert result["corrupt"] == [], "read reported a corrupt record"
        read_ids = [m["id"] for m in result["messages"]]
        assert len(read_ids) == len(set(read_ids))
        missing = set(acknowledged) - set(read_ids)
        assert not missing, f"{len(missing)} acknowledged sends are not readable"
        for m in result["messages"]:
            sender, seq, _ = m["body"].split(" ", 2)
            assert m["from"] == sender and seq.isdigit()

    assert acknowledged, "the writers never got a send through; the test proved nothing"

    # Plant a torn tail for certain (whether or not a kill produced one), then append
    # (rotation off, as in the writers, so the append lands in this very file).
    with open(inbox, "ab") as fh:
        fh.write(b'{"id":"01TORN","ts":"2026-')
    with Store(str(store_dir), rotate_bytes=1 << 40) as store:
        before = msgspec.to_builtins(read_all(store, "target"))["messages"]
        sent = ops.call(store, "send", {"agent": senders[0], "to": ["target"], "body": "after the crash"})
        after = msgspec.to_builtins(read_all(store, "target"))
    assert not (store_dir / "agents" / "target" / "inbox.jsonl.1").exists()
    raw = inbox.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    for line in lines:
        message_decoder.decode(line)  # no half record glued to the new one
    assert after["corrupt"] == []
    assert [m["id"] for m in after["messages"]] == [m["id"] for m in before] + [sent["messages"][0]["id"]]
    # How often a kill tore a write is the kernel's business; record it for the curious.
    print(f"torn tails left by SIGKILL: {torn_tails} of {ROUNDS} rounds; acknowledged sends: {len(acknowledged)}; inbox {inbox.stat().st_size >> 20} MiB")


def test_rotation_cut_short_after_its_rename_loses_no_unread_mail(store_dir: Path) -> None:
    """Rotation is a rename and then a cursor update; a crash between the two must not
    turn the unread mail of the rotated file into read mail."""
    bob = store_dir / "agents" / "bob"
    with Store(str(store_dir)) as store:
        for name in ("alice", "bob"):
            ops.call(store, "register", {"name": name})
        sent = [ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": f"m{n}"})["messages"][0]["id"] for n in range(4)]
        ops.call(store, "read", {"agent": "bob", "unread": True, "last": 2, "mark_read": True})

        os.rename(bob / "inbox.jsonl", bob / "inbox.jsonl.1")  # the rotation's rename, then SIGKILL
        sent.append(ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "m4"})["messages"][0]["id"])
        unread = ops.call(store, "read", {"agent": "bob", "unread": True, "last": 1, "mark_read": True})
        assert [m["id"] for m in unread["messages"]] == sent[2:3]
        assert unread["unread"] == 2

        # Again, with the cursor inside `.1`: that file is dropped by the rotation policy,
        # and reading resumes at the start of the file rotated now.
        for n in (5, 6):
            sent.append(ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": f"m{n}" * 40})["messages"][0]["id"])
        os.rename(bob / "inbox.jsonl", bob / "inbox.jsonl.1")
        unread = ops.call(store, "read", {"agent": "bob", "unread": True, "last": 0, "mark_read": True})
        assert [m["id"] for m in unread["messages"]] == sent[4:]
        assert unread["unread"] == 0


def _send_with_file_size_limit(relay_env: dict[str, str], limit: int, body: str) -> subprocess.CompletedProcess[str]:
    """`relayctl send` in a process that may not grow any file past `limit` bytes: the
    kernel then cuts the append short (or refuses it), as a full disk does."""
    import resource

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG / a short write, not death
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "relayctl", "--agent", "alice", "send", "bob", body],
        env=relay_env,
        preexec_fn=limit_file_size,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("room", [100, 0], ids=["short-write", "no-room"])
def test_a_cut_short_append_is_rolled_back_and_reported(relay_env: dict[str, str], store_dir: Path, room: int) -> None:
    with Store(str(store_dir)) as store:
        for name in ("alice", "bob"):
            ops.call(store, "register", {"name": name})
        ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "x" * 5000})
    inbox = store_dir / "agents" / "bob" / "inbox.jsonl"
    before = inbox.read_bytes()
    assert all(p.stat().st_size < len(before) for p in store_dir.rglob("*") if p.is_file() and p != inbox)

    proc = _send_with_file_size_limit(relay_env, len(before) + room, "y" * 1000)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert inbox.read_bytes() == before, "a partial record was left behind"

    with Store(str(store_dir)) as store:
        ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "later"})
        result = msgspec.to_builtins(read_all(store, "bob"))
    assert result["corrupt"] == []
    assert [m["body"][:5] for m in result["messages"]] == ["xxxxx", "later"]


def test_a_short_write_on_a_full_disk_says_so_even_when_space_frees_up_at_once(tmp_path: Path, monkeypatch) -> None:
    """Writers sharing a full disk: one's rollback can free space before another writes the
    rest of its short write. The append is still rolled back (DESIGN §2), and the error
    names the full disk rather than a bare "short write"."""
    from types import SimpleNamespace

    from relayd import fsio
    from relayd.errors import StoreError

    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a":1}\n')
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    real_write, real_statvfs = os.write, os.fstatvfs
    writes = []

    def short_then_fine(f: int, data) -> int:
        if f != fd:
            return real_write(f, data)
        writes.append(len(data))
        return real_write(f, bytes(data[:10]) if len(writes) == 1 else data)  # the second finds room

    monkeypatch.setattr(fsio.os, "write", short_then_fine)
    monkeypatch.setattr(fsio.os, "fstatvfs", lambda f: SimpleNamespace(f_bavail=0, f_frsize=4096) if f == fd else real_statvfs(f))
    try:
        with pytest.raises(StoreError, match=r"log.jsonl: no space left on device \(10 of 72 bytes written, rolled back\)"):
            fsio.append_lines(fd, b'{"bb":2}\n' * 8, "log.jsonl")
    finally:
        monkeypatch.undo()
        os.close(fd)
    assert path.read_bytes() == b'{"a":1}\n'
