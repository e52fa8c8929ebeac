"""relayd's group commit: fsync rounds overlap, but a reply never overtakes an earlier write.

The fsync itself is replaced by a function that records which files each round syncs and
holds the round until the test lets it finish, so the order in which rounds end at the
OS level is chosen by the test.
"""

from __future__ import annotations

import os
import re
import threading

import anyio
import pytest

from relayd.daemon.commit import GroupCommit

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class HeldSync:
    def __init__(self) -> None:
        self.rounds: list[set[int]] = []  # inodes synced, per round, in the order started
        self.gates: list[threading.Event] = []
        self.returned = 0
        self._lock = threading.Lock()

    def __call__(self, fds: list[int]) -> None:
        gate = threading.Event()
        with self._lock:
            self.rounds.append({os.fstat(fd).st_ino for fd in fds})
            self.gates.append(gate)
        assert gate.wait(10), "the test never let this round finish"
        with self._lock:
            self.returned += 1

    async def until(self, what, count: int) -> None:
        with anyio.fail_after(5):
            while what() < count:
                await anyio.sleep(0.001)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_rounds_overlap_and_become_durable_in_order(tmp_path) -> None:
    files = [os.open(tmp_path / name, os.O_CREAT | os.O_WRONLY, 0o600) for name in "abc"]
    inodes = [os.fstat(fd).st_ino for fd in files]
    before = _open_fds()
    sync = HeldSync()
    commit = GroupCommit(in_flight=2, sync=sync)
    finished: list[str] = []
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(commit.run)
        commit.file(files[0])
        commit.file(files[0])  # written twice in one round: synced once
        first = commit.pending()
        await sync.until(lambda: len(sync.rounds), 1)
        commit.file(files[1])
        second = commit.pending()
        await sync.until(lambda: len(sync.rounds), 2)  # started while the first still syncs
        commit.file(files[2])
        third = commit.pending()
        assert third is not second and commit.syncing()
        for batch, name in ((first, "first"), (second, "second"), (third, "third")):
            tasks.start_soon(_record, batch, name, finished)

        sync.gates[1].set()  # the later round's fsync ends first...
        await sync.until(lambda: sync.returned, 1)
        await anyio.sleep(0.05)
        assert finished == [] and not second.done.is_set()  # ...but it is not durable before the first
        assert len(sync.rounds) == 2  # both slots were taken: the third round waited

        sync.gates[0].set()
        with anyio.fail_after(5):
            await second.done.wait()
        await sync.until(lambda: len(sync.rounds), 3)
        sync.gates[2].set()
        with anyio.fail_after(5):
            await third.done.wait()
        await anyio.sleep(0)
        tasks.cancel_scope.cancel()
    assert finished == ["first", "second", "third"]
    assert sync.rounds == [{inodes[0]}, {inodes[1]}, {inodes[2]}]
    assert commit.batches == 3 and commit.fsynced_fds == 3
    assert _open_fds() == before  # every duplicate descriptor was closed
    for fd in files:
        os.close(fd)


async def _record(batch, name: str, finished: list[str]) -> None:
    await batch.done.wait()
    finished.append(name)


async def test_a_failed_fsync_fails_its_round_only(tmp_path) -> None:
    from relayd.errors import StoreError

    failing = os.open(tmp_path / "bad", os.O_CREAT | os.O_WRONLY, 0o600)
    fine = os.open(tmp_path / "good", os.O_CREAT | os.O_WRONLY, 0o600)
    bad_inode = os.fstat(failing).st_ino

    def sync(fds: list[int]) -> StoreError | None:
        if any(os.fstat(fd).st_ino == bad_inode for fd in fds):
            return StoreError("fsync failed: Input/output error; the last writes may not be durable")
        return None

    commit = GroupCommit(sync=sync)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(commit.run)
        commit.file(failing)
        bad = commit.pending()
        with anyio.fail_after(5):
            await bad.done.wait()
        commit.file(fine)
        good = commit.pending()
        with anyio.fail_after(5):
            await good.done.wait()
        tasks.cancel_scope.cancel()
    with pytest.raises(StoreError, match="fsync failed"):
        await bad.wait()
    await good.wait()  # no error: its own files were synced
    os.close(failing)
    os.close(fine)


async def test_with_one_round_at_a_time_the_next_waits_and_writes_gather(tmp_path) -> None:
    files = [os.open(tmp_path / name, os.O_CREAT | os.O_WRONLY, 0o600) for name in "ab"]
    sync = HeldSync()
    commit = GroupCommit(in_flight=1, sync=sync)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(commit.run)
        commit.file(files[0])
        first = commit.pending()
        await sync.until(lambda: len(sync.rounds), 1)
        commit.file(files[1])
        second = commit.pending()
        await anyio.sleep(0.05)
        assert len(sync.rounds) == 1  # the second waits for the slot...
        commit.file(files[0])  # ...and gathers what is written meanwhile
        assert commit.pending() is second
        sync.gates[0].set()
        with anyio.fail_after(5):
            await first.done.wait()
        await sync.until(lambda: len(sync.rounds), 2)
        sync.gates[1].set()
        with anyio.fail_after(5):
            await second.done.wait()
        tasks.cancel_scope.cancel()
    assert sync.rounds == [{os.fstat(files[0]).st_ino}, {os.fstat(files[0]).st_ino, os.fstat(files[1]).st_ino}]
    for fd in files:
        os.close(fd)


async def test_a_round_waits_for_the_requests_it_expects_and_gathers_them(tmp_path) -> None:
    files = [os.open(tmp_path / name, os.O_CREAT | os.O_WRONLY, 0o600) for name in "ab"]
    sync = HeldSync()
    commit = GroupCommit(in_flight=1, sync=sync)
    expecting = [True]
    ended: list[str] = []
    commit.hold = lambda: 30.0 if expecting[0] else 0.0  # (the wait ends only because the test says so)
    commit.held = lambda: ended.append("held")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(commit.run)
        commit.file(files[0])
        await anyio.sleep(0.05)
        assert sync.rounds == []  # held back: more requests are on their way
        commit.file(files[1])  # one arrives
        batch = commit.pending()
        commit.poke()
        await anyio.sleep(0.05)
        assert sync.rounds == []  # still expecting
        expecting[0] = False  # the last expected one arrived
        commit.poke()
        await sync.until(lambda: len(sync.rounds), 1)
        sync.gates[0].set()
        with anyio.fail_after(5):
            await batch.done.wait()
        tasks.cancel_scope.cancel()
    assert sync.rounds == [{os.fstat(files[0]).st_ino, os.fstat(files[1]).st_ino}]  # one round for both
    assert ended == ["held"]
    for fd in files:
        os.close(fd)


async def test_a_round_waits_for_expected_requests_only_so_long(tmp_path) -> None:
    written = os.open(tmp_path / "a", os.O_CREAT | os.O_WRONLY, 0o600)
    sync = HeldSync()
    commit = GroupCommit(in_flight=1, sync=sync)
    ended: list[str] = []
    commit.hold = lambda: 0.01  # a client that never sends again
    commit.held = lambda: ended.append("held")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(commit.run)
        commit.file(written)
        batch = commit.pending()
        await sync.until(lambda: len(sync.rounds), 1)  # the round went ahead without it
        sync.gates[0].set()
        with anyio.fail_after(5):
            await batch.done.wait()
        tasks.cancel_scope.cancel()
    assert ended == ["held"]  # and the server was told to stop expecting it
    os.close(written)


@pytest.mark.parametrize("op, params, temp", [
    ("set_status", {"agent": "storm", "status": "reviewing"}, r"\.meta\.json\..*\.tmp"),  # replaced
    ("reserve", {"agent": "storm", "pattern": "src/**", "repo": "/srv/app"}, r"\.[0-9a-f]{64}\.json\..*\.tmp"),  # created: linked into place
])
async def test_a_file_replaced_or_created_under_the_group_commit_is_on_disk_before_its_name(tmp_path, monkeypatch, op, params, temp) -> None:
    """DESIGN §2: temp file, fsync, then rename. The round fsyncs later; a crash between the
    rename and the round must not leave the name standing for content not yet on disk."""
    from relayd import ops
    from relayd.store import Store

    root = tmp_path / "store"
    with Store(str(root)) as plain:
        ops.call(plain, "init", {"preset": "overlord"})
    steps: list[tuple[str, str]] = []
    real_fsync, real_rename, real_link = os.fsync, os.rename, os.link

    def fsync(fd: int) -> None:
        steps.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def named(kind: str, real):
        def call(src, dst, *args, **kwargs):
            steps.append((kind, os.path.basename(src)))
            return real(src, dst, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", named("name", real_rename))
    monkeypatch.setattr(os, "link", named("name", real_link))
    with Store(str(root), sync=GroupCommit()) as store:  # (its round never runs here)
        ops.call(store, op, params)
    assert [kind for kind, file in steps if re.fullmatch(temp, file)] == ["fsync", "name"], steps
