"""Group commit: many store operations, one round of fsyncs, then all their replies.

Store functions run in the event-loop thread and call `Syncer.file(fd)` / `.dir(fd)` at
the points where direct mode would fsync. Here those calls only keep a duplicate of the
descriptor in the current batch. One task fsyncs a whole batch in a worker thread while
the next batch fills up; a reply is sent only once the batch holding its writes is
durable (DESIGN §2: "acknowledged" means durable).

When a single request is waiting (one client calling in turn), the fsync runs in the loop
thread: there is nothing to overlap it with, and the hand-off to a worker thread would
be most of the latency the daemon adds.
"""

from __future__ import annotations

import os
from typing import Callable

import anyio

from relayd.errors import StoreError
from relayd.fsio import Syncer


class Batch:
    __slots__ = ("fds", "done", "error")

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.done = anyio.Event()
        self.error: StoreError | None = None

    async def wait(self) -> None:
        """Until durable; raises the fsync failure for every request in the batch."""
        if not self.done.is_set():  # (waiting on a set Event would still yield once)
            await self.done.wait()
        if self.error is not None:
            raise self.error


def _sync_all(fds: list[int]) -> StoreError | None:
    """fsync each distinct file once; close every duplicate. Runs in a worker thread."""
    seen: set[tuple[int, int]] = set()
    failure: StoreError | None = None
    for fd in fds:
        try:
            if failure is None:
                info = os.fstat(fd)
                key = (info.st_dev, info.st_ino)
                if key not in seen:
                    seen.add(key)
                    os.fsync(fd)
        except OSError as exc:  # never retried: the kernel may have dropped the dirty pages
            failure = StoreError(f"fsync failed: {exc.strerror}; the last writes may not be durable")
        finally:
            os.close(fd)
    return failure


class GroupCommit(Syncer):
    """The daemon's Syncer. Create it inside the event loop; run `run()` in a task."""

    def __init__(self) -> None:
        self._filling = Batch()
        self._syncing: Batch | None = None
        self._wakeup = anyio.Event()
        self.batches = 0
        self.fsynced_fds = 0
        # Whether to fsync in the loop thread instead of a worker (set by the server).
        self.inline_when: Callable[[], bool] = lambda: False
        # Runs the writes queued for this round (set by the server; see Server.defer).
        self.collect: Callable[[], None] = lambda: None
        # Called when a round is durable (set by the server: it writes the replies then).
        self.on_durable: Callable[[], None] = lambda: None

    # -- Syncer: called by store functions in the loop thread ---------------------------
    def file(self, fd: int) -> None:
        self._filling.fds.append(os.dup(fd))
        self._wakeup.set()

    dir = file

    def poke(self) -> None:
        """Writes are queued for `collect`: run a round for them."""
        self._wakeup.set()

    # -- for the server ----------------------------------------------------------------
    def pending(self) -> Batch | None:
        """The batch that holds writes made so far and not yet durable, if any."""
        if self._filling.fds:
            return self._filling
        return self._syncing

    async def flushed(self) -> None:
        """Until everything written before this call is durable (errors ignored)."""
        for batch in (self._syncing, self._filling if self._filling.fds else None):
            if batch is not None:
                await batch.done.wait()

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
            self.collect()
            batch = self._filling
            if not batch.fds:
                continue
            self._filling = Batch()
            self._syncing = batch
            try:
                if self.inline_when():
                    # One request waiting and nothing else to do meanwhile: a thread hand-off
                    # would only add latency.
                    batch.error = _sync_all(batch.fds)
                else:
                    batch.error = await anyio.to_thread.run_sync(_sync_all, batch.fds, abandon_on_cancel=False)
            finally:
                self._syncing = None
                self.batches += 1
                self.fsynced_fds += len(batch.fds)
                batch.done.set()
            self.on_durable()
