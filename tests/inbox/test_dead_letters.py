"""Rotated-out unread mail in dead_letter/ is bounded by size at every rotation and by age in
`gc` (relayd.inbox.dead_letters); the age comes from an injected time, not a wait."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from relayd import layout, ops
from relayd.inbox import dead_letters
from relayd.store import Store

ROTATE = 64 << 10
BODY = "x" * (30 << 10)  # two to an inbox file


@pytest.fixture
def store(store_dir: Path) -> Iterator[Store]:
    with Store(str(store_dir), fsync=False, rotate_bytes=ROTATE) as opened:
        ops.call(opened, "init", {})
        for name in ("alice", "bob"):
            ops.call(opened, "register", {"name": name})
        yield opened


def dead_letter_bytes(store: Store) -> int:
    return sum(f.size for f in dead_letters.rotated(store))


def unread_flood(store: Store, count: int) -> None:
    for n in range(count):
        ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": f"{n} {BODY}"})


def test_a_flood_of_unread_mail_keeps_dead_letters_within_their_size(store: Store, store_dir: Path) -> None:
    (store_dir / "config.json").write_text(json.dumps({"gc": {"dead_letter_mib": 1}}))
    unread_flood(store, 80)  # ~2.4 MiB, rotated ~40 times; without the limit ~39 files of 62 KB
    assert 1 << 20 >= dead_letter_bytes(store) > (1 << 20) - 2 * ROTATE
    # Each deletion is announced (the event log rotates at the same small size here).
    events = [json.loads(line) for line in (store_dir / layout.EVENTS).read_text().splitlines()]
    trimmed = [e for e in events if e.get("action") == "dead_letter_trimmed"]
    assert trimmed and all(e["agent"] == "bob" and "past 1 MiB" in e["status"] for e in trimmed)
    # The newest are kept: the oldest went first. Another rotation deletes the oldest left.
    kept = dead_letters.rotated(store)
    unread_flood(store, 2)
    after = dead_letters.rotated(store)
    assert after[0].moved_ms >= kept[0].moved_ms and after[-1].moved_ms > kept[-1].moved_ms and kept[0] not in after
    # The inbox itself is untouched: its newest mail is there.
    assert ops.call(store, "read", {"agent": "bob", "last": 1})["messages"][0]["body"].startswith("1 ")


def test_gc_deletes_dead_letters_older_than_their_age(store: Store, store_dir: Path) -> None:
    unread_flood(store, 12)
    files = dead_letters.rotated(store)
    assert len(files) >= 3
    newest = files[-1].moved_ms / 1000
    # A month and a day later, by the injected time, all are past the default 30 days.
    assert dead_letters.trim(store, newest + 31 * 86400, "30d", 256, dry_run=True) == [
        dead_letters.DeletedDeadLetter(file=f"dead_letter/{f.name}", agent="bob", bytes=f.size, why="older than 30d") for f in files
    ]
    assert len(dead_letters.rotated(store)) == len(files)  # a dry run removes nothing
    # Only the one moved last is younger than a second before it was moved.
    gone = dead_letters.trim(store, newest + 0.5, "1s", 256)
    assert [t.file for t in gone] == [f"dead_letter/{f.name}" for f in files if newest * 1000 - f.moved_ms > 500]
    assert dead_letters.rotated(store)[-1].name == files[-1].name
    # gc itself, with a size given on the command line's terms.
    shown = ops.call(store, "gc", {"dead_letter_mib": 1, "dead_letter_keep": "never"})
    assert shown["dead_letters"] == []  # all that is left fits in 1 MiB


def test_gc_dead_letter_settings_are_checked_before_anything_goes(store: Store) -> None:
    from relayd.errors import UsageError

    unread_flood(store, 12)
    before = dead_letters.rotated(store)
    with pytest.raises(UsageError):
        ops.call(store, "gc", {"dead_letter_keep": "soon"})
    with pytest.raises(UsageError):
        ops.call(store, "gc", {"dead_letter_mib": 0})
    assert dead_letters.rotated(store) == before


@pytest.mark.slow
def test_relayctl_gc_names_each_dead_letter_it_would_delete(store: Store, relayctl) -> None:
    unread_flood(store, 120)  # ~3.5 MiB of dead letters, within the default 256 MiB
    files = dead_letters.rotated(store)
    shown = relayctl("gc", "--dead-letter-mib", "1", "--dry-run").stdout.splitlines()
    said = [line for line in shown if line.startswith("would delete dead_letter/")]
    assert said and said[0] == f"would delete dead_letter/{files[0].name} ({files[0].size} bytes of unread mail of bob: past 1 MiB of dead letters)"
    assert len(dead_letters.rotated(store)) == len(files)
    relayctl("gc", "--dead-letter-mib", "1")
    assert 1 << 20 >= dead_letter_bytes(store) and dead_letters.rotated(store)[-1] == files[-1]
    refused = relayctl("gc", "--dead-letter-keep", "soon", check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
