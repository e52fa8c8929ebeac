"""Appending with rotation (`relayd.fsio.open_appending`), the one way every line file of
the store grows: a file it creates has its directory fsynced (DESIGN §2), and a file that
would pass the rotation size is moved away first. Checked through each caller with a
syncer that records what it was asked to make durable."""

from __future__ import annotations

import os

import pytest

from relayd import layout, ops, remote
from relayd.delivery import receipts
from relayd.fsio import Syncer
from relayd.records import Message
from relayd.store import Store
from relayd.timefmt import now_iso
from relayd.ulid import new_ulid


class Recording(Syncer):
    """Fsyncs as direct mode does, and remembers the path of every fd it synced."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def file(self, fd: int) -> None:
        self.calls.append(("file", os.readlink(f"/proc/self/fd/{fd}")))
        super().file(fd)

    def dir(self, fd: int) -> None:
        self.calls.append(("dir", os.readlink(f"/proc/self/fd/{fd}")))
        super().dir(fd)


def emit_event(store: Store) -> str:
    store.emit(store.event("presence", action="stale", agent="alice"))
    return os.path.join(store.root, layout.EVENTS)


def send_mail(store: Store) -> str:
    ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "hello"})
    return os.path.join(store.root, layout.AGENTS, "bob", layout.INBOX)


def queue_for_another_host(store: Store) -> str:
    message = Message(id=new_ulid(), ts=now_iso(), from_="alice", to="carol", subject="hi", body="hi")
    remote.append_outbox(store, "beta", [message])
    return os.path.join(store.root, layout.BRIDGE, layout.OUTBOX)


def log_owed_record(store: Store) -> str:
    receipts.write(store, [receipts.Receipt(ts=now_iso(), step="announced", to="bob", how="tmux")], sync=store.sync)  # as an inbox rotation hands owed lines over
    return os.path.join(store.root, layout.DELIVERY_LOG)


@pytest.mark.parametrize(
    "append", [emit_event, send_mail, queue_for_another_host, log_owed_record], ids=["event log", "inbox", "bridge outbox", "delivery log"]
)
def test_creating_a_line_file_fsyncs_its_directory_and_the_data(store_dir, append) -> None:
    with Store(str(store_dir)) as store:
        for name in ("alice", "bob"):
            ops.call(store, "register", {"name": name})
        for leftover in (layout.EVENTS, layout.EVENTS_ROTATED):
            if os.path.exists(os.path.join(store.root, leftover)):
                os.unlink(os.path.join(store.root, leftover))  # the registrations' events: start without a log
    with Store(str(store_dir), sync=(recording := Recording())) as store:
        path = append(store)
    assert ("dir", os.path.dirname(path)) in recording.calls, recording.calls
    assert ("file", path) in recording.calls, recording.calls


def test_appending_to_an_existing_file_fsyncs_only_the_data(store_dir) -> None:
    with Store(str(store_dir)) as store:
        ops.call(store, "register", {"name": "alice"})
    with Store(str(store_dir), sync=(recording := Recording())) as store:
        path = emit_event(store)
    assert recording.calls == [("file", path)]


@pytest.mark.parametrize("append,rotated", [(emit_event, layout.EVENTS_ROTATED), (send_mail, layout.INBOX_ROTATED)], ids=["event log", "inbox"])
def test_a_full_file_is_rotated_and_the_new_one_made_durable(store_dir, append, rotated) -> None:
    with Store(str(store_dir), rotate_bytes=4096) as store:
        for name in ("alice", "bob"):
            ops.call(store, "register", {"name": name})
        path = append(store)
        with open(path, "ab") as fh:
            fh.write(b'{"filler":"' + b"x" * 4096 + b'"}\n')  # past the rotation size
        before = os.stat(path).st_ino
    with Store(str(store_dir), rotate_bytes=4096, sync=(recording := Recording())) as store:
        append(store)
        assert os.stat(os.path.join(os.path.dirname(path), rotated)).st_ino == before  # moved away whole
        assert os.path.getsize(path) < 4096
    assert ("dir", os.path.dirname(path)) in recording.calls and ("file", path) in recording.calls
