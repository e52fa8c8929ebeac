"""gc --keep: read mail older than the limit leaves rotated inboxes; unread mail never does."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from relayd import ops
from relayd.inbox.append import deliver
from relayd.inbox.read import read_all
from relayd.owing import owed_line, policy_for
from relayd.records import Message
from relayd.store import Store
from relayd.timefmt import now, to_iso
from relayd.ulid import new_ulid

ROTATE = 4096


def _message(to: str, body: str, age: timedelta) -> Message:
    return Message(id=new_ulid(), ts=to_iso(now() - age), from_="alice", to=to, subject=body[:20], body=body)


FILLER = "x" * 3000


def _rotated_inbox(store_dir: Path, read_first: int, ages: list[int] = [40] * 10, owed: int | None = None) -> str:  # noqa: B006  (never mutated)
    """bob: ten old messages (`ages` in days), the first `read_first` read, then rotated
    out by a big message (unread), then one fresh message in the new inbox. Message number
    `owed` is sent with ack and not acknowledged (due again in an hour); its id is returned."""
    with Store(str(store_dir), fsync=False, rotate_bytes=ROTATE) as store:
        ops.call(store, "register", {"name": "bob"})
        olds = [_message("bob", f"old-{n}", timedelta(days=age)) for n, age in enumerate(ages)]
        if owed is not None:
            olds[owed].ack, olds[owed].attempt = True, 1
            store.rand = lambda: 1.0  # the full wait: not due again during the test
            olds[owed] = owed_line(store, olds[owed], policy_for(store, "1h", None))  # its line owes, as a send with ack writes it
        deliver(store, {"bob": olds})
        if read_first:
            ops.call(store, "read", {"agent": "bob", "unread": True, "last": read_first, "mark_read": True})
        deliver(store, {"bob": [_message("bob", FILLER, timedelta(days=35))]})  # rotates
        deliver(store, {"bob": [_message("bob", "fresh", timedelta(0))]})
        assert (store_dir / "agents" / "bob" / "inbox.jsonl.1").exists()
    return olds[owed].id if owed is not None else ""


def _bodies(store_dir: Path) -> list[str]:
    with Store(str(store_dir), fsync=False) as store:
        return [m.body for m in read_all(store, "bob").messages]


@pytest.mark.slow
def test_keep_drops_old_read_mail_from_the_rotated_file_and_never_unread(relayctl, store_dir: Path) -> None:
    _rotated_inbox(store_dir, read_first=6)
    before = _bodies(store_dir)

    dry = json.loads(relayctl("--json", "gc", "--keep", "30d", "--dry-run").stdout)
    assert dry["trimmed"] == [{"agent": "bob", "file": "agents/bob/inbox.jsonl.1", "dropped": 6, "kept": 4}]
    assert _bodies(store_dir) == before  # a dry run changes nothing
    shown = relayctl("gc", "--keep", "30d", "--dry-run").stdout
    assert "would drop 6 read messages of bob from agents/bob/inbox.jsonl.1 (4 kept)" in shown

    relayctl("gc", "--keep", "30d")
    assert _bodies(store_dir) == [f"old-{n}" for n in range(6, 10)] + [FILLER, "fresh"]
    unread = json.loads(relayctl("--json", "read", "--unread", "--last", "0", agent="bob").stdout)
    assert [m["body"] for m in unread] == [f"old-{n}" for n in range(6, 10)] + [FILLER, "fresh"]
    # Nothing left to drop: a second run reports nothing.
    assert json.loads(relayctl("--json", "gc", "--keep", "30d").stdout)["trimmed"] == []


@pytest.mark.slow
def test_newer_read_mail_stays_and_a_fully_dropped_file_goes(relayctl, store_dir: Path) -> None:
    _rotated_inbox(store_dir, read_first=10, ages=[40] * 5 + [20] * 5)
    relayctl("gc", "--keep", "30d")
    assert _bodies(store_dir) == [f"old-{n}" for n in range(5, 10)] + [FILLER, "fresh"]
    relayctl("gc", "--keep", "10d")
    assert not (store_dir / "agents" / "bob" / "inbox.jsonl.1").exists()
    assert _bodies(store_dir) == [FILLER, "fresh"]
    unread = json.loads(relayctl("--json", "read", "--unread", "--mark-read", agent="bob").stdout)
    assert [m["body"] for m in unread] == [FILLER, "fresh"]  # the cursor moved on to the current inbox
    relayctl("send", "bob", "later", agent="alice")
    assert [m["body"] for m in json.loads(relayctl("--json", "read", "--unread", agent="bob").stdout)] == ["later"]


@pytest.mark.slow
def test_config_json_sets_the_limit_and_no_limit_drops_nothing(relayctl, store_dir: Path) -> None:
    _rotated_inbox(store_dir, read_first=3)
    assert json.loads(relayctl("--json", "gc").stdout)["trimmed"] == []
    (store_dir / "config.json").write_text(json.dumps({"gc": {"keep": "30d"}}))
    assert json.loads(relayctl("--json", "gc").stdout)["trimmed"][0]["dropped"] == 3
    assert _bodies(store_dir)[:2] == ["old-3", "old-4"]


def test_a_bad_limit_is_one_line_and_removes_nothing(relayctl, store_dir: Path) -> None:
    _rotated_inbox(store_dir, read_first=6)
    proc = relayctl("gc", "--keep", "a while", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert len(_bodies(store_dir)) == 12


@pytest.mark.slow
def test_an_owed_message_stays_until_it_is_acknowledged(relayctl, store_dir: Path) -> None:
    owed_id = _rotated_inbox(store_dir, read_first=6, owed=2)
    assert json.loads(relayctl("--json", "gc", "--keep", "30d").stdout)["trimmed"][0]["dropped"] == 5
    assert _bodies(store_dir)[:2] == ["old-2", "old-6"]  # read and old, but still owed
    relayctl("ack", owed_id, agent="bob")
    assert json.loads(relayctl("--json", "gc", "--keep", "30d").stdout)["trimmed"][0]["dropped"] == 1
    assert _bodies(store_dir)[0] == "old-6"
