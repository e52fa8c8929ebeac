"""Group commit: many store operations, one round of fsyncs, then all their replies.

Store functions run in the event-loop thread and call `Syncer.file(fd)` / `.dir(fd)` at
the points where direct mode would fsync. Here those calls only keep a duplicate of the
descriptor (one per distinct file) in the current batch. A worker thread fsyncs a whole
batch while the next one fills up; a reply is sent only once the batch holding its writes
is durable (DESIGN §2: "acknowledged" means durable).

Up to IN_FLIGHT rounds fsync at once, and they become durable in the order they were
taken. With one round at a time, busy clients fall into two groups taking turns: those
answered by a round send their next request while the other group's round syncs, and
wait for it to end before theirs can start -- two fsyncs per request cycle. With two,
their round starts at once (where the cores to spare for it exist: see IN_FLIGHT).

Busy clients fall into such groups with one round at a time too: a round takes the
requests that arrived while the last one synced, not those of the clients it just
answered, who are writing their next ones. So a round waits a moment (HOLD) for those
clients when the server expects them (`hold`): one round for both groups, half the fsyncs.

When a single request is waiting (one client calling in turn), the fsync runs in the loop
thread: there is nothing to overlap it with, and the hand-off to a worker thread would
be most of the latency the daemon adds.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from typing import Callable

import anyio
import structlog

from relayd.errors import StoreError
from relayd.fsio import Syncer, fsync_now

log = structlog.get_logger()


class Batch:
    __slots__ = ("fds", "files", "done", "synced", "error", "then", "waiting")

    def __init__(self) -> None:
        self.fds: list[int] = []  # duplicates, one per distinct file
        self.files: set[tuple[int, int]] = set()  # (st_dev, st_ino) of each
        self.done = anyio.Event()
        self.synced = False  # its fsyncs returned (it is done once every earlier round is)
        self.error: StoreError | None = None
        self.then: list[Callable[[], None]] = []  # run once durable, in order
        self.waiting: set[object] = set()  # connections whose replies wait for it (see on_durable)

    async def wait(self) -> None:
        """Until durable; raises the fsync failure for every request in the batch."""
        if not self.done.is_set():  # (waiting on a set Event would still yield once)
            await self.done.wait()
        if self.error is not None:
            raise self.error


def _sync_all(fds: list[int]) -> StoreError | None:
    """fsync each file (distinct already). Runs in a worker thread, so it touches nothing
    else: each os call there takes the GIL back from the loop thread once."""
    for fd in fds:
        try:
            os.fsync(fd)
        except OSError as exc:  # never retried: the kernel may have dropped the dirty pages
            return StoreError(f"fsync failed: {exc.strerror}; the last writes may not be durable")
    return None


# fsync rounds running at once, each in its own worker thread. A second round lets busy
# clients' requests be synced without waiting for the round before to end, at the price of
# more, smaller rounds (more CPU per request). Where the clients share two cores with
# relayd, that CPU is what runs out first: 20 Python clients x 1000 sends measured
# 2.3-2.5 s with one round at a time, 2.6-2.8 s with two (light clients: 2.5 s vs 1.9 s).
IN_FLIGHT = 2 if (os.cpu_count() or 1) > 2 else 1


# Seconds a round may wait for the clients that the last round answered to send their
# next request (`GroupCommit.hold`). Busy clients otherwise settle into two groups, each
# round taking one group's requests while the other's are being answered: twice the rounds,
# and each round costs fsyncs (measured: ~200 us of kernel CPU each here) and a fixed share
# of Python work. A client that is not coming back costs one such wait at most.
HOLD = 0.002


class GroupCommit(Syncer):
    """The daemon's Syncer. Create it inside the event loop; run `run()` in a task."""

    def __init__(self, in_flight: int = IN_FLIGHT, sync: Callable[[list[int]], StoreError | None] = _sync_all) -> None:
        self._sync_files = sync  # (tests pass one that holds a round until they let it finish)
        self._filling = Batch()
        self._syncing: list[Batch] = []  # rounds being fsynced, oldest first
        self.in_flight = in_flight
        self._slot_free = anyio.Event()
        self._wakeup = anyio.Event()
        self.batches = 0
        self.fsynced_fds = 0
        # Whether to fsync in the loop thread instead of a worker (set by the server).
        self.inline_when: Callable[[], bool] = lambda: False
        # Whether to wait before taking a round because more requests are about to arrive
        # (set by the server: the connections just answered have not sent again yet), and
        # what to do when the wait ends (the server stops expecting them).
        self.hold: Callable[[], float] = lambda: 0.0  # seconds still to wait; 0: none
        self.held: Callable[[], None] = lambda: None
        # Runs the writes queued for this round (set by the server; see Server.defer).
        self.collect: Callable[[], None] = lambda: None
        # Called when a round is durable (set by the server: it writes the replies of the
        # connections in `batch.waiting` then).
        self.on_durable: Callable[[Batch], None] = lambda batch: None

    # -- Syncer: called by store functions in the loop thread ---------------------------
    def file(self, fd: int) -> None:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        batch = self._filling
        if key not in batch.files:  # (a busy inbox is written many times a round: one fsync)
            batch.files.add(key)
            batch.fds.append(os.dup(fd))
        self._wakeup.set()

    dir = file

    def content(self, fd: int) -> None:
        # Not in the round: the name a file is given next must not stand for content that
        # is not on disk yet (fsio.Syncer.content).
        fsync_now(fd)

    def poke(self) -> None:
        """Writes are queued for `collect`: run a round for them."""
        self._wakeup.set()

    # -- for the server ----------------------------------------------------------------
    def pending(self) -> Batch | None:
        """The batch that holds writes made so far and not yet durable, if any (rounds
        become durable in order, so the newest one stands for all)."""
        if self._filling.fds:
            return self._filling
        return self._syncing[-1] if self._syncing else None

    def syncing(self) -> bool:
        return bool(self._syncing)

    def when_durable(self, then: Callable[[], None]) -> None:
        """Run `then` (in the loop thread) once everything written so far is durable."""
        batch = self.pending()
        if batch is None:
            then()
        else:
            batch.then.append(then)

    async def flushed(self) -> None:
        """Until everything written before this call is durable (errors ignored)."""
        batch = self.pending()
        if batch is not None:
            await batch.done.wait()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        rounds: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        workers = [threading.Thread(target=self._worker, args=(rounds, loop), name="fsync", daemon=True) for _ in range(self.in_flight)]
        for worker in workers:
            worker.start()
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                while len(self._syncing) >= self.in_flight:
                    # Writes keep gathering in the filling batch while every slot is busy.
                    # (Checked, not a semaphore: acquiring one yields a loop turn even when
                    # free, and a lone client would wait that turn on every request.)
                    self._slot_free = anyio.Event()
                    await self._slot_free.wait()
                if self.hold() > 0:
                    await self._gather()
                self.collect()
                # Every write so far is in this round: the wake-ups they gave (each write
                # pokes, Syncer.file) are answered by it, not by another turn of this loop.
                self._wakeup = anyio.Event()
                batch = self._filling
                if not batch.fds:
                    continue
                self._filling = Batch()
                self._syncing.append(batch)
                if self.inline_when() and len(self._syncing) == 1:
                    # One request waiting and nothing else to do meanwhile: a thread hand-off
                    # would only add latency.
                    self._synced(batch, self._sync_files(batch.fds))
                else:
                    rounds.put(batch)
        finally:
            with anyio.CancelScope(shield=True):  # the rounds handed out end, their descriptors closed
                while self._syncing:
                    self._slot_free = anyio.Event()
                    await self._slot_free.wait()
            for _ in workers:
                rounds.put(None)

    async def _gather(self) -> None:
        """Wait while `hold()` says requests are about to join the round, each time for at
        most what it says: each new request pokes the wakeup, and the wait ends once none
        is expected or the time is up."""
        while (wait := self.hold()) > 0:
            self._wakeup = anyio.Event()
            with anyio.move_on_after(wait) as waited:
                await self._wakeup.wait()
            if waited.cancelled_caught:
                break
        self.held()

    def _worker(self, rounds: "queue.SimpleQueue[Batch | None]", loop: asyncio.AbstractEventLoop) -> None:
        """A worker thread: fsync each round handed to it while the loop goes on (and may
        hand the next round to another worker), then report back to the loop thread. A
        plain thread and queue, not anyio's worker pool: its hand-off (a task, a cancel
        scope, a capacity limiter and a Condition per round) cost more CPU than the sends
        of a round shared."""
        while (batch := rounds.get()) is not None:
            try:
                error = self._sync_files(batch.fds)
            except Exception as exc:  # (a bug; the round's requests get an error, not a hang)
                error = StoreError(f"fsync failed: {exc}")
            loop.call_soon_threadsafe(self._synced, batch, error)

    def _synced(self, batch: Batch, error: StoreError | None) -> None:
        """In the loop thread: `batch`'s fsyncs returned. Rounds become durable in the
        order they were taken, so a reply never overtakes an earlier write: the rounds at
        the front that are synced are finished, a later one waits for those before it."""
        batch.synced = True
        batch.error = error
        while self._syncing and self._syncing[0].synced:
            self._finish(self._syncing[0])

    def _finish(self, batch: Batch) -> None:
        for fd in batch.fds:
            os.close(fd)
        self._syncing.remove(batch)
        self._slot_free.set()
        self.batches += 1
        self.fsynced_fds += len(batch.fds)
        batch.done.set()
        self.on_durable(batch)
        for then in batch.then:
            try:
                then()
            except Exception:  # a bug in one follower must not stop the commits
                log.exception("after a group commit round")
