"""Sidecar lock files (`relayd.fsio.Flock`): opened read-only, so letting go of one is no
change to a watcher (tests/client/test_watch.py); opened to write where the filesystem
needs that for an exclusive lock; never one linked to a file outside the store."""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Iterator

import pytest

from relayd import layout, ops
from relayd.errors import UnsafePath
from relayd.store import Store


@pytest.fixture
def store(store_dir) -> Iterator[Store]:
    with Store(str(store_dir)) as store:
        ops.call(store, "init", {})
        for name in ("alice", "bob"):
            ops.call(store, "register", {"name": name})
        yield store


def test_where_an_exclusive_lock_needs_a_descriptor_open_to_write_sends_still_work(store, monkeypatch) -> None:
    """NFS emulates flock with fcntl locks, and refuses an exclusive one on a descriptor
    opened read-only (EBADF, flock(2)). No NFS server runs here: `flock` is given that rule."""
    real_flock = fcntl.flock
    refused = []

    def nfs_flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            refused.append(fd)
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "over NFS"})
    monkeypatch.undo()
    assert refused, "no exclusive lock was tried read-only first"
    assert [m["body"] for m in ops.call(store, "read", {"agent": "bob"})["messages"]] == ["over NFS"]


def test_a_lock_file_linked_to_a_file_outside_the_store_is_refused(store, short_tmp) -> None:
    outside = short_tmp / "outside.lock"
    outside.write_text("")
    lock = os.path.join(store.root, layout.AGENTS, "bob", layout.INBOX_LOCK)
    if os.path.exists(lock):
        os.unlink(lock)
    os.link(outside, lock)
    with pytest.raises(UnsafePath, match="hard links"):
        ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "x"})
    fd = os.open(outside, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nothing of relay's holds it
    finally:
        os.close(fd)
    inbox = os.path.join(store.root, layout.AGENTS, "bob", layout.INBOX)
    assert not os.path.exists(inbox) or os.path.getsize(inbox) == 0
